"""scripts/pretrain_{small,medium_small,base}.sh: the flags each hands run_pretraining.py for
DATA_DIR / BUCKET / TPU (a fake interpreter records them; nothing is trained or contacted)."""
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_PYTHON = """#!/bin/sh
shift   # run_pretraining.py
printf '%s\\n' "$@"
"""


def flags_of(tmp_path, script, env, *args):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TPU", "BUCKET", "DATA_DIR", "KERAS_BACKEND")}
    environ.update(env, PYTHON=str(fake))
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", script), *args], env=environ,
                          capture_output=True, text=True, timeout=60)
    return proc, proc.stdout.split()


@pytest.mark.parametrize("script,size", [("pretrain_small.sh", "small"),
                                         ("pretrain_medium_small.sh", "medium-small"),
                                         ("pretrain_base.sh", "base")])
def test_local_data_dir(tmp_path, script, size):
    proc, flags = flags_of(tmp_path, script, {"DATA_DIR": "/data/owt"}, "--precision=bf16")
    assert proc.returncode == 0, proc.stderr
    assert flags == ["--data_dir=/data/owt", f"--model_size={size}",
                     f"--model_name=convbert_{size.replace('-', '_')}", "--precision=bf16"]


def test_bucket_and_tpu(tmp_path):
    proc, flags = flags_of(tmp_path, "pretrain_base.sh",
                           {"BUCKET": "gs://b/owt", "TPU": "local"})
    assert proc.returncode == 0, proc.stderr
    assert flags == ["--data_dir=gs://b/owt", "--model_size=base", "--model_name=convbert_base",
                     "--tpu=local", "--steps_per_loop=200"]
    _, flags = flags_of(tmp_path, "pretrain_base.sh", {"BUCKET": "gs://b/owt", "TPU": "v3"},
                        "--steps_per_loop=50", "--tpu_zone=z")
    assert flags[3:] == ["--tpu=v3", "--steps_per_loop=50", "--tpu_zone=z"]
    proc, flags = flags_of(tmp_path, "pretrain_base.sh", {"BUCKET": "gs://b/owt", "TPU": "local",
                                                          "KERAS_BACKEND": "jax"})
    assert "--tpu=local" not in flags and "KERAS_BACKEND=jax uses every local device" in proc.stderr


def test_no_data_is_one_line(tmp_path):
    proc, _ = flags_of(tmp_path, "pretrain_small.sh", {})
    assert proc.returncode != 0 and "set DATA_DIR (or BUCKET=gs://...)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
