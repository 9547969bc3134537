"""Span-based dynamic convolution (SDConv): the convolution heads of ConvBERT's mixed attention.

This is where the convolution kernel is generated. Following the official code
(yitu-opensource/ConvBert `attention_layer`, which the released weights depend on):

    span_key = SeparableConv1D(x)                      # depthwise K-tap conv over H, pointwise H->A
    kernel   = softmax_K(W_f (query ⊙ span_key) + b_f) # one K-tap kernel per token and head
    values   = x W_o + b_o                             # a separate "conv value" projection
    out[t]   = Σ_k kernel[t, k] · values[t + k - (K-1)/2]   (zero outside the sequence)

Departures of the official code from the paper's prose, kept here on purpose: the values come from
their own projection (`conv_attn_point`), not from the self-attention V; the query is the same,
*unscaled* query as self-attention; the convolution sees padding tokens (no mask) and zero-pads only
at the sequence edges; the depthwise kernel is initialised with stddev 1/K.

`causal=True` (the language model, lm/): every tap only reads positions ≤ t, i.e. left padding
of K-1 instead of (K-1)/2 on each side (fairseq's decoder convs, `padding_l = K-1`), for the
dynamic convolution in every implementation (the band becomes lower-banded) and for the span-aware
key's depthwise convolution:

    out[t]   = Σ_k kernel[t, k] · values[t + k - (K-1)]

`conv_type` selects the paper's Table 2 variants:
  * "sdconv"      kernel from query ⊙ span-aware key (ConvBERT);
  * "dynamic"     kernel from the token alone, W_f·query (Wu et al.'s dynamic convolution);
  * "lightweight" one static, softmax-normalised K-tap kernel per head (lightweight convolution).
"""
import keras
from keras import ops

from model.initializers import truncated_normal

# "auto" picks, per backend, what measured fastest on CPU (docs/PERFORMANCE.md, "Span-based dynamic convolution speed"): in TF
# graph mode the full band for short sequences and the blocked band beyond, under XLA the shifted
# sum. "unfold" is the reference only.
CONV_IMPLEMENTATIONS = ("auto", "shifted_sum", "band", "blocked_band", "unfold")
# Longest sequence for which "auto" uses the full [T, T] band (its cost grows as T^2).
BAND_MAX_LENGTH = 256
# Rows per block of the blocked band (its cost grows as T·(BAND_BLOCK + K)).
BAND_BLOCK = 64


def edge_padding(kernel_size, causal=False):
    """(left, right) zero padding of a K-tap convolution over time: (K-1)/2 each side ('same'),
    or K-1 on the left only (causal: tap k reads position t + k - (K-1) ≤ t)."""
    if causal:
        return kernel_size - 1, 0
    return (kernel_size - 1) // 2, (kernel_size - 1) // 2


def dynamic_conv_shifted_sum(values, kernel, causal=False):
    """Per-token, per-head convolution without a K-times larger intermediate tensor.

    values: [B, T, N, d]; kernel: [B, T, N, K] (or broadcastable, e.g. [1, 1, N, K]).
    Returns [B, T, N, d] with out[b,t,n,:] = Σ_k kernel[b,t,n,k] · values[b, t+k-left, n, :],
    left = (K-1)/2, or K-1 when `causal`.
    The sum of K shifted slices fuses into one pass under XLA; its gradient is again a shifted sum.
    """
    kernel_size = kernel.shape[-1]
    seq_len = ops.shape(values)[1]
    padded = ops.pad(values, [[0, 0], list(edge_padding(kernel_size, causal)), [0, 0], [0, 0]])
    out = None
    for k in range(kernel_size):
        term = padded[:, k:k + seq_len] * kernel[..., k:k + 1]
        out = term if out is None else out + term
    return out


