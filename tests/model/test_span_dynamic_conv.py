"""Every dynamic-convolution implementation against the unfold reference (issue 7).

Forward and gradients (w.r.t. values and kernel), on random inputs including T < K, in TF eager,
TF `jit_compile`, and JAX (in a subprocess with KERAS_BACKEND=jax); plus the fast MixedAttention
path against its straightforward formulation, for every conv_type and implementation.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, keras_backend, tensorflow_pass_only

FAST = ("shifted_sum", "band", "blocked_band")
CASES = [(2, 5, 3, 8, 9), (1, 13, 2, 4, 7), (2, 21, 2, 4, 9)]   # T < K; K = 7; 3 blocks of 8


def _conv_fn(impl):
    """`values [B,T,N,d], kernel -> out` for an implementation name; the blocked band runs with
    blocks of 8 rows so that the cases span several blocks (and a ragged last one)."""
    import functools

    from model.span_dynamic_conv import _DYNAMIC_CONV
    if impl == "blocked_band":
        return functools.partial(_DYNAMIC_CONV[impl], block=8)
    return _DYNAMIC_CONV[impl]


def _inputs(b, t, n, d, k, seed=0, broadcast=False):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((b, t, n, d)).astype("float32")
    kshape = (1, 1, n, k) if broadcast else (b, t, n, k)
    kernel = rng.standard_normal(kshape).astype("float32")
    return values, kernel


def _numpy_reference(values, kernel):
    b, t, n, d = values.shape
    k = kernel.shape[-1]
    kernel = np.broadcast_to(kernel, (b, t, n, k))
    pad = (k - 1) // 2
    out = np.zeros_like(values)
    for tt in range(t):
        for j in range(k):
            s = tt + j - pad
            if 0 <= s < t:
                out[:, tt] += kernel[:, tt, :, j:j + 1] * values[:, s]
    return out


def test_unfold_reference_matches_numpy():
    from model.span_dynamic_conv import dynamic_conv_unfold
    for case in CASES + [(1, 1, 1, 4, 3), (1, 3, 2, 4, 9)]:
        values, kernel = _inputs(*case)
        np.testing.assert_allclose(np.asarray(dynamic_conv_unfold(values, kernel)),
                                   _numpy_reference(values, kernel), atol=1e-5)


def test_band_matrix_layout():
    from model.span_dynamic_conv import band_matrix
    kernel = np.arange(1, 1 + 4 * 3, dtype="float32").reshape(1, 4, 3)   # T=4, K=3
    band = np.asarray(band_matrix(kernel))[0]
    expected = np.zeros((4, 4), "float32")
    for t in range(4):
        for j in range(3):
            if 0 <= t + j - 1 < 4:
                expected[t, t + j - 1] = kernel[0, t, j]
    np.testing.assert_array_equal(band, expected)


@pytest.mark.skipif(keras_backend() != "tensorflow", reason="TF-specific (eager and jit_compile)")
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit_compile"])
@pytest.mark.parametrize("impl", FAST)
def test_tf_forward_and_gradients_match_unfold(impl, jit):
    import tensorflow as tf

    from model.span_dynamic_conv import dynamic_conv_unfold

    def value_and_grads(fn, values, kernel, cotangent):
        values, kernel = tf.convert_to_tensor(values), tf.convert_to_tensor(kernel)
        with tf.GradientTape() as tape:
            tape.watch([values, kernel])
            out = fn(values, kernel)
            loss = tf.reduce_sum(out * cotangent)
        return [out, *tape.gradient(loss, [values, kernel])]

    fast = tf.function(lambda *a: value_and_grads(_conv_fn(impl), *a), jit_compile=jit)
    for i, case in enumerate(CASES):
        for broadcast in ((False, True) if i == 0 else (False,)):
            values, kernel = _inputs(*case, seed=i, broadcast=broadcast)
            cot = np.random.default_rng(100 + i).standard_normal(values.shape).astype("float32")
            want = value_and_grads(dynamic_conv_unfold, values, kernel, cot)
            got = fast(values, kernel, cot)
            for name, g, w in zip(("out", "d_values", "d_kernel"), got, want):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5, rtol=1e-5,
                                           err_msg=f"{impl} jit={jit} {case} bc={broadcast} {name}")


_JAX_CHILD = r"""
import json, sys
import numpy as np, jax, jax.numpy as jnp
from model.span_dynamic_conv import dynamic_conv_unfold
from tests.model.test_span_dynamic_conv import FAST, _conv_fn
cases = json.loads(sys.argv[1])
worst = {}
for i, (b, t, n, d, k) in enumerate(cases):
    rng = np.random.default_rng(i)
    v = jnp.asarray(rng.standard_normal((b, t, n, d)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((b, t, n, k)), jnp.float32)
    c = jnp.asarray(rng.standard_normal((b, t, n, d)), jnp.float32)
    def run(fn):   # forward and the vjp (gradients for cotangent c) in one compiled function
        def both(v, w):
            out, vjp = jax.vjp(fn, v, w)
            return (out, *vjp(c))
        return list(jax.jit(both)(v, w))
    ref = run(dynamic_conv_unfold)
    for impl in FAST:
        got = run(_conv_fn(impl))
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(got, ref))
        worst[impl] = max(worst.get(impl, 0.0), diff)
