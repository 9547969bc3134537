"""`ConvBertMaskedLMPreprocessor` and `ConvBertMaskedLM`, as KerasHub's BERT ones.

The head is the toolkit's generator head (`model.heads.MaskedLMHead`, official
`generator_predictions`, Hugging Face `ConvBertForMaskedLM`'s `generator_predictions` +
`generator_lm_head`): dense(E) -> GELU -> LayerNorm, logits against the backbone's word
embeddings (tied) plus an output bias, at `mask_positions`.
"""
import keras
from keras import ops
from keras_hub.models import MaskedLM, MaskedLMPreprocessor

from keras_hub_convbert.backbone import SERIALIZATION_PACKAGE, ConvBertBackbone, dtype_policy_scope
from keras_hub_convbert.text_classifier import (DEFAULT_SEQUENCE_LENGTH, check_vocabulary_fits,
                                                load_vocabulary_checked)
from keras_hub_convbert.tokenizer import ConvBertTokenizer
from model.heads import MaskedLMHead


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertMaskedLMPreprocessor(MaskedLMPreprocessor):
    """Tokenize, pack, then mask (15% of the tokens selected: 80% [MASK], 10% random, 10% kept);
    returns the inputs with `mask_positions`, the ids to predict and their weights."""

    backbone_cls = ConvBertBackbone
    tokenizer_cls = ConvBertTokenizer

    def __init__(self, tokenizer, sequence_length=DEFAULT_SEQUENCE_LENGTH, **kwargs):
        super().__init__(tokenizer, sequence_length=sequence_length, **kwargs)

    def load_preset_assets(self, preset):
        load_vocabulary_checked(self, preset, super().load_preset_assets)


class _GatherPositions(keras.layers.Layer):
    """hidden [B, T, H], positions [B, P] -> [B, P, H]."""

    def call(self, hidden, positions):
        positions = ops.cast(positions, "int32")
        return ops.take_along_axis(hidden, ops.expand_dims(positions, -1), axis=1)


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertMaskedLM(MaskedLM):
    """A ConvBERT backbone with the generator's tied masked-LM head: logits [B, P, V]."""

    backbone_cls = ConvBertBackbone
    preprocessor_cls = ConvBertMaskedLMPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        check_vocabulary_fits(backbone, preprocessor)
        self.backbone = backbone
        self.preprocessor = preprocessor
        cfg = backbone.convbert_config
        with dtype_policy_scope(backbone.dtype_policy):
            self.gather = _GatherPositions(name="gather_mask_positions")
            self.mlm_head = MaskedLMHead(backbone.encoder.embeddings, cfg.hidden_act,
                                         cfg.layer_norm_eps, cfg.initializer_range,
                                         name="generator_predictions")
            self.mlm_head.build((None, None, cfg.hidden_size))
        inputs = {**backbone.input,
                  "mask_positions": keras.Input(shape=(None,), dtype="int32",
                                                name="mask_positions")}
        sequence_output = backbone(backbone.input)["sequence_output"]
        outputs = self.mlm_head(self.gather(sequence_output, inputs["mask_positions"]))
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

    def weight_map(self):
        """Official TF1 names of the encoder and the head (`generator_predictions/...`)."""
        names = self.backbone.weight_map()
        names.update({f"generator_predictions/{k}": v
                      for k, v in self.mlm_head.weight_map().items()})
        return names
