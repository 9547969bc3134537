"""THE tokenizer of the toolkit: WordPiece (or SentencePiece) through tensorflow-text.

One implementation serves pre-training data, fine-tuning and serving:

* `Tokenizer` - BERT WordPiece with `tensorflow_text.FastBertTokenizer` (C++ end-to-end BERT
  pre-tokenization + linear-time WordPiece). Options follow ELECTRA: `do_lower_case` and
  `strip_accents` (None = same as do_lower_case, the BERT convention).
* `SentencePieceTokenizer` - the same interface over a SentencePiece model.

Batched Python calls (`tokenize`, `tokenize_with_offsets`) and an in-graph call (`tf_tokenize`,
usable inside tf.data and in a SavedModel) run the same ops, so ids agree everywhere.
Offsets are in characters of the original text (what SQuAD answer spans use), not bytes.
"""
import unicodedata

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from data.errors import VocabError
from data.vocab import load_vocab

# ELECTRA/BERT's WordPiece maps words longer than 200 characters to [UNK].
MAX_BYTES_PER_WORD = 200


def _char_offsets(text, byte_starts, byte_ends):
    """Converts UTF-8 byte offsets into `text` to character offsets."""
    if len(byte_starts) == 0:
        return [], []
    encoded = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    char_of_byte = np.cumsum((encoded & 0xC0) != 0x80) - 1  # continuation bytes are 10xxxxxx
    byte_starts, byte_ends = np.asarray(byte_starts), np.asarray(byte_ends)
    char_of_byte = np.append(char_of_byte, len(text))  # an offset may point at the very end
    starts = char_of_byte[byte_starts]
    # An empty span (e.g. a lone SentencePiece "▁") stays empty.
    ends = np.where(byte_ends > byte_starts, char_of_byte[np.maximum(byte_ends - 1, 0)] + 1, starts)
    return starts.tolist(), ends.tolist()