import keras
from model.span_dynamic_conv import SpanDynamicConv
keras.utils.set_random_seed(0)
sdc = SpanDynamicConv(2, 8, 9, conv_type="sdconv")
sdc.build(((None, None, 20), (None, None, 16)))
for j, var in enumerate(sdc.weights):
    var.assign(np.random.default_rng(j).standard_normal(var.shape).astype("float32") * 0.3)
h = jnp.asarray(np.random.default_rng(9).standard_normal((2, 5, 20)), jnp.float32)
worst["span_key"] = float(jnp.max(jnp.abs(sdc.span_key(h) - sdc.conv_attn_key(h))))
print("RESULT " + json.dumps(worst))
"""


@tensorflow_pass_only      # its JAX run is a subprocess of its own
def test_jax_forward_and_gradients_match_unfold():
    pytest.importorskip("jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO_ROOT),
           "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", _JAX_CHILD, json.dumps(CASES)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=str(REPO_ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    worst = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert set(worst) == set(FAST) | {"span_key"}
    for impl, diff in worst.items():
        assert diff < 2e-5, f"jax {impl}: max|diff| {diff}"


@pytest.mark.parametrize("conv_type", ["sdconv", "dynamic", "lightweight", "none"])
@pytest.mark.parametrize("long_band", [False, True], ids=["short", "long"])
def test_fast_mixed_attention_matches_reference_path(conv_type, long_band, monkeypatch):
    """The fused-projection path (every implementation) == separate Dense layers + unfold.
    "long" lowers BAND_MAX_LENGTH so that "auto" takes its long-sequence (blocked band) form, with
    blocks of 8 rows."""
    import keras

    from model import span_dynamic_conv
    from model.mixed_attention import MixedAttention
    if long_band:
        monkeypatch.setattr(span_dynamic_conv, "BAND_MAX_LENGTH", 4)
        monkeypatch.setattr(span_dynamic_conv, "BAND_BLOCK", 8)
    rng = np.random.default_rng(3)
    for seq_len in (5, 19):                      # 5 < K = 7
        x = rng.standard_normal((2, seq_len, 24)).astype("float32")
        bias = np.zeros((2, 1, 1, seq_len), "float32")
        bias[1, ..., seq_len - 2:] = -10000.0
        results = {}
        for impl in ("unfold", "shifted_sum", "band", "blocked_band", "auto"):
            keras.utils.set_random_seed(7)
            layer = MixedAttention(3, 4, conv_type=conv_type, conv_kernel_size=7,
                                   conv_implementation=impl)
            layer.build(x.shape)
            for i, v in enumerate(layer.weights):   # non-trivial biases too
                v.assign(np.random.default_rng(i).standard_normal(v.shape).astype("float32") * 0.3)
            results[impl] = np.asarray(layer(x, bias))
            if impl == "unfold":
                reference = np.asarray(layer.call_reference(x, bias))
                np.testing.assert_allclose(results[impl], reference, atol=1e-5)
        for impl, got in results.items():
            np.testing.assert_allclose(got, results["unfold"], atol=1e-5, err_msg=impl)


def test_mixed_attention_weight_map_unchanged():
    from model.mixed_attention import MixedAttention
    layer = MixedAttention(2, 8, conv_type="sdconv", conv_kernel_size=9)
    layer.build((None, None, 32))
    shapes = {k: tuple(v.shape) for k, v in layer.weight_map().items()}
    assert shapes == {
        "query/kernel": (32, 16), "query/bias": (16,), "key/kernel": (32, 16), "key/bias": (16,),
        "value/kernel": (32, 16), "value/bias": (16,),
        "conv_attn_point/kernel": (32, 16), "conv_attn_point/bias": (16,),
        "conv_attn_key/depthwise_kernel": (9, 32, 1), "conv_attn_key/pointwise_kernel": (1, 32, 16),
        "conv_attn_key/bias": (16,), "conv_attn_kernel/kernel": (16, 18),
        "conv_attn_kernel/bias": (18,)}


def test_unknown_implementation_is_rejected():
    from model.span_dynamic_conv import SpanDynamicConv
    with pytest.raises(ValueError, match="unknown implementation"):
        SpanDynamicConv(2, 8, implementation="im2col")


@pytest.mark.skipif(keras_backend() != "tensorflow", reason="TF jit_compile path")
def test_xla_paths_of_mixed_attention_match_reference():
    """Under jit_compile "auto" switches to the shifted sums (span-key depthwise conv included)."""
    import keras
    import tensorflow as tf

    from model.mixed_attention import MixedAttention
    from model.span_dynamic_conv import compiled_by_xla
    assert not compiled_by_xla()
    assert tf.function(lambda: tf.constant(compiled_by_xla()), jit_compile=True)().numpy()
    keras.utils.set_random_seed(1)
    layer = MixedAttention(2, 8, conv_type="sdconv", conv_kernel_size=9, conv_implementation="auto")
    x = np.random.default_rng(0).standard_normal((2, 6, 20)).astype("float32")   # T < K
    layer.build(x.shape)
    for i, v in enumerate(layer.weights):
        v.assign(np.random.default_rng(i).standard_normal(v.shape).astype("float32") * 0.3)
    want = np.asarray(layer.call_reference(x))
    got = tf.function(lambda h: layer(h), jit_compile=True)(tf.constant(x))
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


@pytest.mark.skipif(keras_backend() != "tensorflow", reason="TF graph with unknown shapes")
@pytest.mark.parametrize("impl", ["auto", "band", "blocked_band", "shifted_sum"])
def test_mixed_attention_with_unknown_sequence_length(impl):
    """A `tf.function` traced for [None, None, H] (as a serving signature is) runs every
    implementation, and one trace serves several lengths: the split-based cuts fall back to
    slices when the length is only known at run time."""
    import keras
    import tensorflow as tf

    from model.mixed_attention import MixedAttention
    keras.utils.set_random_seed(2)
    layer = MixedAttention(2, 8, conv_type="sdconv", conv_kernel_size=9, conv_implementation=impl)
    layer.build((None, None, 16))
    for i, v in enumerate(layer.weights):
        v.assign(np.random.default_rng(i).standard_normal(v.shape).astype("float32") * 0.3)
    fn = tf.function(lambda h: layer(h), input_signature=[tf.TensorSpec([None, None, 16])])
    for seq_len in (5, 13, 70):     # T < K, one band block, several 64-row blocks (ragged)
        x = np.random.default_rng(seq_len).standard_normal((2, seq_len, 16)).astype("float32")
        np.testing.assert_allclose(fn(x).numpy(), np.asarray(layer.call_reference(x)),
                                   atol=1e-5, err_msg=f"{impl}, T={seq_len}")
