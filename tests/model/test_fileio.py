"""base/fileio.py: one file API for local paths and any filesystem tf.io.gfile knows (issue 21).

ram:// (TensorFlow's in-memory filesystem) stands in for a gs:// bucket; the local half is also
checked with `import tensorflow` made impossible (the JAX backend's machine has no TensorFlow).
"""
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from base import fileio
from tests.conftest import REPO_ROOT, tensorflow_pass_only


def test_local_round_trip_atomic_writes_glob_and_dirs(tmp_path):
    root = str(tmp_path / "run")
    fileio.write_text_atomic(os.path.join(root, "sub", "a.json"), "{}\n")   # parents created
    fileio.write_bytes_atomic(os.path.join(root, "b.bin"), b"\x00\x01")
    fileio.write_bytes_atomic(os.path.join(root, "b.bin"), b"\x02")         # replaced
    assert fileio.read_text(os.path.join(root, "sub", "a.json")) == "{}\n"
    assert fileio.read_bytes(os.path.join(root, "b.bin")) == b"\x02"
    assert fileio.listdir(root) == ["b.bin", "sub"]                          # no temporary left
    assert fileio.glob(os.path.join(root, "*", "*.json")) == [os.path.join(root, "sub", "a.json")]
    assert fileio.isdir(os.path.join(root, "sub")) and fileio.isfile(os.path.join(root, "b.bin"))
    fileio.rename(os.path.join(root, "sub"), os.path.join(root, "moved"))
    assert fileio.listdir(root) == ["b.bin", "moved"]
    fileio.remove(os.path.join(root, "b.bin"))
    fileio.remove_tree(root)
    fileio.remove_tree(root)   # absent: nothing to do
    assert not fileio.exists(root)
    with pytest.raises(FileNotFoundError):
        fileio.read_bytes(os.path.join(root, "b.bin"))


@pytest.fixture
def ram_root():
    tf = pytest.importorskip("tensorflow")
    root = f"ram://fileio_test_{uuid.uuid4().hex[:8]}"
    yield root
    if tf.io.gfile.exists(root):
        tf.io.gfile.rmtree(root)


def test_ram_round_trip_atomic_writes_glob_and_exists(ram_root, tmp_path, monkeypatch):
    import tensorflow as tf
    monkeypatch.chdir(tmp_path)   # a local folder named `ram:` would appear here
    fileio.write_text_atomic(f"{ram_root}/run/cfg.json", '{"a": 1}\n')
    fileio.write_bytes_atomic(f"{ram_root}/run/w.bin", b"old")
    fileio.write_bytes_atomic(f"{ram_root}/run/w.bin", b"new")
    fileio.write_bytes_atomic(f"{ram_root}/run/checkpoints/ckpt-1", b"1")
    assert fileio.read_text(f"{ram_root}/run/cfg.json") == '{"a": 1}\n'
    with tf.io.gfile.GFile(f"{ram_root}/run/w.bin", "rb") as f:
        assert f.read() == b"new"
    assert fileio.listdir(f"{ram_root}/run") == ["cfg.json", "checkpoints", "w.bin"]  # no tmp
    assert fileio.glob(f"{ram_root}/run/*.bin") == [f"{ram_root}/run/w.bin"]
    assert fileio.isdir(f"{ram_root}/run") and fileio.isfile(f"{ram_root}/run/w.bin")
    assert not fileio.isdir(f"{ram_root}/run/w.bin")
    # ram:// itself says a prefix of a name exists; fileio does not.
    assert tf.io.gfile.exists(f"{ram_root}/run/checkpoint")
    assert not fileio.exists(f"{ram_root}/run/checkpoint")
    assert not fileio.exists(f"{ram_root}/run/w") and not fileio.isdir(f"{ram_root}/run/check")
    with pytest.raises(FileNotFoundError):
        fileio.read_bytes(f"{ram_root}/run/missing")
    with pytest.raises(FileNotFoundError):
        fileio.listdir(f"{ram_root}/nowhere")
    # Directories move with their files (ram:// renames only the directory's own entry) and
    # replace_dir swaps a finished directory in for an older one.
    fileio.rename(f"{ram_root}/run", f"{ram_root}/moved")
    assert not fileio.exists(f"{ram_root}/run")
    assert fileio.read_bytes(f"{ram_root}/moved/checkpoints/ckpt-1") == b"1"
    fileio.write_text_atomic(f"{ram_root}/new/cfg.json", "{}")
    fileio.replace_dir(f"{ram_root}/new", f"{ram_root}/moved")
    assert fileio.listdir(ram_root) == ["moved"]
    assert fileio.listdir(f"{ram_root}/moved") == ["cfg.json"]
    assert fileio.read_text(f"{ram_root}/moved/cfg.json") == "{}"
    fileio.remove(f"{ram_root}/moved/cfg.json")
    fileio.remove_tree(f"{ram_root}/moved")
    assert not fileio.exists(f"{ram_root}/moved")
    assert list(tmp_path.iterdir()) == []


def test_config_and_checkpoint_round_trip_on_ram(ram_root):
    import numpy as np
    from model import ConvBertConfig, ConvBertModel
    config = ConvBertConfig(vocab_size=50, hidden_size=32, embedding_size=16, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=16)
    config.to_json(f"{ram_root}/cfg.json")
    assert ConvBertConfig.from_json(f"{ram_root}/cfg.json") == config
    assert ConvBertConfig.from_any(f"{ram_root}/cfg.json") == config
    model = ConvBertModel(config)
    ids = np.array([[1, 2, 3, 0]], dtype="int32")
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
              "segment_ids": np.zeros_like(ids)}
    model(inputs)
    for fmt in ("keras", "hf", "tf1"):
        model.save_pretrained(f"{ram_root}/{fmt}", format=fmt)
        loaded = ConvBertModel.from_pretrained(f"{ram_root}/{fmt}")
        assert loaded.load_report["format"] == fmt
        np.testing.assert_allclose(np.asarray(loaded(inputs)), np.asarray(model(inputs)),
                                   atol=1e-6)
    assert not [n for n in fileio.listdir(f"{ram_root}/tf1") if "tmp" in n]


NO_TF = textwrap.dedent("""
    import sys
    class BlockTF:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError("TensorFlow is blocked in this test")
    sys.meta_path.insert(0, BlockTF())
    import model
    from base import fileio
    from model.config import ConvBertConfig
    root = sys.argv[1]
    fileio.write_text_atomic(root + "/sub/x.txt", "hello")
    assert fileio.read_text(root + "/sub/x.txt") == "hello"
    assert fileio.exists(root + "/sub") and fileio.glob(root + "/sub/*") == [root + "/sub/x.txt"]
    ConvBertConfig.from_size("small").to_json(root + "/cfg.json")
    assert ConvBertConfig.from_json(root + "/cfg.json").hidden_size == 256
    try:
        fileio.exists("gs://bucket/x")
    except fileio.FileIOError as e:
        assert "needs TensorFlow" in str(e)
    else:
        raise AssertionError("a gs:// path without TensorFlow")
    assert "tensorflow" not in sys.modules
    print("ok")
""")


@tensorflow_pass_only      # its JAX process is a subprocess of its own
def test_model_imports_and_fileio_works_without_tensorflow(tmp_path):
    pytest.importorskip("jax")   # `import model` needs a Keras backend other than TensorFlow
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", NO_TF, str(tmp_path)], cwd=str(REPO_ROOT),
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
