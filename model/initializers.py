"""Weight initialisers of the official code: truncated normal, stddev `initializer_range`, drawn
afresh for every variable.

The official code's `create_initializer` is TF1's `tf.truncated_normal_initializer(stddev)`: one
object that a layer hands to several variables (its query, key and value kernels), each of which
gets its own op-level seed, so each is its own draw (Hugging Face's `_init_weights` likewise).
Keras' `TruncatedNormal` without a seed fixes one seed when it is made, and every variable of one
shape it initialises is then the same draw (its docs say so): shared by a layer's query, key and
value, it started the three kernels equal (found 2026-11-29; every layer, both backends).

`TruncatedNormal` here takes a new seed from Python's `random` at every call (as Keras' unseeded
initialiser does once, when made), so a build after `keras.utils.set_random_seed` /
training.seeds.set_random_seed is reproducible and every variable is its own draw. It draws on the
host with NumPy: the same numbers on TensorFlow and on JAX, and no program compiled per shape on
JAX (there each new shape compiled three small XLA programs: seconds of a model build on the CPU,
more on a GPU).
"""
import random

import keras
import numpy as np

# TF1's tf.truncated_normal_initializer re-draws beyond 2 stddev, as Keras' TruncatedNormal does.
TRUNCATE_AT = 2.0


def truncated_normal_array(shape, stddev, mean=0.0, seed=None, dtype="float32"):
    """A NumPy array of `shape`: normal draws with `stddev` around `mean`, every draw beyond 2
    stddev drawn again (TF1's and Keras' truncation), from NumPy's generator at `seed`."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape, dtype=np.float32)
    outside = np.abs(values) > TRUNCATE_AT
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()), dtype=np.float32)
        outside = np.abs(values) > TRUNCATE_AT
    values = values * np.float32(stddev) + np.float32(mean)
    return values.astype(_numpy_dtype(dtype), copy=False)


def _numpy_dtype(dtype):
    dtype = keras.backend.standardize_dtype(dtype or keras.config.floatx())
    if dtype == "bfloat16":
        import ml_dtypes       # NumPy's bfloat16 (JAX and TensorFlow both depend on it)
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


@keras.saving.register_keras_serializable(package="convbert")
class TruncatedNormal(keras.initializers.Initializer):
    """Truncated normal (beyond 2 stddev drawn again), a new seed from Python's `random` at each
    call: every variable it initialises is its own draw (see the module doc)."""

    def __init__(self, stddev=0.02, mean=0.0):
        self.stddev = float(stddev)
        self.mean = float(mean)

    def __call__(self, shape, dtype=None):
        seed = random.randint(1, int(1e9))    # Keras' make_default_seed, per variable
        values = truncated_normal_array(shape, self.stddev, self.mean, seed, dtype)
        # A tensor of a stated dtype: from a bare NumPy array, JAX 0.10's jnp.asarray (Keras'
        # variable) compiles a program per shape again (`stage`); with the dtype it copies.
        return keras.ops.convert_to_tensor(values, dtype=values.dtype.name)

    def get_config(self):
        return {"stddev": self.stddev, "mean": self.mean}


def truncated_normal(stddev):
    """The official code's `create_initializer(stddev)`."""
    return TruncatedNormal(stddev=stddev)
