"""Mixed attention: N self-attention heads ‖ N span-based dynamic convolution heads.

`head_ratio` is the paper's bottleneck γ: of `num_attention_heads` heads of width d = H / heads,
only N = heads / γ remain self-attention heads (Q, K, V are N·d wide), and N convolution heads are
added beside them. The output is concat([attention heads, convolution heads]) — attention channels
first, as in the official code — which the caller projects back to H. With conv_type "none" there
are no convolution heads (the paper's "+BNK" bottleneck-only model); head_ratio=1 with "none" is
plain BERT / ELECTRA self-attention.

`causal=True` (the language model, lm/): query t only attends to keys ≤ t (the scores of later
keys set to MASKED_KEY_BIAS) and the convolution heads are causal (model/span_dynamic_conv.py).
"""
import math

import keras
from keras import ops

from model.initializers import truncated_normal
from model.span_dynamic_conv import SpanDynamicConv, split_at

# Additive bias on masked keys, as the official code (finite, so fp16 / bf16 stay finite).
MASKED_KEY_BIAS = -10000.0


def attention_bias_from_mask(input_mask, dtype="float32"):
    """[B, T] 0/1 key mask -> additive bias [B, 1, 1, T] broadcast over heads and queries."""
    mask = ops.cast(input_mask, dtype)
    return ops.reshape((1.0 - mask) * MASKED_KEY_BIAS, (ops.shape(mask)[0], 1, 1, ops.shape(mask)[1]))


def future_keys(seq_len):
    """[1, 1, T, T] bool: True where the key comes after the query (s > t)."""
    positions = ops.arange(seq_len)
    return ops.reshape(ops.greater(positions[None, :], positions[:, None]),
                       (1, 1, seq_len, seq_len))