def _split_rows(flat_values, row_splits):
    flat = flat_values.tolist()
    splits = row_splits.tolist()
    return [flat[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]


class _TokenizerBase:
    """Shared Python-side plumbing; subclasses provide `_tf_ops(strings)` and the vocab."""

    do_lower_case: bool
    strip_accents: bool
    vocab: list

    def _init_special_ids(self, source):
        self._token_ids = {token: i for i, token in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        try:
            self.pad_id = self.token_to_id("[PAD]")
            self.unk_id = self.token_to_id("[UNK]")
            self.cls_id = self.token_to_id("[CLS]")
            self.sep_id = self.token_to_id("[SEP]")
            self.mask_id = self.token_to_id("[MASK]")
        except KeyError as e:
            raise VocabError(f"{source}: missing special token {e.args[0]}") from None

    # -- normalization that the tensorflow-text op does not do itself -------------------------
    def _graph_normalize(self, strings):
        """In-graph lower-casing / accent stripping for the modes the fused op lacks."""
        if self._pre_lower:
            strings = tf.strings.lower(strings, encoding="utf-8")
        if self._pre_strip_accents:
            strings = tf_text.normalize_utf8(strings, "NFD")
            strings = tf.strings.regex_replace(strings, r"\p{Mn}", "")
        return strings

    def _normalize_char(self, char):
        if self._pre_lower:
            char = char.lower()
        if self._pre_strip_accents:
            char = "".join(c for c in unicodedata.normalize("NFD", char)
                           if unicodedata.category(c) != "Mn")
        return char

    def _aligned_normalize(self, text):
        """Normalizes char by char, returning the new text and, per new byte, its source char."""
        pieces, sources = [], []
        for index, char in enumerate(text):
            piece = self._normalize_char(char)
            pieces.append(piece)
            sources.extend([index] * len(piece.encode("utf-8")))
        return "".join(pieces), np.asarray(sources + [len(text)], dtype=np.int64)

    # -- public interface ---------------------------------------------------------------------
    def token_to_id(self, token):
        try:
            return self._token_ids[token]
        except KeyError:
            raise KeyError(token) from None

    def convert_ids_to_tokens(self, ids):
        return [self.vocab[int(i)] for i in ids]

    def tf_tokenize(self, string_tensor):
        """In-graph tokenization: a string tensor [batch] (or scalar) -> int32 RaggedTensor."""
        strings = tf.convert_to_tensor(string_tensor, dtype=tf.string)
        if strings.shape.rank == 0:
            return self._tf_ops(self._graph_normalize(strings[tf.newaxis]))[0]
        return self._tf_ops(self._graph_normalize(strings))

    def tokenize_to_arrays(self, texts):
        """Fast path for bulk work: (flat int32 ids, int64 row_splits) for a list of strings."""
        if len(texts) == 0:
            return np.zeros([0], np.int32), np.zeros([1], np.int64)
        ragged = self.tf_tokenize(tf.constant(list(texts), dtype=tf.string))
        return ragged.flat_values.numpy(), ragged.row_splits.numpy()

    def tokenize(self, texts):
        """Token ids for each text of a list (one batched op call)."""
        if isinstance(texts, str):
            raise TypeError("tokenize() takes a list of strings; wrap a single text in a list")
        return _split_rows(*self.tokenize_to_arrays(texts))

    def tokenize_with_offsets(self, texts):
        """[(ids, char_starts, char_ends)] with offsets in characters of each original text."""
        if isinstance(texts, str):
            raise TypeError("tokenize_with_offsets() takes a list of strings")
        texts = list(texts)
        if not texts:
            return []
        if self._pre_lower or self._pre_strip_accents:
            aligned = [self._aligned_normalize(t) for t in texts]
            inputs = [normalized for normalized, _ in aligned]
        else:
            aligned, inputs = None, texts
        ids, starts, ends = self._tf_ops_with_offsets(tf.constant(inputs, dtype=tf.string))
        splits = ids.row_splits.numpy()
        flat_ids = ids.flat_values.numpy()
        flat_starts = starts.flat_values.numpy()
        flat_ends = ends.flat_values.numpy()
        results = []
        for i, text in enumerate(texts):
            lo, hi = splits[i], splits[i + 1]
            if aligned is None:
                char_starts, char_ends = _char_offsets(text, flat_starts[lo:hi], flat_ends[lo:hi])
            else:
                source_char = aligned[i][1]
                byte_starts, byte_ends = flat_starts[lo:hi], flat_ends[lo:hi]
                starts_array = source_char[byte_starts]
                char_starts = starts_array.tolist()
                char_ends = np.where(byte_ends > byte_starts,
                                     source_char[np.maximum(byte_ends - 1, 0)] + 1,
                                     starts_array).tolist()
            results.append((flat_ids[lo:hi].tolist(), char_starts, char_ends))
        return results


class Tokenizer(_TokenizerBase):
    """BERT WordPiece tokenizer (tensorflow-text FastBertTokenizer) over a vocab file."""

    def __init__(self, vocab_file, do_lower_case=True, strip_accents=None):
        self.vocab_file = str(vocab_file)
        self.vocab = load_vocab(self.vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self.strip_accents = self.do_lower_case if strip_accents is None else bool(strip_accents)
        # The fused op lower-cases AND strips accents (BERT uncased); other combinations
        # normalize in-graph first and let the op do cased BERT pre-tokenization.
        fused = self.do_lower_case and self.strip_accents
        self._pre_lower = self.do_lower_case and not fused
        self._pre_strip_accents = self.strip_accents and not fused
        self._init_special_ids(f"vocab file {self.vocab_file}")
        self._op = tf_text.FastBertTokenizer(
            vocab=self.vocab,
            suffix_indicator="##",
            max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32,
            unknown_token="[UNK]",
            lower_case_nfd_strip_accents=fused,
        )

    def _tf_ops(self, strings):
        return self._op.tokenize(strings)

    def _tf_ops_with_offsets(self, strings):
        return self._op.tokenize_with_offsets(strings)


class SentencePieceTokenizer(_TokenizerBase):
    """The same interface over a SentencePiece model (tensorflow-text SentencepieceTokenizer).

    The model must define [CLS] [SEP] [MASK] (e.g. as user-defined symbols, as
    `data.vocab.learn_sentencepiece_model` does) and a pad piece.
    """

    def __init__(self, sp_model, do_lower_case=True, strip_accents=None):
        from data.vocab import load_sentencepiece
        self.sp_model = str(sp_model)
        processor, model_bytes, self._token_ids = load_sentencepiece(self.sp_model)
        self.do_lower_case = bool(do_lower_case)
        self.strip_accents = False if strip_accents is None else bool(strip_accents)
        self._pre_lower = self.do_lower_case
        self._pre_strip_accents = self.strip_accents
        self.vocab = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]
        self.vocab_size = len(self.vocab)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self._token_ids[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))
        self._model_bytes = model_bytes
        self._op = tf_text.SentencepieceTokenizer(model=model_bytes, out_type=tf.int32)

    def _call(self, method, strings):
        try:
            return getattr(self._op, method)(strings)
        except tf.errors.NotFoundError:
            # The op's model resource belongs to its cached eager kernel, and tf.random.set_seed
            # (keras.utils.set_random_seed: every fine-tuning trial) clears that cache, deleting
            # the resource. Build the op again from the model bytes.
            if not tf.executing_eagerly():
                raise
            self._op = tf_text.SentencepieceTokenizer(model=self._model_bytes, out_type=tf.int32)
            return getattr(self._op, method)(strings)

    def _tf_ops(self, strings):
        return self._call("tokenize", strings)

    def _tf_ops_with_offsets(self, strings):
        return self._call("tokenize_with_offsets", strings)


def load_tokenizer(vocab_file=None, sp_model=None, do_lower_case=True, strip_accents=None):
    """A WordPiece `Tokenizer` for `vocab_file`, or a `SentencePieceTokenizer` for `sp_model`."""
    if (vocab_file is None) == (sp_model is None):
        raise ValueError("give exactly one of vocab_file and sp_model")
    if sp_model is not None:
        return SentencePieceTokenizer(sp_model, do_lower_case, strip_accents)
    return Tokenizer(vocab_file, do_lower_case, strip_accents)
