"""Mixed attention: N self-attention heads ‖ N span-based dynamic convolution heads.

`head_ratio` is the paper's bottleneck γ: of `num_attention_heads` heads of width d = H / heads,
only N = heads / γ remain self-attention heads (Q, K, V are N·d wide), and N convolution heads are
added beside them. The output is concat([attention heads, convolution heads]) — attention channels
first, as in the official code — which the caller projects back to H. With conv_type "none" there
are no convolution heads (the paper's "+BNK" bottleneck-only model); head_ratio=1 with "none" is
plain BERT / ELECTRA self-attention.
"""
import math

import keras
from keras import ops

from model.initializers import truncated_normal
from model.span_dynamic_conv import SpanDynamicConv

# Additive bias on masked keys, as the official code (finite, so fp16 / bf16 stay finite).
MASKED_KEY_BIAS = -10000.0


def attention_bias_from_mask(input_mask, dtype="float32"):
    """[B, T] 0/1 key mask -> additive bias [B, 1, 1, T] broadcast over heads and queries."""
    mask = ops.cast(input_mask, dtype)
    return ops.reshape((1.0 - mask) * MASKED_KEY_BIAS, (ops.shape(mask)[0], 1, 1, ops.shape(mask)[1]))


@keras.saving.register_keras_serializable(package="convbert")
class MixedAttention(keras.layers.Layer):
    def __init__(self, num_heads, head_size, conv_type="sdconv", conv_kernel_size=9,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02,
                 conv_implementation="shifted_sum", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_size = head_size
        self.conv_type = conv_type
        self.conv_kernel_size = conv_kernel_size
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.conv_implementation = conv_implementation
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
                name="span_dynamic_conv")

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value):
            layer.build(input_shape)
        if self.span_dynamic_conv is not None:
            self.span_dynamic_conv.build(
                (input_shape, (*input_shape[:-1], self.num_heads * self.head_size)))

    def call(self, hidden, attention_bias=None, training=None, return_attention_probs=False):
        batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
        query = self.query(hidden)

        def heads(x):
            return ops.reshape(x, (batch, seq_len, self.num_heads, self.head_size))

        q, k, v = heads(query), heads(self.key(hidden)), heads(self.value(hidden))
        scores = ops.einsum("bqnd,bknd->bnqk", q, k) * (1.0 / math.sqrt(self.head_size))
        if attention_bias is not None:
            scores = scores + ops.cast(attention_bias, scores.dtype)
        probs = ops.softmax(scores, axis=-1)
        context = ops.einsum("bnqk,bknd->bqnd", self.probs_dropout(probs, training=training), v)
        context = ops.reshape(context, (batch, seq_len, self.num_heads * self.head_size))
        if self.span_dynamic_conv is not None:
            # The official code feeds the unscaled query (not q / sqrt(d)) to the kernel generator.
            conv = self.span_dynamic_conv((hidden, query))
            context = ops.concatenate([context, conv], axis=-1)
        if return_attention_probs:
            return context, probs
        return context

    def weight_map(self):
        """Official TF1 names relative to `.../attention/self/`."""
        names = {}
        for name in ("query", "key", "value"):
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
                "conv_implementation": self.conv_implementation}
