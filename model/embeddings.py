"""Token + position + segment embeddings, LayerNorm and dropout (official `embedding_postprocessor`).

The E -> H projection (`embeddings_project`) lives in the encoder, not here, because the ELECTRA
generator shares this layer with the discriminator but has its own projection.
"""
import keras
from keras import ops

from model.initializers import truncated_normal


@keras.saving.register_keras_serializable(package="convbert")
class ConvBertEmbeddings(keras.layers.Layer):
    def __init__(self, vocab_size, embedding_size, max_position_embeddings=512, type_vocab_size=2,
                 initializer_range=0.02, layer_norm_eps=1e-12, dropout_rate=0.1, **kwargs):
        # No autocast: under mixed precision the lookups read the float32 tables and the sum is
        # cast once (below). Autocast would cast each whole table to bf16 first, making the
        # lookup's gradient a bf16 scatter-add, which a GPU does with compare-and-swap loops
        # (slow where many tokens share a row: [PAD], [CLS], a frequent word).
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout_rate
        self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_eps, name="LayerNorm")
        self.dropout = keras.layers.Dropout(dropout_rate)

    def build(self, input_shape=None):
        init = truncated_normal(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.embedding_size), initializer=init)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, self.embedding_size),
            initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.embedding_size),
            initializer=init)
        self.layer_norm.build((None, None, self.embedding_size))

    def call(self, input_ids, segment_ids=None, training=None):
        seq_len = ops.shape(input_ids)[1]
        x = ops.take(self.word_embeddings, input_ids, axis=0)
        if segment_ids is None:
            segment_ids = ops.zeros_like(input_ids)
        x = x + self.token_type_lookup(segment_ids)
        x = x + ops.expand_dims(self.position_embeddings[:seq_len], 0)
        x = self.layer_norm(ops.cast(x, self.compute_dtype))
        return self.dropout(x, training=training)

    def token_type_lookup(self, segment_ids):
        """token_type_embeddings[segment_ids], as a sum of selects (the official code uses a
        one-hot matmul here). Forward values are the gather's exactly; the gradient is a reduction
        per type rather than a scatter-add of every token into one of 2 rows, which a GPU
        serialises: 10 ms of a 19 ms fine-tuning step on an H200 (docs/PERFORMANCE.md P4)."""
        segment_ids = ops.expand_dims(segment_ids, -1)
        out = None
        for t in range(self.type_vocab_size):
            part = ops.where(segment_ids == t, self.token_type_embeddings[t], 0.0)
            out = part if out is None else out + part
        return out

    def weight_map(self):
        """Official TF1 names (relative to `<scope>/embeddings/`) -> variables."""
        return {"word_embeddings": self.word_embeddings,
                "token_type_embeddings": self.token_type_embeddings,
                "position_embeddings": self.position_embeddings,
                "LayerNorm/gamma": self.layer_norm.gamma,
                "LayerNorm/beta": self.layer_norm.beta}

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "embedding_size": self.embedding_size,
                "max_position_embeddings": self.max_position_embeddings,
                "type_vocab_size": self.type_vocab_size,
                "initializer_range": self.initializer_range,
                "layer_norm_eps": self.layer_norm_eps, "dropout_rate": self.dropout_rate}
