"""`ConvBertLM`: a decoder-only language model = the ConvBERT encoder with `causal=True` and the
MLM head's tied output layer (model/heads.py `MaskedLMHead`):

    h      = ConvBertModel(causal)(ids)                     # [B, T, H], position t sees ids ≤ t
    logits = LN(gelu(h W_E + b)) Eᵀ + bias                  # W_E: H -> E, E the word embeddings

No token types (segment 0 everywhere). With conv_type "none" and head_ratio 1 it is a plain
post-LayerNorm Transformer LM (configs/lm_small_transformer.json); with "sdconv" ConvBERT's mixed
attention (configs/lm_small_mixed.json).

    model = ConvBertLM(ConvBertConfig.from_name("lm_small_mixed"))
    logits = model({"input_ids": ids})                      # [B, T, V]: logits for token t+1
"""
import keras

from model.checkpoints import PretrainedIO
from model.config import ConvBertConfig
from model.encoder import ConvBertModel
from model.heads import MaskedLMHead


@keras.saving.register_keras_serializable(package="convbert")
class ConvBertLM(PretrainedIO, keras.Model):
    def __init__(self, config, conv_implementation="auto", **kwargs):
        if isinstance(config, dict):
            config = ConvBertConfig.from_dict(config)
        if not config.causal:  # a language model must never see the token it predicts
            config = config.replace(causal=True)
        kwargs.setdefault("name", "convbert_lm")
        super().__init__(**kwargs)
        self.config = config
        self.conv_implementation = conv_implementation
        self.convbert = ConvBertModel(config, conv_implementation=conv_implementation)
        self.lm_head = MaskedLMHead(self.convbert.embeddings, config.hidden_act,
                                    config.layer_norm_eps, config.initializer_range,
                                    name="lm_predictions")
        self.lm_head.build((None, None, config.hidden_size))
        self.built = True  # every weight exists now, so checkpoints load before the first call

    def call(self, inputs, training=None):
        """inputs: {"input_ids" [B, T], optional "input_mask"} or the ids -> logits [B, T, V]."""
        if not isinstance(inputs, dict):
            inputs = {"input_ids": inputs}
        return self.lm_head(self.convbert(inputs, training=training))

    def weight_map(self, scope="electra"):
        names = self.convbert.weight_map(scope)
        names.update({f"lm_predictions/{k}": v for k, v in self.lm_head.weight_map().items()})
        return names

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict(),
                "conv_implementation": self.conv_implementation}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ConvBertConfig.from_dict(config.pop("config")), **config)


def count_parameters(config):
    """Trainable parameters of the LM of `config` (built on the current backend)."""
    import numpy as np
    model = ConvBertLM(config)
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))
