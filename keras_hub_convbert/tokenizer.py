"""ConvBERT's tokenizers for KerasHub: WordPiece (the released models' BERT vocab) and
SentencePiece (a toolkit pre-training run with --sp_model).

`ConvBertTokenizer` tokenizes with tensorflow-text's `FastBertTokenizer`, set up as the toolkit's
`data.tokenization.Tokenizer` (BERT pre-tokenization, words of more than 200 bytes -> [UNK],
`lowercase` with accents stripped as BERT uncased does), so its ids are the ids the toolkit's
fine-tuning features hold. The vocabulary is a preset asset (`assets/tokenizer/vocabulary.txt`).

`ConvBertSentencePieceTokenizer` is KerasHub's `SentencePieceTokenizer` with the BERT special
tokens ([CLS] [SEP] [PAD] [MASK], as `data.vocab.learn_sentencepiece_model` defines them) and the
toolkit's lower-casing before the model (`lowercase`), asset `assets/tokenizer/vocabulary.spm`.
"""
import keras
import tensorflow as tf
import tensorflow_text as tf_text
from keras_hub.src.utils.tensor_utils import preprocessing_function
from keras_hub.tokenizers import SentencePieceTokenizer, WordPieceTokenizer

from keras_hub_convbert.backbone import SERIALIZATION_PACKAGE, ConvBertBackbone

MAX_BYTES_PER_WORD = 200   # ELECTRA/BERT: longer words are [UNK] (data/tokenization.py)


def _add_bert_special_tokens(tokenizer, pad="[PAD]"):
    tokenizer._add_special_token("[CLS]", "cls_token")
    tokenizer._add_special_token("[SEP]", "sep_token")
    tokenizer._add_special_token(pad, "pad_token")
    tokenizer._add_special_token("[MASK]", "mask_token")
    tokenizer._add_special_token("[CLS]", "start_token")
    tokenizer._add_special_token("[SEP]", "end_token")


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertTokenizer(WordPieceTokenizer):
    """WordPiece over the model's vocabulary (a list of tokens or a vocab file), lower-casing
    and stripping accents when `lowercase` (BERT uncased, the released ConvBERTs)."""

    backbone_cls = ConvBertBackbone

    def __init__(self, vocabulary=None, lowercase=True, strip_accents=None, **kwargs):
        _add_bert_special_tokens(self)
        strip_accents = lowercase if strip_accents is None else strip_accents
        super().__init__(vocabulary=vocabulary, lowercase=lowercase,
                         strip_accents=strip_accents, **kwargs)

    def set_vocabulary(self, vocabulary):
        super().set_vocabulary(vocabulary)
        if self.vocabulary is None:
            self._fast_bert = None
            return
        # As data.tokenization.Tokenizer: the fused op lower-cases AND strips accents; other
        # combinations normalise in the graph first.
        fused = bool(self.lowercase and self.strip_accents)
        self._fast_bert = tf_text.FastBertTokenizer(
            vocab=self.vocabulary, suffix_indicator=self.suffix_indicator,
            max_bytes_per_word=MAX_BYTES_PER_WORD, token_out_type=self.compute_dtype,
            unknown_token=self.oov_token, lower_case_nfd_strip_accents=fused)

    @preprocessing_function
    def tokenize(self, inputs):
        self._check_vocabulary()
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = inputs[tf.newaxis]
        fused = bool(self.lowercase and self.strip_accents)
        if self.lowercase and not fused:
            inputs = tf.strings.lower(inputs, encoding="utf-8")
        if self.strip_accents and not fused:
            inputs = tf_text.normalize_utf8(inputs, "NFD")
            inputs = tf.strings.regex_replace(inputs, r"\p{Mn}", "")
        tokens = self._fast_bert.tokenize(inputs)
        if self.sequence_length:
            output_shape = tokens.shape.as_list()
            output_shape[-1] = self.sequence_length
            tokens = tokens.to_tensor(shape=output_shape)
        if unbatched:
            tokens = tokens[0]
        return tokens


@keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)
class ConvBertSentencePieceTokenizer(SentencePieceTokenizer):
    """SentencePiece with the BERT special tokens; `lowercase` lower-cases before the model (the
    toolkit learns its SentencePiece models on lower-cased text)."""

    backbone_cls = ConvBertBackbone

    def __init__(self, proto=None, lowercase=True, **kwargs):
        _add_bert_special_tokens(self)
        self.lowercase = lowercase
        super().__init__(proto=proto, **kwargs)

    def tokenize(self, inputs):
        if self.lowercase:
            if isinstance(inputs, str):
                inputs = inputs.lower()
            elif isinstance(inputs, (list, tuple)) and all(isinstance(s, str) for s in inputs):
                inputs = [s.lower() for s in inputs]
            else:
                inputs = tf.strings.lower(tf.convert_to_tensor(inputs), encoding="utf-8")
        return super().tokenize(inputs)

    def get_config(self):
        return {**super().get_config(), "lowercase": self.lowercase}
