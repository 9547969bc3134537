"""`ConvBertMaskedLM`: encoder + the generator's MLM head (Hugging Face `ConvBertForMaskedLM`)."""
import keras
from keras import ops

from model.checkpoints import PretrainedIO
from model.config import ConvBertConfig
from model.encoder import ConvBertModel
from model.heads import MaskedLMHead


@keras.saving.register_keras_serializable(package="convbert")
class ConvBertMaskedLM(PretrainedIO, keras.Model):
    def __init__(self, config, conv_implementation="auto", **kwargs):
        if isinstance(config, dict):
            config = ConvBertConfig.from_dict(config)
        kwargs.setdefault("name", "convbert_masked_lm")
        super().__init__(**kwargs)
        self.config = config
        self.convbert = ConvBertModel(config, conv_implementation=conv_implementation)
        self.mlm_head = MaskedLMHead(self.convbert.embeddings, config.hidden_act,
                                     config.layer_norm_eps, config.initializer_range,
                                     name="generator_predictions")
        self.mlm_head.build((None, None, config.hidden_size))
        self.built = True  # every weight exists now, so checkpoints load before the first call

    def call(self, inputs, training=None, masked_positions=None):
        """Logits [B, T, V], or [B, P, V] at `masked_positions` [B, P] when given."""
        hidden = self.convbert(inputs, training=training)
        if masked_positions is not None:
            hidden = ops.take_along_axis(hidden, ops.expand_dims(masked_positions, -1), axis=1)
        return self.mlm_head(hidden)

    def weight_map(self, scope="electra"):
        names = self.convbert.weight_map(scope)
        names.update({f"generator_predictions/{k}": v for k, v in self.mlm_head.weight_map().items()})
        return names

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ConvBertConfig.from_dict(config.pop("config")), **config)
