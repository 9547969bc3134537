"""training/seeds.py: Keras' `set_random_seed` without TensorFlow gives the random numbers Keras'
own gives (Python's `random`, NumPy, Keras' global seed generator, the recorded seed); on the
TensorFlow backend it is Keras' own. That the JAX drivers never import TensorFlow through it is
checked on the drivers (tests/pretrain/test_jax_trainer.py,
tests/finetune/test_run_finetuning_features.py)."""
import random

import keras
import numpy as np

from training.seeds import seed_without_tensorflow, set_random_seed


def draws():
    from keras.src.utils.rng_utils import get_random_seed
    return (random.random(), np.random.rand(3).tolist(),
            keras.ops.convert_to_numpy(keras.random.normal((4,))).tolist(),   # the global
            keras.ops.convert_to_numpy(keras.random.uniform((2,))).tolist(),  # seed generator
            keras.ops.convert_to_numpy(keras.initializers.GlorotUniform()((2, 2))).tolist(),
            get_random_seed())


def test_the_random_numbers_of_keras_set_random_seed():
    for seed in (0, 2, 12345):
        keras.utils.set_random_seed(seed)
        expected = draws()
        draws()                                  # move every generator on
        seed_without_tensorflow(seed)
        assert draws() == expected
        assert expected[-1] == seed


def test_tensorflow_backend_calls_keras_own():
    import tensorflow as tf
    assert keras.backend.backend() == "tensorflow"
    set_random_seed(4)
    a = (draws(), tf.random.uniform((2,)).numpy().tolist())   # TensorFlow seeded too
    keras.utils.set_random_seed(4)
    assert (draws(), tf.random.uniform((2,)).numpy().tolist()) == a
