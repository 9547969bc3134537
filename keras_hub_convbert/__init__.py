"""ConvBERT in KerasHub: `import keras_hub_convbert` registers the classes, after which KerasHub's
generic loaders find them in a preset directory:

    import keras_hub
    import keras_hub_convbert  # noqa: F401  (registers ConvBERT with Keras / KerasHub)

    backbone = keras_hub.models.Backbone.from_preset("presets/convbert_small")
    classifier = keras_hub.models.TextClassifier.from_preset("presets/convbert_small",
                                                             num_classes=2)
    classifier.fit(x=["a fine film", "a dull film"], y=[1, 0], batch_size=2)

Presets are written by `python scripts/convert_checkpoint.py --format=keras_hub` (presets.py).
KerasHub has no plugin hook: its `from_preset` looks a preset's class up among the classes
registered with Keras (`keras.saving.register_keras_serializable`, package "convbert_keras_hub")
and picks the task subclass whose `backbone_cls` is the preset's backbone, so importing this
package is the registration. Needs the `keras_hub` extra (pip install -e '.[keras_hub]'); nothing
else in the toolkit imports it. See docs/KERAS_HUB.md.
"""
from keras_hub_convbert.backbone import ConvBertBackbone
from keras_hub_convbert.masked_lm import ConvBertMaskedLM, ConvBertMaskedLMPreprocessor
from keras_hub_convbert.text_classifier import (ConvBertTextClassifier,
                                                ConvBertTextClassifierPreprocessor)
from keras_hub_convbert.tokenizer import ConvBertSentencePieceTokenizer, ConvBertTokenizer

__all__ = ["ConvBertBackbone", "ConvBertTokenizer", "ConvBertSentencePieceTokenizer",
           "ConvBertTextClassifierPreprocessor", "ConvBertTextClassifier",
           "ConvBertMaskedLMPreprocessor", "ConvBertMaskedLM"]
