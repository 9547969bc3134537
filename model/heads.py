"""Pre-training heads of ELECTRA / ConvBERT.

* `MaskedLMHead` (generator, official `generator_predictions`): dense(E) -> GELU -> LayerNorm, then
  logits against the word-embedding table (tied) plus an output bias [V].
* `DiscriminatorHead` (official `discriminator_predictions`): dense(H) -> GELU -> dense(1).
"""
import keras
from keras import ops

from model.initializers import truncated_normal
from model.transformer_layer import activation


@keras.saving.register_keras_serializable(package="convbert")
class MaskedLMHead(keras.layers.Layer):
    """Needs the embeddings layer whose `word_embeddings` [V, E] the logits are tied to."""

    def __init__(self, embeddings, hidden_act="gelu", layer_norm_eps=1e-12, initializer_range=0.02,
                 **kwargs):
        super().__init__(**kwargs)
        self.embeddings = embeddings
        self.hidden_act = hidden_act
        self.act = activation(hidden_act)
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(embeddings.embedding_size,
                                        kernel_initializer=truncated_normal(initializer_range),
                                        name="dense")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_eps, name="LayerNorm")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.layer_norm.build((*input_shape[:-1], self.embeddings.embedding_size))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.embeddings.vocab_size,),
                                           initializer="zeros")

    def call(self, hidden):
        h = self.layer_norm(self.act(self.dense(hidden)))
        table = ops.cast(self.embeddings.word_embeddings, h.dtype)
        return ops.matmul(h, ops.transpose(table)) + ops.cast(self.output_bias, h.dtype)

    def weight_map(self):
        """Official TF1 names relative to `generator_predictions/`."""
        return {"dense/kernel": self.dense.kernel, "dense/bias": self.dense.bias,
                "LayerNorm/gamma": self.layer_norm.gamma, "LayerNorm/beta": self.layer_norm.beta,
                "output_bias": self.output_bias}


@keras.saving.register_keras_serializable(package="convbert")
class DiscriminatorHead(keras.layers.Layer):
    """Per-token "was this token replaced?" logit, [B, T]."""

    def __init__(self, hidden_size, hidden_act="gelu", initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.act = activation(hidden_act)
        init = truncated_normal(initializer_range)
        self.dense = keras.layers.Dense(hidden_size, kernel_initializer=init, name="dense")
        self.dense_prediction = keras.layers.Dense(1, kernel_initializer=init, name="dense_1")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.dense_prediction.build((*input_shape[:-1], self.hidden_size))

    def call(self, hidden):
        return ops.squeeze(self.dense_prediction(self.act(self.dense(hidden))), axis=-1)

    def weight_map(self):
        """Official TF1 names relative to `discriminator_predictions/`."""
        return {"dense/kernel": self.dense.kernel, "dense/bias": self.dense.bias,
                "dense_1/kernel": self.dense_prediction.kernel,
                "dense_1/bias": self.dense_prediction.bias}

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "hidden_act": self.hidden_act, "initializer_range": self.initializer_range}
