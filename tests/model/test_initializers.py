"""model/initializers.py: every variable its own truncated-normal draw (the official code's
`tf.truncated_normal_initializer`; Keras' unseeded TruncatedNormal, shared by a layer's query, key
and value, started the three kernels equal), reproducible under a seed, the same numbers on
TensorFlow and JAX (this file runs in both passes against one NumPy reference), and on JAX no
program compiled per shape."""
import random

import keras
import numpy as np
import pytest

from model import ConvBertConfig, ConvBertModel
from model.initializers import TruncatedNormal, truncated_normal, truncated_normal_array
from training.seeds import set_random_seed

TINY = dict(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=16)


def draws(model):
    """{variable path: values} of `model`'s variables that are drawn (not constants)."""
    values = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    return {k: v for k, v in values.items() if np.unique(v).size > 1}


def test_every_variable_is_its_own_draw():
    set_random_seed(0)
    model = ConvBertModel(ConvBertConfig(**TINY))
    values = draws(model)
    attention = [k for k in values if k.endswith(("query/kernel", "key/kernel", "value/kernel"))]
    assert len(attention) == 3 * TINY["num_hidden_layers"]
    seen = {}
    for path, v in values.items():
        key = (v.shape, v.tobytes())
        assert key not in seen, f"{path} starts equal to {seen[key]}"
        seen[key] = path


def test_a_seeded_build_is_reproducible_and_another_seed_differs():
    def build(seed):
        set_random_seed(seed)
        return draws(ConvBertModel(ConvBertConfig(**TINY)))
    first, again, other = build(3), build(3), build(4)
    assert first.keys() == again.keys() == other.keys()
    for path in first:
        np.testing.assert_array_equal(first[path], again[path], err_msg=path)
        assert not np.array_equal(first[path], other[path]), path


def test_the_numbers_are_numpys_on_every_backend():
    # This file runs on TensorFlow and on JAX: both give this NumPy reference, so the same.
    init = truncated_normal(0.02)
    random.seed(11)
    got = keras.ops.convert_to_numpy(init((40, 30), "float32"))
    seed = random.Random(11).randint(1, int(1e9))
    np.testing.assert_array_equal(got, truncated_normal_array((40, 30), 0.02, seed=seed))
    assert got.dtype == np.float32
    half = keras.ops.convert_to_numpy(init((5, 3), "bfloat16"))
    assert keras.backend.standardize_dtype(half.dtype) == "bfloat16"


def test_truncated_at_two_standard_deviations():
    values = truncated_normal_array((400, 500), stddev=0.02, mean=0.1, seed=5)
    assert np.abs(values - 0.1).max() <= 0.04 + 1e-7
    # A normal truncated at +-2 sd has sd 0.8796 of the untruncated one; 200,000 draws put the
    # sample's within ~0.2% of it.
    assert abs(values.std() / 0.02 - 0.8796) < 0.005
    assert abs(values.mean() - 0.1) < 1e-4


def test_config_round_trips():
    init = TruncatedNormal(stddev=0.05, mean=0.5)
    again = keras.initializers.deserialize(keras.initializers.serialize(init))
    assert isinstance(again, TruncatedNormal) and again.get_config() == init.get_config()
    layer = keras.layers.Dense(3, kernel_initializer=init)
    rebuilt = keras.layers.Dense.from_config(layer.get_config())
    assert rebuilt.kernel_initializer.get_config() == {"stddev": 0.05, "mean": 0.5}


def test_no_program_compiled_per_shape_on_jax():
    if keras.backend.backend() != "jax":
        pytest.skip("JAX compiles a program per shape; TensorFlow's eager ops do not")
    from training.compile_cache import CompileWatch
    watch = CompileWatch().start()
    try:
        for shape in ((7, 13), (11, 5, 3), (17,)):      # shapes nothing else here uses
            keras.Variable(initializer=truncated_normal(0.02), shape=shape, dtype="float32")
    finally:
        watch.stop()
    assert watch.compiles == [], watch.summary()
