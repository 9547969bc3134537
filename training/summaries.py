"""TensorBoard scalars: the one scalar writer of the toolkit, on both backends, without TensorFlow.

Writes what `tf.summary.write` of a float32 scalar with the "scalars" plugin's metadata writes
(the same `Event` protos, byte for byte but the wall time; tests/training/test_summaries.py
compares them), in an event file named as TensorFlow names it
(`events.out.tfevents.<time>.<host>.<pid>.<n>.v2`), in TFRecord framing with masked CRC32Cs:
TensorBoard and tf.data read it, and no TensorFlow (nor the `tensorboard` package) is needed to
write it, so the JAX path writes the same scalars as TensorFlow's. The protobuf encoding and the
framing are base/protowire.py's; the file goes through base/fileio.py, so `log_dir` may be a
bucket path (gs://..., through tf.io.gfile where TensorFlow is installed) as well as a local one.
Each `write` is flushed (one flush per log line of the training loop).
"""
import contextlib
import itertools
import math
import os
import socket
import struct
import time

from base import fileio, protowire

FILE_VERSION = "brain.Event:2"
WRITER_NAME = "convbert_toolkit.training.summaries"
_DT_FLOAT = 1                       # tensorflow/core/framework/types.proto
_FILE_NUMBER = itertools.count()    # several writers of one process in one second: distinct files


def _event(wall_time, step=0, file_version=None, summary=None):
    """An `Event` (tensorflow/core/util/event.proto): wall_time 1, step 2, file_version 3,
    summary 5, source_metadata 10 (writer 1). proto3: a zero step is left out."""
    out = protowire.double_field(1, wall_time)
    if step:
        out += protowire.varint_field(2, step)
    if file_version is not None:
        out += protowire.bytes_field(3, file_version)
        out += protowire.bytes_field(10, protowire.bytes_field(1, WRITER_NAME))
    if summary is not None:
        out += protowire.bytes_field(5, summary)
    return out


# SummaryMetadata {plugin_data {plugin_name: "scalars"}}: what tf.summary.scalar attaches.
_SCALARS_METADATA = protowire.bytes_field(1, protowire.bytes_field(1, "scalars"))
# TensorProto {dtype: DT_FLOAT, tensor_shape {}} without its content: a float32 scalar.
_FLOAT_SCALAR = protowire.varint_field(1, _DT_FLOAT) + protowire.bytes_field(2, b"")


def scalar_summary(tag, value):
    """A `Summary` of one float32 scalar: value {tag 1, tensor 8, metadata 9}, the tensor's
    content (field 4) the little-endian float32."""
    try:
        content = struct.pack("<f", value)
    except OverflowError:          # finite, but beyond float32: what a float32 cast makes of it
        content = struct.pack("<f", math.copysign(math.inf, value))
    tensor = _FLOAT_SCALAR + protowire.bytes_field(4, content)
    entry = (protowire.bytes_field(1, tag) + protowire.bytes_field(8, tensor)
             + protowire.bytes_field(9, _SCALARS_METADATA))
    return protowire.bytes_field(1, entry)


class ScalarWriter:
    """Scalars under `log_dir`; with `log_dir=None` (e.g. a non-chief worker) it writes nothing.
    The event file is made at once (as tf.summary.create_file_writer does), its first event the
    file version."""

    def __init__(self, log_dir, prefix=""):
        self.log_dir = log_dir
        self.prefix = prefix
        self.path = None
        self._file = None
        if log_dir:
            now = time.time()
            self.path = fileio.join(log_dir, f"events.out.tfevents.{int(now)}."
                                             f"{socket.gethostname()}.{os.getpid()}."
                                             f"{next(_FILE_NUMBER)}.v2")
            self._file = fileio.open_write(self.path)
            self._file.write(protowire.tfrecord_frame(_event(now, file_version=FILE_VERSION)))
            self._file.flush()

    def write(self, scalars, step, prefix=None):
        """Every finite number of `scalars` ({name: value}) at `step`, tagged prefix + name, one
        event each (as tf.summary.write)."""
        if self._file is None:
            return
        prefix = self.prefix if prefix is None else prefix
        records = []
        for name, value in scalars.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                records.append(protowire.tfrecord_frame(_event(
                    time.time(), int(step), summary=scalar_summary(prefix + name, float(value)))))
        if records:
            self._file.write(b"".join(records))
            self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None


@contextlib.contextmanager
def scalar_writer(writer, log_dir):
    """`writer` where the caller keeps one open (fine-tuning adds its dev scalars to it), else a
    ScalarWriter of `log_dir` (None: writes nothing) closed at the end: both cores' `fit`."""
    if writer is not None:
        yield writer
        return
    own = ScalarWriter(log_dir)
    try:
        yield own
    finally:
        own.close()