def split_at(x, cuts, axis):
    """`keras.ops.split(x, cuts, axis)` for static cut indices. Keras' TensorFlow split turns the
    indices into piece sizes with graph ops at every trace (a constant, slices, a difference, a
    concat: a quarter of a small model's forward trace); TensorFlow's own split takes the sizes,
    computed here. The same SplitV op, the same values."""
    size = x.shape[axis]
    if keras.backend.backend() == "tensorflow" and isinstance(size, int):
        import tensorflow as tf
        bounds = [0, *cuts, size]
        return tf.split(x, [stop - start for start, stop in zip(bounds, bounds[1:])], axis=axis)
    return ops.split(x, cuts, axis=axis)


def _cut(x, start, stop, axis):
    """x[start:stop] along `axis`: a split when the bounds are static (its gradient is a concat;
    a slice's, TF's StridedSliceGrad, is several times slower), else a slice."""
    size = x.shape[axis]
    if isinstance(start, int) and isinstance(stop, int) and isinstance(size, int):
        if start == 0 and stop == size:
            return x
        cuts = [c for c in (start, stop) if 0 < c < size]
        return split_at(x, cuts, axis)[1 if start > 0 else 0]
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def band_matrix(kernel, causal=False):
    """[..., T, K] per-row kernels -> [..., T, T] band matrix W[t, s] = kernel[t, s - t + left].

    The skewed rows (`skewed_rows`) with the `left` = (K-1)/2 edge columns cut off on each side
    (causal: the K-1 first columns, leaving a lower-banded matrix, W[t, s] = 0 for s > t): entries
    outside [0, K) are zero, which is exactly the zero padding at the sequence edges. Works for
    T < K too.
    """
    left = edge_padding(kernel.shape[-1], causal)[0]
    seq_len = ops.shape(kernel)[-2]
    return _cut(skewed_rows(kernel), left, left + seq_len, -1)                   # [..., T, T]


def skewed_rows(kernel):
    """[..., R, K] per-row kernels -> [..., R, R+K-1], row r holding its kernel at columns r..r+K-1.

    Pure pad / reshape / split (no one-hot constant, no gather): each row is padded with R zeros
    to length R+K, the rows are flattened and the last R zeros dropped, so that reading the result
    as rows of length R+K-1 shifts row r right by r ("skewing"). Cuts are `_cut`s (splits for
    static shapes): in TF a slice's gradient (StridedSliceGrad) was ~7x slower than split's (a
    concat) here and dominated the band's backward pass.
    """
    kernel_size = kernel.shape[-1]
    shape = ops.shape(kernel)
    lead, rows = tuple(shape[:-2]), shape[-2]
    width = rows + kernel_size - 1
    padded = ops.pad(kernel, [[0, 0]] * (len(kernel.shape) - 1) + [[0, rows]])   # [..., R, R+K]
    flat = ops.reshape(padded, (*lead, rows * (width + 1)))
    return ops.reshape(_cut(flat, 0, rows * width, -1), (*lead, rows, width))


