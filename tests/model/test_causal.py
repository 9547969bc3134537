"""Causal layers (`causal=True`, issue 18): outputs at positions ≤ t never depend on tokens > t.

For every dynamic-convolution implementation and every conv_type, at the function level (against a
NumPy left-padded reference), at the layer level (K=1: causal = non-causal) and through a whole
encoder (changing tokens t+1..T leaves outputs 0..t unchanged). Runs on the TF backend and, by
scripts/test.sh, again with KERAS_BACKEND=jax (there `auto` and the span key take the XLA paths).
"""
import numpy as np
import pytest

IMPLEMENTATIONS = ("unfold", "shifted_sum", "band", "blocked_band")
CONV_TYPES = ("sdconv", "dynamic", "lightweight", "none")


def _conv(impl):
    import functools

    from model.span_dynamic_conv import _DYNAMIC_CONV
    if impl == "blocked_band":  # blocks of 8 rows: the cases span several blocks
        return functools.partial(_DYNAMIC_CONV[impl], block=8)
    return _DYNAMIC_CONV[impl]


def _causal_reference(values, kernel):
    """out[t] = Σ_k kernel[t, k] · values[t + k - (K-1)], zero before the sequence."""
    b, t, n, d = values.shape
    k = kernel.shape[-1]
    kernel = np.broadcast_to(kernel, (b, t, n, k))
    out = np.zeros_like(values)
    for tt in range(t):
        for j in range(k):
            s = tt + j - (k - 1)
            if s >= 0:
                out[:, tt] += kernel[:, tt, :, j:j + 1] * values[:, s]
    return out


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", [(2, 5, 3, 4, 9), (1, 21, 2, 4, 7), (2, 19, 2, 4, 1)])
def test_causal_dynamic_conv_matches_left_padded_reference(impl, case):
    b, t, n, d, k = case
    rng = np.random.default_rng(0)
    values = rng.standard_normal((b, t, n, d)).astype("float32")
    kernel = rng.standard_normal((b, t, n, k)).astype("float32")
    out = np.asarray(_conv(impl)(values, kernel, causal=True))
    np.testing.assert_allclose(out, _causal_reference(values, kernel), atol=1e-5)


def test_causal_band_is_lower_banded():
    from model.span_dynamic_conv import band_matrix
    kernel = np.random.default_rng(1).uniform(0.5, 1.0, (1, 12, 5)).astype("float32")
    band = np.asarray(band_matrix(kernel, causal=True))[0]
    rows, cols = np.indices(band.shape)
    assert np.all(band[cols > rows] == 0)                 # nothing after t
    assert np.all(band[rows - cols >= 5] == 0)            # nothing before t - (K-1)
    np.testing.assert_allclose(np.diag(band), kernel[0, :, -1])   # the last tap is position t


def _tiny_config(conv_type, kernel_size=5, causal=True, use_self_attention=True):
    from model.config import ConvBertConfig
    return ConvBertConfig(vocab_size=50, hidden_size=32, embedding_size=16, num_hidden_layers=2,
                          num_attention_heads=4, head_ratio=2, intermediate_size=64,
                          conv_kernel_size=kernel_size, conv_type=conv_type,
                          use_self_attention=use_self_attention, max_position_embeddings=32,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          initializer_range=0.2, causal=causal)


def _encode(config, impl, ids, mask, seed=0):
    import keras

    from model.encoder import ConvBertModel
    keras.utils.set_random_seed(seed)
    model = ConvBertModel(config, conv_implementation=impl)
    return lambda x: np.asarray(model({"input_ids": x, "input_mask": mask}, training=False))


def _ids_and_mask(seq_len=20, batch=2):
    rng = np.random.default_rng(3)
    ids = rng.integers(1, 50, (batch, seq_len)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, -3:] = 0        # padding at the end of one row: combined with the causal mask
    return ids, mask


# Every conv_type with every implementation; "none" has no convolution heads, so one run of it.
ENCODER_CASES = [(c, i) for c in CONV_TYPES if c != "none" for i in IMPLEMENTATIONS] + \
    [("none", "unfold")]


@pytest.mark.parametrize("conv_type,impl", ENCODER_CASES)
def test_future_tokens_never_change_past_outputs(conv_type, impl, monkeypatch):
    from model import span_dynamic_conv
    monkeypatch.setattr(span_dynamic_conv, "BAND_BLOCK", 8)   # blocked band: 3 blocks of 20
    ids, mask = _ids_and_mask()
    encode = _encode(_tiny_config(conv_type), impl, ids, mask)
    base = encode(ids)
    rng = np.random.default_rng(7)
    for t in (0, 6, 13, 18):
        changed = ids.copy()
        changed[:, t + 1:] = rng.integers(1, 50, changed[:, t + 1:].shape)
        out = encode(changed)
        np.testing.assert_allclose(out[:, :t + 1], base[:, :t + 1], atol=1e-5,
                                   err_msg=f"outputs at <= {t} moved when tokens > {t} changed")
        assert np.abs(out[0, t + 1:] - base[0, t + 1:]).max() > 1e-3   # the later ones do move


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_convolution_only_model_is_causal(impl):
    ids, mask = _ids_and_mask()
    encode = _encode(_tiny_config("sdconv", use_self_attention=False), impl, ids, mask)
    base = encode(ids)
    changed = ids.copy()
    changed[:, 10:] = (changed[:, 10:] + 1) % 50
    np.testing.assert_allclose(encode(changed)[:, :10], base[:, :10], atol=1e-5)


def test_non_causal_encoder_sees_the_future():
    """The check above can fail: without causal=True the same change reaches earlier outputs."""
    ids, mask = _ids_and_mask()
    encode = _encode(_tiny_config("sdconv", causal=False), "unfold", ids, mask)
    changed = ids.copy()
    changed[:, 10:] = (changed[:, 10:] + 1) % 50
    assert np.abs(encode(changed)[:, :10] - encode(ids)[:, :10]).max() > 1e-3


@pytest.mark.parametrize("conv_type", ("sdconv", "dynamic", "lightweight"))
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_kernel_one_causal_equals_non_causal(conv_type, impl):
    """K=1 has no neighbours: the causal and the 'same' convolution are the same function, for
    the conv layer and for a convolution-only encoder (no self-attention mask in the way)."""
    from model.span_dynamic_conv import SpanDynamicConv
    rng = np.random.default_rng(5)
    hidden = rng.standard_normal((2, 11, 32)).astype("float32")
    query = rng.standard_normal((2, 11, 16)).astype("float32")
    layers = []
    for causal in (False, True):
        layer = SpanDynamicConv(2, 8, 1, conv_type, initializer_range=0.5, implementation=impl,
                                causal=causal)
        layer.build(((None, None, 32), (None, None, 16)))
        layers.append(layer)
    for source, target in zip(layers[0].weights, layers[1].weights):
        target.assign(source)
    np.testing.assert_allclose(np.asarray(layers[1]((hidden, query))),
                               np.asarray(layers[0]((hidden, query))), atol=1e-6)
    ids, mask = _ids_and_mask()
    outs = [_encode(_tiny_config(conv_type, kernel_size=1, causal=causal,
                                 use_self_attention=False), impl, ids, mask)(ids)
            for causal in (False, True)]
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-6)
