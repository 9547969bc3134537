"""model/tensor_bundle.py reads TensorFlow checkpoints with NumPy alone: every tensor TensorFlow's
own reader sees (several dtypes, an index of several blocks, a TF2 object-graph string skipped),
official-style TF1 checkpoints through model/checkpoints.py, and damaged files as one error
naming the file."""
import numpy as np
import pytest

from model.tensor_bundle import (TensorBundleError, _snappy_decompress, latest_prefix,
                                 read_tensor_bundle)


def test_snappy_literal_and_overlapping_copy():
    # length 12; literal "abc"; copy 9 bytes from offset 3 (overlapping its own output)
    assert _snappy_decompress(b"\x0c\x08abc\x15\x03") == b"abcabcabcabc"
    with pytest.raises(TensorBundleError):
        _snappy_decompress(b"\x0d\x08abc\x15\x03")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(0)
    values = {f"electra/encoder/layer_{i}/attention/self/query/kernel_{j}":
              rng.normal(size=(3, 5)).astype(np.float32) for i in range(40) for j in range(5)}
    values.update({"f16": rng.normal(size=(7,)).astype(np.float16),
                   "f64": rng.normal(size=(2, 2)), "i32": np.arange(6, dtype=np.int32),
                   "i64": np.arange(3, dtype=np.int64) - 5, "flag": np.array([True, False]),
                   "scalar": np.float32(2.5), "empty": np.zeros((0, 4), np.float32)})
    # ~500 KB of index: more than one table block (TensorFlow's blocks hold ~256 KB).
    values.update({f"adam_m/{i:05d}/{rng.bytes(40).hex()}": np.float32(i) for i in range(5000)})
    root = tmp_path_factory.mktemp("bundle")
    prefix = str(root / "model.ckpt-7")
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])
    (root / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\n'
                                     'all_model_checkpoint_paths: "model.ckpt-7"\n')
    # A TF2 object-based checkpoint: bfloat16 and the object graph (a string tensor).
    ckpt = tf.train.Checkpoint(w=tf.Variable(tf.constant([1.5, -2.0], tf.bfloat16)),
                               v=tf.Variable(values["f64"]))
    tf2_prefix = ckpt.write(str(root / "tf2" / "ckpt"))
    return values, prefix, tf2_prefix


def test_every_tensor_as_tensorflow_reads_it(saved):
    import tensorflow as tf
    values, prefix, tf2_prefix = saved
    tensors = read_tensor_bundle(prefix)
    assert sorted(tensors) == sorted(values)
    for name, value in values.items():
        np.testing.assert_array_equal(tensors[name], value)
        assert tensors[name].dtype == np.asarray(value).dtype, name
    reader = tf.train.load_checkpoint(tf2_prefix)
    numeric = {n for n, d in reader.get_variable_to_dtype_map().items() if d != tf.string}
    tf2 = read_tensor_bundle(tf2_prefix)
    assert set(tf2) == numeric and len(numeric) == 2
    for name in numeric:
        np.testing.assert_array_equal(np.asarray(tf2[name], np.float64),
                                      np.asarray(reader.get_tensor(name), np.float64))


def test_latest_prefix_follows_the_checkpoint_file(saved, tmp_path):
    _, prefix, _ = saved
    import os
    assert latest_prefix(os.path.dirname(prefix)) == prefix
    assert latest_prefix(str(tmp_path)) is None


def test_official_layout_through_resolve_checkpoint(tmp_path):
    """save_pretrained(format="tf1") writes the official names; resolve_checkpoint reads them
    back (and infers the config) through the NumPy reader."""
    pytest.importorskip("tensorflow")
    from model import ConvBertConfig, ConvBertModel
    from model.checkpoints import resolve_checkpoint, save_pretrained
    config = ConvBertConfig(vocab_size=50, hidden_size=32, embedding_size=16,
                            num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = ConvBertModel(config)
    ones = np.ones((1, 8), np.int32)
    model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    save_pretrained(model, str(tmp_path / "tf1"), format="tf1")
    fmt, loaded_config, tensors = resolve_checkpoint(str(tmp_path / "tf1"))
    assert fmt == "tf1" and loaded_config.hidden_size == 32
    for name, variable in model.weight_map().items():
        np.testing.assert_array_equal(tensors[name], np.asarray(variable.numpy()))


def test_damaged_files_name_the_file(saved, tmp_path):
    import shutil
    _, prefix, _ = saved
    copy = str(tmp_path / "model.ckpt-7")
    shutil.copy(prefix + ".index", copy + ".index")
    with pytest.raises(TensorBundleError, match=r"model.ckpt-7.data-00000-of-00001: data shard "
                                                r"missing"):
        read_tensor_bundle(copy)
    data = open(prefix + ".index", "rb").read()
    with open(copy + ".index", "wb") as f:
        f.write(data[:-3])
    with pytest.raises(TensorBundleError, match=r"model.ckpt-7.index: "):
        read_tensor_bundle(copy)
    from model.checkpoints import CheckpointError, read_tf1_checkpoint
    with pytest.raises(CheckpointError, match="not a readable TF checkpoint"):
        read_tf1_checkpoint(copy)
