"""ConvBERT model: config, layers, encoder, heads and checkpoint conversion (Keras 3, keras.ops)."""
from model.config import ConvBertConfig, ConfigError, MODEL_SIZES, CONV_TYPES
from model.encoder import ConvBertModel
from model.heads import DiscriminatorHead, MaskedLMHead
from model.masked_lm import ConvBertMaskedLM

__all__ = ["ConvBertConfig", "ConfigError", "MODEL_SIZES", "CONV_TYPES", "ConvBertModel",
           "DiscriminatorHead", "MaskedLMHead", "ConvBertMaskedLM"]