@keras.saving.register_keras_serializable(package="convbert")
class MixedAttention(keras.layers.Layer):
    def __init__(self, num_heads, head_size, conv_type="sdconv", conv_kernel_size=9,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02,
                 conv_implementation="auto", use_self_attention=True, causal=False, **kwargs):
        super().__init__(**kwargs)
        if not use_self_attention and conv_type == "none":
            raise ValueError("MixedAttention needs self-attention or convolution heads")
        self.use_self_attention = use_self_attention
        self.num_heads = num_heads
        self.head_size = head_size
        self.conv_type = conv_type
        self.conv_kernel_size = conv_kernel_size
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.conv_implementation = conv_implementation
        self.causal = bool(causal)
        width = num_heads * head_size
        init = truncated_normal(initializer_range)
        self.query = keras.layers.Dense(width, kernel_initializer=init, name="query")
        self.key = keras.layers.Dense(width, kernel_initializer=init, name="key")
        self.value = keras.layers.Dense(width, kernel_initializer=init, name="value")
        self.probs_dropout = keras.layers.Dropout(attention_probs_dropout_prob)
        self.span_dynamic_conv = None
        if conv_type != "none":
            self.span_dynamic_conv = SpanDynamicConv(
                num_heads, head_size, conv_kernel_size, conv_type=conv_type,
                initializer_range=initializer_range, implementation=conv_implementation,
                causal=causal, name="span_dynamic_conv")

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value)[:3 if self.use_self_attention else 1]:
            layer.build(input_shape)
        if self.span_dynamic_conv is not None:
            self.span_dynamic_conv.build(
                (input_shape, (*input_shape[:-1], self.num_heads * self.head_size)))

    def _projection_layers(self):
        layers = [self.query, self.key, self.value]
        if self.span_dynamic_conv is not None:
            layers.append(self.span_dynamic_conv.conv_attn_point)
        return layers

    def call(self, hidden, attention_bias=None, training=None, return_attention_probs=False,
             head_mask=None):
        """Same math as the reference formulation (see `call_reference`), arranged for speed:

        * Q, K, V and the conv values share their input: their four kernels are concatenated at
          call time into one [H, 4A] matmul (the variables, their names and layouts stay separate,
          so `weight_map()` / checkpoint loading are unchanged);
        * heads are laid out [B, N, T, d] once, with one transpose for all projections;
        * the 1/sqrt(d) scale is applied to q ([T, d]) instead of the scores ([T, T]);
        * the convolution heads are a band matmul (short T), blocked band matmuls (long T) or a
          fused shifted sum (XLA), never the K-times larger unfold (unless asked for).

        `head_mask` (default None: not used): [heads] factors, self-attention heads first, then
        convolution heads, each multiplying its head's d output channels before the output dense;
        its gradient is the head importance of elastic/importance.py.
        """
        from model.span_dynamic_conv import (_DYNAMIC_CONV, BAND_BLOCK, band_matrix,
                                             dynamic_conv_blocked_band_heads_first,
                                             resolve_implementation)
        if not self.use_self_attention:  # convolution-only ablation: the query only feeds the kernel
            context = self.span_dynamic_conv((hidden, self.query(hidden)))
            if head_mask is not None:
                context = self._mask_heads(context, head_mask)
            return (context, None) if return_attention_probs else context
        batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
        n, d = self.num_heads, self.head_size
        width = n * d
        dtype = hidden.dtype
        layers = self._projection_layers()
        kernel = ops.concatenate([ops.cast(l.kernel, dtype) for l in layers], axis=-1)
        bias = ops.concatenate([ops.cast(l.bias, dtype) for l in layers], axis=-1)
        proj = ops.matmul(hidden, kernel) + bias                                # [B, T, P*A]
        heads = ops.transpose(ops.reshape(proj, (batch, seq_len, len(layers), n, d)),
                              (0, 2, 3, 1, 4))                                  # [B, P, N, T, d]
        # Split, not slices: a slice's gradient is a zero-filled full-size tensor per slice
        # (TF's StridedSliceGrad, ~10% of a small model's training step), split's is one concat.
        q, k, values = split_at(heads, [1, 2], axis=1)     # values: V (and V_conv) [B, P-2, N, T, d]
        q = ops.squeeze(q, 1) * ops.cast(1.0 / math.sqrt(d), dtype)
        scores = ops.einsum("bnqd,bnkd->bnqk", q, ops.squeeze(k, 1))
        scores = self._add_biases(scores, attention_bias)
        probs = ops.softmax(scores, axis=-1)
        dropped = self.probs_dropout(probs, training=training)
        sdc = self.span_dynamic_conv
        implementation = None
        if sdc is not None:
            implementation = resolve_implementation(sdc.implementation, hidden.shape[1])
            # The official code feeds the unscaled query (not q / sqrt(d)) to the kernel generator.
            query = split_at(proj, [width], axis=-1)[0]
            conv_kernel = sdc.generate_kernel(hidden, query)                    # [B, T, N, K]
        if sdc is None:
            context = ops.matmul(dropped, ops.squeeze(values, 1))               # [B, N, T, d]
            context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (batch, seq_len, width))
        elif implementation in ("band", "blocked_band"):
            if sdc.conv_type == "lightweight":  # one static kernel per head: [1, 1, N, K]
                conv_kernel = ops.broadcast_to(conv_kernel, (batch, seq_len, n, sdc.kernel_size))
            conv_kernel = ops.transpose(conv_kernel, (0, 2, 1, 3))
            if implementation == "band":
                # Attention heads and convolution heads in one batched matmul over 2N "heads":
                # [probs ‖ band] [B, 2N, T, T] @ [V ‖ V_conv] [B, 2N, T, d]; V and V_conv are
                # adjacent in the projection, so the right operand is a free reshape and the
                # result is already the concatenated context (attention channels first, as the
                # official code).
                band = band_matrix(conv_kernel, self.causal)                    # [B, N, T, T]
                mixers = ops.concatenate([dropped, ops.cast(band, dropped.dtype)], axis=1)
                values = ops.reshape(values, (batch, 2 * n, seq_len, d))
                context = ops.matmul(mixers, values)                            # [B, 2N, T, d]
            else:
                # Long T: blocks of BAND_BLOCK rows (a full band would cost as much as attention);
                # both halves stay heads-first, concatenated over heads as above.
                value, conv_value = (ops.squeeze(v, 1) for v in ops.split(values, 2, axis=1))
                conv = dynamic_conv_blocked_band_heads_first(
                    conv_value, ops.cast(conv_kernel, dtype), BAND_BLOCK, self.causal)
                context = ops.concatenate([ops.matmul(dropped, value), conv], axis=1)
            context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (batch, seq_len, 2 * width))
        else:
            context = ops.matmul(dropped, ops.squeeze(ops.split(values, 2, axis=1)[0], 1))
            conv_values = ops.reshape(split_at(proj, [3 * width], axis=-1)[1],
                                      (batch, seq_len, n, d))
            conv = ops.reshape(_DYNAMIC_CONV[implementation](conv_values, conv_kernel,
                                                             causal=self.causal),
                               (batch, seq_len, width))
            context = ops.concatenate(
                [ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (batch, seq_len, width)), conv],
                axis=-1)
        if head_mask is not None:
            context = self._mask_heads(context, head_mask)
        if return_attention_probs:
            return context, probs
        return context

    def _add_biases(self, scores, attention_bias):
        """scores [B, N, T, T] + the padding bias (when given); later keys masked (when causal)."""
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, scores.dtype)
        if self.causal:
            # A select, not a second additive bias: TF's graph optimizer folds a [T, T] bias to a
            # constant and fuses it into the score matmul, a oneDNN path 15-35x slower on CPU
            # in inference graphs (docs/PERFORMANCE.md, "Causal attention mask").
            scores = ops.where(future_keys(ops.shape(scores)[-1]),
                               ops.cast(MASKED_KEY_BIAS, scores.dtype), scores)
        return scores

    def _mask_heads(self, context, head_mask):
        """context [B, T, heads * d] with head h's d channels scaled by head_mask[h]."""
        return context * ops.repeat(ops.cast(head_mask, context.dtype), self.head_size, axis=0)

    def call_reference(self, hidden, attention_bias=None, training=None):
        """The straightforward formulation (separate projections, unfold-free layer call)."""
        batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
        query = self.query(hidden)
        if not self.use_self_attention:
            return self.span_dynamic_conv((hidden, query))

        def heads(x):
            return ops.reshape(x, (batch, seq_len, self.num_heads, self.head_size))

        q, k, v = heads(query), heads(self.key(hidden)), heads(self.value(hidden))
        scores = ops.einsum("bqnd,bknd->bnqk", q, k) * (1.0 / math.sqrt(self.head_size))
        scores = self._add_biases(scores, attention_bias)
        probs = ops.softmax(scores, axis=-1)
        context = ops.einsum("bnqk,bknd->bqnd", self.probs_dropout(probs, training=training), v)
        context = ops.reshape(context, (batch, seq_len, self.num_heads * self.head_size))
        if self.span_dynamic_conv is not None:
            conv = self.span_dynamic_conv((hidden, query))
            context = ops.concatenate([context, conv], axis=-1)
        return context

    def weight_map(self):
        """Official TF1 names relative to `.../attention/self/`."""
        names = {}
        for name in ("query", "key", "value")[:3 if self.use_self_attention else 1]:
            layer = getattr(self, name)
            names[f"{name}/kernel"] = layer.kernel
            names[f"{name}/bias"] = layer.bias
        if self.span_dynamic_conv is not None:
            names.update(self.span_dynamic_conv.weight_map())
        return names

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "head_size": self.head_size,
                "conv_type": self.conv_type, "conv_kernel_size": self.conv_kernel_size,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "initializer_range": self.initializer_range,
                "conv_implementation": self.conv_implementation,
                "use_self_attention": self.use_self_attention, "causal": self.causal}
