"""`ConvBertBackbone`: the toolkit's `ConvBertModel` as a KerasHub `Backbone`.

    backbone = ConvBertBackbone.from_convbert_config(ConvBertConfig.from_size("small"))
    out = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    out["sequence_output"]   # [B, T, H], ConvBertModel's output on the same weights
    out["pooled_output"]     # [B, H], the [CLS] vector (no pooler: the official ConvBERT /
                             # ELECTRA classifier reads h[:, 0] directly)

The encoder is one layer of this functional model (`backbone.encoder`, named "convbert"), so its
weights keep their official TF1 names through `backbone.encoder.weight_map()`; the constructor's
arguments are KerasHub's names where KerasHub's BERT has the field (`vocabulary_size`,
`num_layers`, `num_heads`, `hidden_dim`, `intermediate_dim`, `dropout`, `max_sequence_length`,
`num_segments`) and ConvBERT's own otherwise (`embedding_dim`, `head_ratio`, `conv_kernel_size`,
`num_groups`, `conv_type`, ...), every field of `ConvBertConfig` once.
"""
import contextlib

import keras
from keras_hub.models import Backbone

from model.checkpoints import KERAS_HUB_PACKAGE, keras_hub_arguments
from model.config import ConvBertConfig
from model.encoder import ConvBertModel

# The package the classes are registered under; the argument names: model/checkpoints.py, which
# reads a preset's config.json and weights without KerasHub.
SERIALIZATION_PACKAGE = KERAS_HUB_PACKAGE


@contextlib.contextmanager
def dtype_policy_scope(dtype):
    """Keras' global dtype policy set to `dtype` while the encoder's layers are made (they take
    the global policy; a DTypePolicyMap, for quantized weights, is left to Keras)."""
    if dtype is None or isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(keras.dtype_policies.get(dtype))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


class ConvBertEncoder(ConvBertModel):
    """`ConvBertModel` that states its output spec ([B, T, H] in the compute dtype): a symbolic
    call (the functional graph) then needs no trace of the encoder, which on JAX cannot
    broadcast the position table cut to an unknown length."""

    def compute_output_spec(self, inputs, *args, **kwargs):
        shape = tuple(inputs["input_ids"].shape) + (self.config.hidden_size,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertBackbone(Backbone):
    """A ConvBERT encoder (span-based dynamic convolution ‖ self-attention heads) for KerasHub.

    Inputs `token_ids`, `padding_mask`, `segment_ids` (int [B, T]); outputs `sequence_output`
    [B, T, H] and `pooled_output` [B, H] (the [CLS] vector). Outputs depend on the padded length
    (the convolution branch sees padding, as in the official code): pad to the length the model
    was trained with (128 for the released models; the preprocessors' default).
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 embedding_dim=None, head_ratio=2, conv_kernel_size=9, num_groups=1,
                 conv_type="sdconv", use_self_attention=True, num_heads_per_kind=None,
                 hidden_activation="gelu", dropout=0.1, attention_dropout=0.1,
                 max_sequence_length=512, num_segments=2, initializer_range=0.02,
                 layer_norm_epsilon=1e-12, conv_implementation="auto", dtype=None, **kwargs):
        config = ConvBertConfig(
            vocab_size=vocabulary_size, num_hidden_layers=num_layers,
            num_attention_heads=num_heads, hidden_size=hidden_dim,
            intermediate_size=intermediate_dim, embedding_size=embedding_dim,
            head_ratio=head_ratio, conv_kernel_size=conv_kernel_size, num_groups=num_groups,
            conv_type=conv_type, use_self_attention=use_self_attention,
            num_heads_per_kind=num_heads_per_kind, hidden_act=hidden_activation,
            hidden_dropout_prob=dropout, attention_probs_dropout_prob=attention_dropout,
            max_position_embeddings=max_sequence_length, type_vocab_size=num_segments,
            initializer_range=initializer_range, layer_norm_eps=layer_norm_epsilon)
        with dtype_policy_scope(dtype):
            self.encoder = ConvBertEncoder(config, conv_implementation=conv_implementation,
                                           name="convbert")

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        sequence_output = self.encoder({"input_ids": token_ids, "input_mask": padding_mask,
                                        "segment_ids": segment_ids})
        pooled_output = sequence_output[:, 0, :]
        super().__init__(
            inputs={"token_ids": token_ids, "segment_ids": segment_ids,
                    "padding_mask": padding_mask},
            outputs={"sequence_output": sequence_output, "pooled_output": pooled_output},
            dtype=dtype, **kwargs)

        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.embedding_dim = config.embedding_size
        self.head_ratio = head_ratio
        self.conv_kernel_size = conv_kernel_size
        self.num_groups = num_groups
        self.conv_type = config.conv_type
        self.use_self_attention = use_self_attention
        self.num_heads_per_kind = num_heads_per_kind
        self.hidden_activation = hidden_activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.conv_implementation = conv_implementation
        self.cls_token_index = 0

    # ---------------------------------------------------------------- the toolkit's view
    @property
    def convbert_config(self) -> ConvBertConfig:
        """The `ConvBertConfig` of the encoder (what `ConvBertModel(config)` would build)."""
        return self.encoder.config

    @classmethod
    def arguments_of(cls, config: ConvBertConfig) -> dict:
        """The constructor's arguments for `config`."""
        if config.causal:
            raise ValueError("a causal (language-model) config is not a KerasHub encoder backbone")
        return keras_hub_arguments(config)

    @classmethod
    def from_convbert_config(cls, config: ConvBertConfig, **kwargs):
        """A backbone of `config` (random weights; load them with `load_convbert_weights`)."""
        return cls(**cls.arguments_of(config), **kwargs)

    def weight_map(self):
        """Official TF1 name -> variable, as `ConvBertModel.weight_map`."""
        return self.encoder.weight_map()

    def get_config(self):
        config = super().get_config()
        config.update(self.arguments_of(self.convbert_config))
        config["conv_implementation"] = self.conv_implementation
        return config
