"""The base room: what every package may import: file access on any filesystem (fileio), the
one PNG writer (plots), the protobuf wire format read without TensorFlow (protowire) and what
every command shares (command: TensorFlow imported without its
C++ start-up lines, the one-line error exit). It imports none of the toolkit's other packages
(tests/test_architecture.py), and importing it loads no TensorFlow and no Keras (fileio reaches
tf.io.gfile lazily, only for `gs://` / `ram://` paths; plots imports matplotlib when it draws)."""
