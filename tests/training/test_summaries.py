"""training/summaries.py: TensorBoard scalars written without TensorFlow (both backends' one
writer) are the records `tf.summary.write` writes, in TFRecord framing with real masked CRC32Cs
(base/protowire.py), read back by TensorBoard's own reader; bucket paths go through base/fileio."""
import struct
import uuid

import pytest

tf = pytest.importorskip("tensorflow")

from base import protowire  # noqa: E402
from training.summaries import ScalarWriter  # noqa: E402


def events(path):
    return [tf.compat.v1.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]


def test_crc32c_and_framing_are_tensorflows(tmp_path):
    assert protowire.crc32c(b"123456789") == 0xE3069283      # the CRC-32C check value
    records = [b"", b"x", bytes(range(256)) * 3]
    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        assert f.read() == b"".join(protowire.tfrecord_frame(r) for r in records)


def test_events_are_the_ones_tf_summary_writes(tmp_path):
    """The same Event protos as tf.summary.write of a float32 scalar with the "scalars" plugin's
    metadata (how the writer was written before it needed no TensorFlow), but the wall time."""
    from tensorflow.core.framework import summary_pb2
    scalars = {"loss": 1.5, "learning_rate": 2e-4, "big": 1e39, "steps": 3}
    ours = ScalarWriter(str(tmp_path / "ours"), prefix="train/")
    ours.write(scalars, 7)
    ours.write({"loss": 1.25}, 8, prefix="")
    ours.close()
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
        plugin_name="scalars")).SerializeToString()
    theirs = tf.summary.create_file_writer(str(tmp_path / "tf"))
    with theirs.as_default():
        for tags, step in (({f"train/{k}": v for k, v in scalars.items()}, 7), ({"loss": 1.25}, 8)):
            for tag, value in tags.items():
                tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step,
                                 metadata=metadata)
    theirs.close()
    (ours_file,), (tf_file,) = (list((tmp_path / d).iterdir()) for d in ("ours", "tf"))
    assert ours_file.name.startswith("events.out.tfevents.") and ours_file.name.endswith(".v2")
    a, b = events(ours_file), events(tf_file)
    assert a[0].file_version == b[0].file_version == "brain.Event:2"
    assert len(a) == len(b) == 6
    for x, y in zip(a[1:], b[1:]):
        x.wall_time = y.wall_time = 0
        assert x.SerializeToString() == y.SerializeToString()
    assert float(tf.make_ndarray(a[3].summary.value[0].tensor)) == float("inf")   # as a cast


def test_tensorboard_reads_them_while_they_are_written(tmp_path):
    """TensorBoard's EventAccumulator (which checks the CRCs) reads a run's file as it grows:
    each write is flushed. Non-finite values and non-numbers are left out."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    writer = ScalarWriter(str(tmp_path))
    reader = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    for step in (1, 2, 3):
        writer.write({"loss": 1.0 / step, "auc": float("nan") if step == 2 else 0.5,
                      "name": "text", "flag": True}, step, prefix="p/")
    reader.Reload()
    assert set(reader.Tags()["tensors"]) == {"p/loss", "p/auc"}
    assert [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
            for e in reader.Tensors("p/loss")] == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert [e.step for e in reader.Tensors("p/auc")] == [1, 3]
    assert reader.SummaryMetadata("p/loss").plugin_data.plugin_name == "scalars"
    writer.close()
    ScalarWriter(None).write({"a": 1.0}, 1)   # a non-chief writer writes nothing


def test_bucket_paths_go_through_fileio():
    """A URL log_dir (ram:// here, gs:// on a TPU) through base/fileio.py: the directory is made,
    each write is visible before close, and the framing checks out (tf.data reads it)."""
    log_dir = f"ram://summaries-{uuid.uuid4().hex[:8]}/train"
    writer = ScalarWriter(log_dir)
    writer.write({"loss": 2.0}, 5)
    (path,) = tf.io.gfile.glob(f"{log_dir}/events.out.tfevents.*")
    written = events(path)
    assert [(e.step, [v.tag for v in e.summary.value]) for e in written] == [(0, []),
                                                                           (5, ["loss"])]
    assert struct.unpack("<f", written[1].summary.value[0].tensor.tensor_content) == (2.0,)
    writer.close()
