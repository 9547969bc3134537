"""configs/*.json load and mean what they say; scripts/convert_checkpoint.py converts and refuses."""
import os
import subprocess
import sys

import numpy as np
import pytest

from model import ConvBertConfig, ConvBertModel
from model.config import CONFIGS_DIR, ConfigError
from tests.conftest import REPO_ROOT, shapes_only
from tests.model.test_checkpoints import TINY, tiny_inputs


def test_every_shipped_config_loads():
    names = sorted(f[:-5] for f in os.listdir(CONFIGS_DIR) if f.endswith(".json"))
    assert len(names) >= 16
    for name in names:
        ConvBertConfig.from_name(name)
    assert ConvBertConfig.from_name("convbert_medium_small") == ConvBertConfig.from_size("medium-small")
    assert ConvBertConfig.from_any("base") == ConvBertConfig.from_name("convbert_base")
    electra = ConvBertConfig.from_name("electra_small")
    assert (electra.head_ratio, electra.conv_type) == (1, "none")
    larger = ConvBertConfig.from_name("ablation_small_bnk_gl_larger")
    assert (larger.hidden_size, larger.head_size, larger.num_groups) == (432, 54, 2)
    assert shapes_only(lambda: ConvBertModel(ConvBertConfig.from_name("ablation_small_bnk"))
                       ).count_params() == 11_905_536
    with pytest.raises(ConfigError, match="unknown model name"):
        ConvBertConfig.from_name("convbert_huge")


def run_convert(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "convert_checkpoint.py"),
                           *args], env=env, capture_output=True, text=True, timeout=300)


def test_convert_checkpoint_cli_round_trip(tmp_path):
    model = ConvBertModel(ConvBertConfig(**TINY))
    model.save_pretrained(tmp_path / "tf1", format="tf1")
    os.remove(tmp_path / "tf1" / "convbert_config.json")  # an official-style checkpoint
    done = run_convert("--input", str(tmp_path / "tf1"), "--output", str(tmp_path / "hf"),
                       "--format", "hf")
    assert done.returncode == 0, done.stderr[-2000:]
    done = run_convert("--input", str(tmp_path / "hf"), "--output", str(tmp_path / "native"),
                       "--format", "keras")
    assert done.returncode == 0, done.stderr[-2000:]
    again = ConvBertModel.from_pretrained(tmp_path / "native")
    x = tiny_inputs()
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(again(x)))


def test_convert_checkpoint_cli_errors(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    done = run_convert("--input", str(tmp_path / "pytorch_model.bin"), "--output", str(tmp_path / "o"))
    assert done.returncode != 0
    assert "pickle" in done.stderr and "pytorch_model.bin" in done.stderr
    assert not (tmp_path / "o").exists()
    (tmp_path / "empty").mkdir()
    done = run_convert("--input", str(tmp_path / "empty"), "--output", str(tmp_path / "o"))
    assert done.returncode != 0 and "not a ConvBERT checkpoint" in done.stderr
