"""TensorBoard scalars: the one scalar writer of the toolkit.

Writes the same records as `tf.summary.scalar` (plugin "scalars") without needing the
`tensorboard` package. `log_dir` may be a bucket path (gs://...): TensorFlow's file writer uses
tf.io.gfile.
"""
import math


class ScalarWriter:
    """Scalars under `log_dir`; with `log_dir=None` (e.g. a non-chief worker) it writes nothing."""

    def __init__(self, log_dir, prefix=""):
        import tensorflow as tf
        self._tf = tf
        self.log_dir = log_dir
        self.prefix = prefix
        self._writer = tf.summary.create_file_writer(log_dir) if log_dir else None
        self._metadata = None

    def _scalar_metadata(self):
        if self._metadata is None:
            from tensorflow.core.framework import summary_pb2
            self._metadata = summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(
                    plugin_name="scalars")).SerializeToString()
        return self._metadata

    def write(self, scalars, step, prefix=None):
        """Every finite number of `scalars` ({name: value}) at `step`, tagged prefix + name."""
        if self._writer is None:
            return
        tf = self._tf
        prefix = self.prefix if prefix is None else prefix
        with self._writer.as_default():
            for name, value in scalars.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(value):
                    tf.summary.write(prefix + name, tf.constant(float(value), tf.float32),
                                     step=int(step), metadata=self._scalar_metadata())
        self._writer.flush()

    def close(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
