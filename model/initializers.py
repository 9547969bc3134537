"""Weight initialisers of the official code: truncated normal, stddev `initializer_range`."""
import keras


def truncated_normal(stddev):
    # TF1's tf.truncated_normal_initializer re-draws beyond 2 stddev, as Keras' TruncatedNormal does.
    return keras.initializers.TruncatedNormal(stddev=stddev)
