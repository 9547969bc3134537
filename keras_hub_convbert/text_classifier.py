"""`ConvBertTextClassifierPreprocessor` and `ConvBertTextClassifier`, as KerasHub's BERT ones.

The classifier is the official ConvBERT / ELECTRA GLUE head (the toolkit's
`finetune.classification_head.ClassificationHead`): dropout on the [CLS] vector, then one dense
layer to the logits; no pooler. Raw strings go in through the preprocessor:

    classifier = keras_hub.models.TextClassifier.from_preset(preset_dir, num_classes=2)
    classifier.fit(x=["a fine film", "a dull film"], y=[1, 0], batch_size=2)
"""
import keras
from keras_hub.models import TextClassifier, TextClassifierPreprocessor

from keras_hub_convbert.backbone import SERIALIZATION_PACKAGE, ConvBertBackbone
from keras_hub_convbert.tokenizer import ConvBertTokenizer

# ConvBERT pre-trains at 128 tokens and its convolution sees padding: pad to that length.
DEFAULT_SEQUENCE_LENGTH = 128


def check_vocabulary_fits(backbone, preprocessor, where="the tokenizer"):
    """A tokenizer whose ids would index past the backbone's word embeddings is refused. A
    preset's task (task.json) is built before its vocabulary is loaded: the preprocessor keeps
    the backbone's size and checks it again once it has loaded it (`load_vocabulary_checked`)."""
    if preprocessor is None:
        return
    preprocessor.backbone_vocabulary_size = int(backbone.vocabulary_size)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    if tokenizer is None or (getattr(tokenizer, "vocabulary", None) is None
                             and getattr(tokenizer, "proto", None) is None):
        return
    size = int(tokenizer.vocabulary_size())
    if size > backbone.vocabulary_size:
        raise ValueError(f"{where}: {size} tokens but the backbone has only "
                         f"{backbone.vocabulary_size} word embeddings")


def load_vocabulary_checked(preprocessor, preset, load):
    """`load(preset)` (the preprocessor's own asset loading), then the vocabulary it loaded
    against the backbone's word embeddings, naming the preset's vocabulary file."""
    load(preset)
    limit = getattr(preprocessor, "backbone_vocabulary_size", None)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    if limit is None or tokenizer is None:
        return
    size = int(tokenizer.vocabulary_size())
    if size > limit:
        raise ValueError(f"{preset}/assets/tokenizer: {size} tokens but the backbone has only "
                         f"{limit} word embeddings (another model's vocabulary?)")


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertTextClassifierPreprocessor(TextClassifierPreprocessor):
    """Tokenize, then pack `[CLS] a [SEP] (b [SEP])` padded with [PAD] to `sequence_length`;
    returns `token_ids`, `padding_mask`, `segment_ids`."""

    backbone_cls = ConvBertBackbone
    tokenizer_cls = ConvBertTokenizer

    def __init__(self, tokenizer, sequence_length=DEFAULT_SEQUENCE_LENGTH, truncate="round_robin",
                 **kwargs):
        super().__init__(tokenizer, sequence_length=sequence_length, truncate=truncate, **kwargs)

    def load_preset_assets(self, preset):
        load_vocabulary_checked(self, preset, super().load_preset_assets)


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertTextClassifier(TextClassifier):
    """A ConvBERT backbone with the official classification head (dropout -> dense on [CLS])."""

    backbone_cls = ConvBertBackbone
    preprocessor_cls = ConvBertTextClassifierPreprocessor

    def __init__(self, backbone, num_classes, preprocessor=None, activation=None, dropout=0.1,
                 **kwargs):
        check_vocabulary_fits(backbone, preprocessor)
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout = keras.layers.Dropout(dropout, dtype=backbone.dtype_policy,
                                                   name="classifier_dropout")
        self.output_dense = keras.layers.Dense(
            num_classes, activation=activation, dtype=backbone.dtype_policy, name="logits",
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=backbone.initializer_range))
        inputs = backbone.input
        pooled = backbone(inputs)["pooled_output"]
        outputs = self.output_dense(self.output_dropout(pooled))
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.num_classes = num_classes
        self.activation = keras.activations.get(activation)
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes,
                       "activation": keras.activations.serialize(self.activation),
                       "dropout": self.dropout})
        return config
