"""`ConvBertModel`: embeddings (+ E->H projection) and a stack of ConvBERT blocks.

    model = ConvBertModel(ConvBertConfig.from_size("small"))
    seq = model({"input_ids": ids, "input_mask": mask, "segment_ids": segs})          # [B, T, H]
    out = model(inputs, output_hidden_states=True, output_attentions=True)
    out["hidden_states"]    # [encoder input, layer 1 output, ..., layer L output]
    out["attention_probs"]  # per layer, the self-attention probabilities [B, N, T, T]
    model(inputs, head_mask=m)  # m [layers, heads]: each head's output scaled (elastic/importance.py)

Weights are also addressable by their official TF1 names (`weight_map`), which is how the
Hugging Face, TF1 and native checkpoint formats are read and written (model/checkpoints.py).
"""
import keras
from keras import ops

from model.checkpoints import PretrainedIO
from model.config import ConvBertConfig
from model.embeddings import ConvBertEmbeddings
from model.initializers import truncated_normal
from model.mixed_attention import attention_bias_from_mask
from model.transformer_layer import ConvBertLayer


@keras.saving.register_keras_serializable(package="convbert")
class ConvBertModel(PretrainedIO, keras.Model):
    def __init__(self, config, embeddings=None, conv_implementation="auto", **kwargs):
        if isinstance(config, dict):
            config = ConvBertConfig.from_dict(config)
        kwargs.setdefault("name", "convbert")
        super().__init__(**kwargs)
        self.config = config
        self.conv_implementation = conv_implementation
        self._shares_embeddings = embeddings is not None
        if embeddings is not None and embeddings.embedding_size != config.embedding_size:
            raise ValueError(f"shared embeddings are {embeddings.embedding_size} wide but the config "
                             f"has embedding_size {config.embedding_size}")
        self.embeddings = embeddings or ConvBertEmbeddings(
            config.vocab_size, config.embedding_size, config.max_position_embeddings,
            config.type_vocab_size, config.initializer_range, config.layer_norm_eps,
            config.hidden_dropout_prob, name="embeddings")
        self.embeddings_project = None
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = keras.layers.Dense(
                config.hidden_size, kernel_initializer=truncated_normal(config.initializer_range),
                name="embeddings_project")
        self.encoder_layers = [
            ConvBertLayer(config.hidden_size, config.num_self_attention_heads, config.head_size,
                          config.intermediate_size, config.num_groups, config.conv_type,
                          config.conv_kernel_size, config.hidden_act, config.hidden_dropout_prob,
                          config.attention_probs_dropout_prob, config.initializer_range,
                          config.layer_norm_eps, conv_implementation,
                          config.use_self_attention, causal=config.causal, name=f"layer_{i}")
            for i in range(config.num_hidden_layers)]
        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        cfg = self.config
        if not self.embeddings.built:
            self.embeddings.build()
        if self.embeddings_project is not None:
            self.embeddings_project.build((None, None, cfg.embedding_size))
        for layer in self.encoder_layers:
            layer.build((None, None, cfg.hidden_size))
        self.built = True

    def call(self, inputs, training=None, output_hidden_states=False, output_attentions=False,
             head_mask=None):
        input_ids = inputs["input_ids"]
        input_mask = inputs.get("input_mask")
        if input_mask is None:
            input_mask = ops.ones_like(input_ids)
        embedded = self.embeddings(input_ids, inputs.get("segment_ids"), training=training)
        hidden = embedded
        if self.embeddings_project is not None:
            hidden = self.embeddings_project(hidden)
        bias = attention_bias_from_mask(input_mask, hidden.dtype)
        hidden_states, attention_probs = [hidden], []
        for i, layer in enumerate(self.encoder_layers):
            hidden = layer(hidden, bias, training=training, return_attention_probs=output_attentions,
                           head_mask=None if head_mask is None else head_mask[i])
            if output_attentions:
                hidden, probs = hidden
                if probs is not None:
                    attention_probs.append(probs)
            hidden_states.append(hidden)
        if not (output_hidden_states or output_attentions):
            return hidden
        out = {"sequence_output": hidden, "embedding_output": embedded}
        if output_hidden_states:
            out["hidden_states"] = hidden_states
        if output_attentions:
            out["attention_probs"] = attention_probs
        return out

    # ------------------------------------------------------------------ weights by official name
    def weight_map(self, scope="electra", include_embeddings=True):
        """Official TF1 variable name -> Keras variable, e.g. `electra/encoder/layer_0/...`."""
        names = {}
        if include_embeddings:
            names.update({f"{scope}/embeddings/{k}": v for k, v in self.embeddings.weight_map().items()})
        if self.embeddings_project is not None:
            names[f"{scope}/embeddings_project/kernel"] = self.embeddings_project.kernel
            names[f"{scope}/embeddings_project/bias"] = self.embeddings_project.bias
        for i, layer in enumerate(self.encoder_layers):
            names.update({f"{scope}/encoder/layer_{i}/{k}": v for k, v in layer.weight_map().items()})
        return names

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict(),
                "conv_implementation": self.conv_implementation}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ConvBertConfig.from_dict(config.pop("config")), **config)
