"""The toolkit's one seed setter: `keras.utils.set_random_seed` without importing TensorFlow.

Keras' own (keras 3.15, keras/src/utils/rng_utils.py) records the seed in Keras' global state,
drops the global `SeedGenerator` (it is made anew, from Python's `random`, at the next unseeded
draw), seeds Python's `random` and NumPy, and calls `tf.random.set_seed`, IMPORTING TensorFlow
wherever it is installed: on Keras-on-JAX that costs seconds and a TensorFlow in the process the
JAX path is meant to run without (issue #50). `set_random_seed` here does the same, but seeds
TensorFlow only when it is already imported (always so on the TensorFlow backend, where it
simply calls Keras' function): the random numbers of a JAX run are the ones Keras' function
gives, as TensorFlow's seed drives nothing there (tests/training/test_seeds.py).
"""
import random
import sys


def set_random_seed(seed):
    """Seed Python's `random`, NumPy and Keras' global seed generator (and TensorFlow if it is
    imported already), as `keras.utils.set_random_seed(seed)`."""
    import keras
    if keras.backend.backend() != "jax" or sys.modules.get("tensorflow") is not None:
        keras.utils.set_random_seed(seed)    # nothing to save (torch: torch.manual_seed too)
        return
    try:
        seed_without_tensorflow(seed)
    except ImportError:   # another Keras layout: its own function (which may import TensorFlow)
        keras.utils.set_random_seed(seed)


def seed_without_tensorflow(seed):
    """What keras.utils.set_random_seed does but `tf.random.set_seed`, in its order, through
    Keras' global state (ImportError where this Keras keeps it elsewhere)."""
    import numpy as np
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED
    if not isinstance(seed, int):
        raise ValueError(f"Expected `seed` argument to be an integer. Received: seed={seed} "
                         f"(of type {type(seed)})")
    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)   # keras.utils.get_random_seed
    global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)  # made anew from `random`
    random.seed(seed)
    np.random.seed(seed)
