"""One ConvBERT block (post-LayerNorm, BERT style, official `transformer_model`):

    a = LN(x + dropout(Dense_H(MixedAttention(x))))
    y = LN(a + dropout(FFN_out(gelu(FFN_in(a)))))        FFN layers grouped when num_groups > 1
"""
import keras
from keras import ops

from model.grouped_dense import GroupedDense
from model.initializers import truncated_normal
from model.mixed_attention import MixedAttention


def activation(name):
    if name == "gelu":  # exact erf GELU, as the official code and HF's "gelu"
        return lambda x: ops.gelu(x, approximate=False)
    if name == "gelu_new":
        return lambda x: ops.gelu(x, approximate=True)
    return keras.activations.get(name)


@keras.saving.register_keras_serializable(package="convbert")
class ConvBertLayer(keras.layers.Layer):
    def __init__(self, hidden_size, num_heads, head_size, intermediate_size, num_groups=1,
                 conv_type="sdconv", conv_kernel_size=9, hidden_act="gelu",
                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 initializer_range=0.02, layer_norm_eps=1e-12, conv_implementation="auto",
                 use_self_attention=True, causal=False, **kwargs):
        super().__init__(**kwargs)
        self._args = dict(hidden_size=hidden_size, num_heads=num_heads, head_size=head_size,
                          intermediate_size=intermediate_size, num_groups=num_groups,
                          conv_type=conv_type, conv_kernel_size=conv_kernel_size,
                          hidden_act=hidden_act, hidden_dropout_prob=hidden_dropout_prob,
                          attention_probs_dropout_prob=attention_probs_dropout_prob,
                          initializer_range=initializer_range, layer_norm_eps=layer_norm_eps,
                          conv_implementation=conv_implementation,
                          use_self_attention=use_self_attention, causal=causal)
        self.num_groups = num_groups
        self.hidden_act = hidden_act
        self.act = activation(hidden_act)
        init = truncated_normal(initializer_range)
        self.attention = MixedAttention(num_heads, head_size, conv_type, conv_kernel_size,
                                        attention_probs_dropout_prob, initializer_range,
                                        conv_implementation, use_self_attention, causal=causal,
                                        name="self")
        self.attention_output = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                                   name="attention_output")
        self.attention_dropout = keras.layers.Dropout(hidden_dropout_prob)
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, name="attention_LayerNorm")
        if num_groups > 1:
            self.intermediate = GroupedDense(intermediate_size, num_groups, init, name="intermediate")
            self.output_dense = GroupedDense(hidden_size, num_groups, init, name="output")
        else:
            self.intermediate = keras.layers.Dense(intermediate_size, kernel_initializer=init,
                                                   name="intermediate")
            self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                                   name="output")
        self.output_dropout = keras.layers.Dropout(hidden_dropout_prob)
        self.output_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_eps,
                                                                 name="output_LayerNorm")

    def build(self, input_shape):
        hidden = input_shape[-1]
        context_width = self._args["num_heads"] * self._args["head_size"] * (
            int(self._args["use_self_attention"]) + int(self._args["conv_type"] != "none"))
        self.attention.build(input_shape)
        self.attention_output.build((*input_shape[:-1], context_width))
        self.attention_layer_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self._args["intermediate_size"]))
        self.output_layer_norm.build((*input_shape[:-1], hidden))

    def call(self, hidden, attention_bias=None, training=None, return_attention_probs=False,
             head_mask=None):
        """`head_mask`: optional [heads] factors on the attention heads' outputs (MixedAttention)."""
        context = self.attention(hidden, attention_bias, training=training,
                                 return_attention_probs=return_attention_probs,
                                 head_mask=head_mask)
        if return_attention_probs:
            context, probs = context  # probs is None for a convolution-only model
        attention_out = self.attention_layer_norm(
            hidden + self.attention_dropout(self.attention_output(context), training=training))
        ffn = self.output_dense(self.act(self.intermediate(attention_out)))
        out = self.output_layer_norm(attention_out + self.output_dropout(ffn, training=training))
        if return_attention_probs:
            return out, probs
        return out

    def weight_map(self):
        """Official TF1 names relative to `<scope>/encoder/layer_<i>/`."""
        names = {f"attention/self/{k}": v for k, v in self.attention.weight_map().items()}
        ffn = "g_dense" if self.num_groups > 1 else "dense"
        names.update({
            "attention/output/dense/kernel": self.attention_output.kernel,
            "attention/output/dense/bias": self.attention_output.bias,
            "attention/output/LayerNorm/gamma": self.attention_layer_norm.gamma,
            "attention/output/LayerNorm/beta": self.attention_layer_norm.beta,
            f"intermediate/{ffn}/kernel": self.intermediate.kernel,
            f"intermediate/{ffn}/bias": self.intermediate.bias,
            f"output/{ffn}/kernel": self.output_dense.kernel,
            f"output/{ffn}/bias": self.output_dense.bias,
            "output/LayerNorm/gamma": self.output_layer_norm.gamma,
            "output/LayerNorm/beta": self.output_layer_norm.beta,
        })
        return names

    def get_config(self):
        return {**super().get_config(), **self._args}