def dynamic_conv_blocked_band_heads_first(values, kernel, block, causal=False):
    """values [B, N, T, d], kernel [B, N, T, K] -> [B, N, T, d] as block-diagonal band matmuls.

    The sequence is cut into blocks of `block` rows; block j's rows only read the window of
    block + K - 1 positions around it, so each block is one small [block, block+K-1] @
    [block+K-1, d] matmul: the band's cost grows as T·(block+K) instead of T², and it is still
    all batched matmul, pad, reshape and one concat (fast forward *and* backward on CPU, where
    the shifted sum's 2K full-size elementwise passes are memory-bound).
    """
    kernel_size = kernel.shape[-1]
    pad = edge_padding(kernel_size, causal)[0]
    if block < kernel_size - 1:
        raise ValueError(f"band block {block} must be at least kernel_size - 1 = {kernel_size - 1}")
    shape = ops.shape(values)
    batch, heads, seq_len, width = shape[0], shape[1], shape[2], shape[3]
    num_blocks = -(-seq_len // block)
    rows = num_blocks * block
    # Rows past T get zero kernels; their outputs are sliced off.
    kernel = ops.pad(kernel, [[0, 0], [0, 0], [0, rows - seq_len], [0, 0]])
    band = skewed_rows(ops.reshape(kernel, (batch, heads, num_blocks, block, kernel_size)))
    # Window j = positions [j*block - pad, (j+1)*block + K-1 - pad): block j of the padded
    # values followed by the first K-1 rows of block j+1.
    padded = ops.pad(values, [[0, 0], [0, 0], [pad, rows + block - seq_len - pad], [0, 0]])
    blocks = ops.reshape(padded, (batch, heads, num_blocks + 1, block, width))
    windows = _cut(blocks, 0, num_blocks, 2)
    if kernel_size > 1:   # K = 1 reads no neighbours (and an empty split is an error in TF)
        windows = ops.concatenate(
            [windows, _cut(_cut(blocks, 1, num_blocks + 1, 2), 0, kernel_size - 1, 3)], axis=3)
    out = ops.matmul(band, windows)                          # [B, N, nb, block, d]
    out = ops.reshape(out, (batch, heads, rows, width))
    static = isinstance(rows, int) and isinstance(seq_len, int)
    return out if static and rows == seq_len else _cut(out, 0, seq_len, 2)


def dynamic_conv_band(values, kernel, causal=False):
    """Same contract as `dynamic_conv_shifted_sum` ([B, T, N, d] layout) as one batched matmul
    with a [T, T] band per head (the "expanded" form of fairseq): cheap for short T only."""
    kernel = ops.broadcast_to(kernel, (*ops.shape(values)[:3], kernel.shape[-1]))
    out = ops.matmul(band_matrix(ops.transpose(kernel, (0, 2, 1, 3)), causal),
                     ops.transpose(values, (0, 2, 1, 3)))
    return ops.transpose(out, (0, 2, 1, 3))


def dynamic_conv_blocked_band(values, kernel, block=None, causal=False):
    """Same contract as `dynamic_conv_shifted_sum` ([B, T, N, d] layout) via block-diagonal band
    matmuls of `block` rows (default BAND_BLOCK)."""
    kernel = ops.broadcast_to(kernel, (*ops.shape(values)[:3], kernel.shape[-1]))
    out = dynamic_conv_blocked_band_heads_first(ops.transpose(values, (0, 2, 1, 3)),
                                                ops.transpose(kernel, (0, 2, 1, 3)),
                                                block or BAND_BLOCK, causal)
    return ops.transpose(out, (0, 2, 1, 3))


def compiled_by_xla():
    """True under JAX, or inside a TF `jit_compile=True` function (XLA fuses the shifted sums;
    TF's graph executor runs them as separate kernels and prefers matmul / native convs)."""
    backend = keras.backend.backend()
    if backend != "tensorflow":
        return True
    try:
        import tensorflow as tf
        from tensorflow.python.ops import control_flow_util
        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # private API moved: fall back to the graph-executor choice
        return False


def resolve_implementation(implementation, seq_len=None):
    """The concrete implementation "auto" stands for (measured on CPU, docs/PERFORMANCE.md):
    under XLA (JAX, TF jit_compile) the fused shifted sum; in TF graph / eager mode the full band
    up to BAND_MAX_LENGTH tokens (static length), the blocked band beyond (or when T is unknown)."""
    if implementation != "auto":
        return implementation
    if compiled_by_xla():
        return "shifted_sum"
    if seq_len is not None and seq_len <= BAND_MAX_LENGTH:
        return "band"
    return "blocked_band"


def depthwise_conv_shifted_sum(x, depthwise_kernel, causal=False):
    """'same'-padded (or causal: K-1 left) depthwise 1-D convolution (cross-correlation, as Keras /
    TF1 `separable_conv1d`) as a sum of K shifted, scaled copies: x [B, T, C], depthwise_kernel
    [K, C] -> [B, T, C].
    Under XLA this is one fused loop; XLA's lowering of a grouped convolution is far slower on CPU."""
    kernel_size = depthwise_kernel.shape[0]
    seq_len = ops.shape(x)[1]
    padded = ops.pad(x, [[0, 0], list(edge_padding(kernel_size, causal)), [0, 0]])
    out = None
    for k in range(kernel_size):
        term = padded[:, k:k + seq_len] * depthwise_kernel[k]
        out = term if out is None else out + term
    return out


def dynamic_conv_unfold(values, kernel, causal=False):
    """Reference form of the official code: stack K shifted copies ([B,T,N,d,K]) and contract.

    Kept as the numerical oracle for faster implementations; it materialises K x the values.
    """
    kernel_size = kernel.shape[-1]
    seq_len = ops.shape(values)[1]
    padded = ops.pad(values, [[0, 0], list(edge_padding(kernel_size, causal)), [0, 0], [0, 0]])
    unfolded = ops.stack([padded[:, k:k + seq_len] for k in range(kernel_size)], axis=-1)
    kernel = ops.broadcast_to(kernel, (*ops.shape(values)[:3], kernel_size))
    return ops.einsum("btndk,btnk->btnd", unfolded, kernel)


_DYNAMIC_CONV = {"shifted_sum": dynamic_conv_shifted_sum, "band": dynamic_conv_band,
                 "blocked_band": dynamic_conv_blocked_band,
                 "unfold": dynamic_conv_unfold}


@keras.saving.register_keras_serializable(package="convbert")
class SpanDynamicConv(keras.layers.Layer):
    """The convolution heads: num_heads heads of width head_size, kernel width kernel_size."""

    def __init__(self, num_heads, head_size, kernel_size=9, conv_type="sdconv",
                 initializer_range=0.02, implementation="auto", causal=False, **kwargs):
        super().__init__(**kwargs)
        if conv_type not in ("sdconv", "dynamic", "lightweight"):
            raise ValueError(f"SpanDynamicConv: unknown conv_type {conv_type!r}")
        if implementation not in CONV_IMPLEMENTATIONS:
            raise ValueError(f"SpanDynamicConv: unknown implementation {implementation!r}; "
                             f"choose one of {', '.join(CONV_IMPLEMENTATIONS)}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.kernel_size = kernel_size
        self.conv_type = conv_type
        self.initializer_range = initializer_range
        self.implementation = implementation
        self.causal = bool(causal)
        width = num_heads * head_size
        init = truncated_normal(initializer_range)
        if conv_type == "sdconv":
            self.conv_attn_key = keras.layers.SeparableConv1D(
                width, kernel_size, padding="same", depth_multiplier=1,
                depthwise_initializer=truncated_normal(1.0 / kernel_size),
                pointwise_initializer=init, name="conv_attn_key")
        if conv_type in ("sdconv", "dynamic"):
            self.conv_attn_kernel = keras.layers.Dense(num_heads * kernel_size,
                                                       kernel_initializer=init,
                                                       name="conv_attn_kernel")
        self.conv_attn_point = keras.layers.Dense(width, kernel_initializer=init,
                                                  name="conv_attn_point")

    def build(self, input_shape):
        hidden_shape, query_shape = input_shape
        if self.conv_type == "sdconv":
            self.conv_attn_key.build(hidden_shape)
        if self.conv_type in ("sdconv", "dynamic"):
            self.conv_attn_kernel.build(query_shape)
        if self.conv_type == "lightweight":
            self.lightweight_kernel = self.add_weight(
                name="lightweight_kernel", shape=(self.num_heads, self.kernel_size),
                initializer=truncated_normal(self.initializer_range))
        self.conv_attn_point.build(hidden_shape)

    def span_key(self, hidden):
        """The span-aware key: depthwise K-tap conv over H, then pointwise H -> A, plus bias.

        Same variables and math as the Keras layer `conv_attn_key`, computed faster: under XLA
        the depthwise conv is a fused shifted sum (XLA's grouped convolution is slow on CPU); in
        TF graph / eager mode it is TF's native depthwise conv laid out [B, T, 1, H] (time as
        image height) followed by a plain matmul: forward + backward ~25% faster than the layer's
        [B, 1, T, H] depthwise conv + 1x1 convolution (ConvBERT-small widths, b16 s128).
        The layer is only the home of the variables (Keras' SeparableConv1D has no "causal"
        padding); causal padding is applied here.
        """
        layer, dtype = self.conv_attn_key, hidden.dtype
        depthwise = ops.cast(layer.depthwise_kernel, dtype)                       # [K, H, 1]
        pointwise = ops.cast(layer.pointwise_kernel, dtype)[0]                    # [H, A]
        if compiled_by_xla():
            spanned = depthwise_conv_shifted_sum(hidden, depthwise[:, :, 0], self.causal)
        elif self.causal:  # K-1 zeros on the left, then a 'valid' conv: tap k reads t+k-(K-1)
            left = ops.pad(hidden, [[0, 0], [self.kernel_size - 1, 0], [0, 0]])
            spanned = ops.squeeze(ops.depthwise_conv(ops.expand_dims(left, 2),
                                                     ops.expand_dims(depthwise, 1),
                                                     padding="valid"), 2)
        else:
            spanned = ops.squeeze(ops.depthwise_conv(ops.expand_dims(hidden, 2),
                                                     ops.expand_dims(depthwise, 1),
                                                     padding="same"), 2)
        return ops.matmul(spanned, pointwise) + ops.cast(layer.bias, dtype)

    def generate_kernel(self, hidden, query):
        """The dynamic kernel, [B, T, N, K] (softmax over the K taps)."""
        if self.conv_type == "lightweight":
            logits = ops.reshape(ops.cast(self.lightweight_kernel, hidden.dtype),
                                 (1, 1, self.num_heads, self.kernel_size))
            return ops.softmax(logits, axis=-1)
        if self.conv_type == "sdconv":
            logits = self.conv_attn_kernel(query * self.span_key(hidden))
        else:
            logits = self.conv_attn_kernel(query)
        batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
        logits = ops.reshape(logits, (batch, seq_len, self.num_heads, self.kernel_size))
        return ops.softmax(logits, axis=-1)

    def call(self, inputs):
        hidden, query = inputs
        kernel = self.generate_kernel(hidden, query)
        batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
        values = ops.reshape(self.conv_attn_point(hidden),
                             (batch, seq_len, self.num_heads, self.head_size))
        implementation = resolve_implementation(self.implementation, hidden.shape[1])
        out = _DYNAMIC_CONV[implementation](values, kernel, causal=self.causal)
        return ops.reshape(out, (batch, seq_len, self.num_heads * self.head_size))

    def weight_map(self):
        """Official TF1 names relative to `.../attention/self/`."""
        names = {"conv_attn_point/kernel": self.conv_attn_point.kernel,
                 "conv_attn_point/bias": self.conv_attn_point.bias}
        if self.conv_type == "sdconv":
            names.update({"conv_attn_key/depthwise_kernel": self.conv_attn_key.depthwise_kernel,
                          "conv_attn_key/pointwise_kernel": self.conv_attn_key.pointwise_kernel,
                          "conv_attn_key/bias": self.conv_attn_key.bias})
        if self.conv_type in ("sdconv", "dynamic"):
            names.update({"conv_attn_kernel/kernel": self.conv_attn_kernel.kernel,
                          "conv_attn_kernel/bias": self.conv_attn_kernel.bias})
        if self.conv_type == "lightweight":
            names["lightweight_kernel"] = self.lightweight_kernel
        return names

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "kernel_size": self.kernel_size, "conv_type": self.conv_type,
                "initializer_range": self.initializer_range,
                "implementation": self.implementation, "causal": self.causal}
