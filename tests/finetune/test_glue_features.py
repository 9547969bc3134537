"""Example -> feature packing: ELECTRA's `[CLS] a [SEP] b [SEP]`, longest-first truncation and
fixed padding; exact checks with a tiny fake tokenizer, then the toolkit tokenizer on real data."""
import numpy as np
import pytest

from finetune.features import (convert_examples_to_features, double_unordered, pack_example,
                               truncate_seq_pair)
from finetune.glue.readers import InputExample, read_examples
from tests.conftest import shared_path

CLS, SEP, PAD = 101, 102, 0


class FakeTokenizer:
    """Same interface as data.tokenization.Tokenizer: one id per whitespace word ("w7" -> 7)."""
    cls_id, sep_id, pad_id = CLS, SEP, PAD

    def tokenize(self, texts):
        assert not isinstance(texts, str)
        return [[int(w[1:]) for w in text.split()] for text in texts]


def words(*ids):
    return " ".join(f"w{i}" for i in ids)


def test_truncate_longest_first_tie_drops_from_b():
    a, b = [1, 2, 3, 4, 5], [6, 7]
    truncate_seq_pair(a, b, 5)
    assert (a, b) == ([1, 2, 3], [6, 7])
    a, b = [1, 2, 3], [4, 5, 6]
    truncate_seq_pair(a, b, 4)
    assert (a, b) == ([1, 2], [4, 5])      # tie: b loses first, then a
    a, b = [1, 2], [3, 4, 5, 6, 7, 8]
    truncate_seq_pair(a, b, 5)
    assert (a, b) == ([1, 2], [3, 4, 5])


def test_pack_pair_exact():
    ids, mask, seg = pack_example([11, 12], [21, 22, 23], 10, CLS, SEP, PAD)
    assert ids == [CLS, 11, 12, SEP, 21, 22, 23, SEP, PAD, PAD]
    assert mask == [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    assert seg == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]


def test_pack_single_and_truncation_exact():
    ids, mask, seg = pack_example([11, 12, 13, 14, 15, 16], None, 5, CLS, SEP, PAD)
    assert (ids, mask, seg) == ([CLS, 11, 12, 13, SEP], [1] * 5, [0] * 5)   # max_seq - 2 kept
    ids, mask, seg = pack_example(list(range(1, 9)), [31, 32, 33], 8, CLS, SEP, PAD)
    assert ids == [CLS, 1, 2, 3, SEP, 31, 32, SEP]     # pair: max_seq - 3 = 5 tokens kept
    assert seg == [0, 0, 0, 0, 0, 1, 1, 1]
    # An empty text_b packs as a single sentence, as in ELECTRA.
    assert pack_example([11], [], 4, CLS, SEP, PAD)[0] == [CLS, 11, SEP, PAD]


def test_convert_examples_to_features_arrays():
    examples = [InputExample("0", words(1, 2, 3), words(4, 5), "entailment", "rte"),
                InputExample("1", words(*range(1, 20)), words(7), "not_entailment", "rte"),
                InputExample("2", words(9), words(8), None, "rte")]          # a test example
    features = convert_examples_to_features(examples, "rte", FakeTokenizer(), 8)
    assert set(features) == {"input_ids", "input_mask", "segment_ids", "label_ids"}
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert features[name].dtype == np.int32 and features[name].shape == (3, 8)
    assert features["input_ids"].tolist() == [
        [CLS, 1, 2, 3, SEP, 4, 5, SEP],
        [CLS, 1, 2, 3, 4, SEP, 7, SEP],
        [CLS, 9, SEP, 8, SEP, PAD, PAD, PAD]]
    assert features["input_mask"][2].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert features["segment_ids"][0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert features["label_ids"].dtype == np.int32
    assert features["label_ids"].tolist() == [0, 1, 0]


def test_regression_and_single_sentence_features():
    sts = [InputExample("0", words(1), words(2), 3.8, "sts"), InputExample("1", words(3), words(4), None, "sts")]
    features = convert_examples_to_features(sts, "sts-b", FakeTokenizer(), 6)
    assert features["label_ids"].dtype == np.float32
    assert features["label_ids"].tolist() == pytest.approx([3.8, 0.0])
    cola = [InputExample("0", words(5, 6), None, "0", "cola")]
    features = convert_examples_to_features(cola, "cola", FakeTokenizer(), 6)
    assert features["input_ids"].tolist() == [[CLS, 5, 6, SEP, PAD, PAD]]
    assert features["label_ids"].tolist() == [0]


def test_double_unordered_swaps_pairs_only():
    examples = [InputExample("0", "a", "b", "1"), InputExample("1", "c", None, "0")]
    doubled = double_unordered(examples)
    assert [(e.guid, e.text_a, e.text_b) for e in doubled] == [
        ("0", "a", "b"), ("1", "c", None), ("0-swapped", "b", "a")]


# --- the toolkit tokenizer (data/tokenization.py) on real GLUE text ------------------------

@pytest.fixture(scope="module")
def toolkit_tokenizer():
    tokenization = pytest.importorskip("data.tokenization")
    return tokenization.Tokenizer(shared_path("data", "vocab", "bert-uncased-vocab.txt"),
                                  do_lower_case=True)


def test_real_mrpc_dev_features(toolkit_tokenizer):
    tok = toolkit_tokenizer
    examples = read_examples(shared_path("data", "glue"), "mrpc", "dev")
    max_len = 48      # short enough that many MRPC pairs need truncation
    features = convert_examples_to_features(examples, "mrpc", tok, max_len)
    assert features["input_ids"].shape == (408, max_len)
    ids_a = tok.tokenize([e.text_a for e in examples])
    ids_b = tok.tokenize([e.text_b for e in examples])
    n_truncated = 0
    for i, (a, b) in enumerate(zip(ids_a, ids_b)):
        row = features["input_ids"][i].tolist()
        length = int(features["input_mask"][i].sum())
        assert length == min(len(a) + len(b) + 3, max_len)
        sep1 = row.index(tok.sep_id)
        kept_a, kept_b = row[1:sep1], row[sep1 + 1:length - 1]
        assert row[0] == tok.cls_id and row[length - 1] == tok.sep_id
        assert row[length:] == [tok.pad_id] * (max_len - length)
        assert kept_a == a[:len(kept_a)] and kept_b == b[:len(kept_b)]
        assert features["segment_ids"][i].tolist() == (
            [0] * (sep1 + 1) + [1] * (len(kept_b) + 1) + [0] * (max_len - length))
        if len(kept_a) + len(kept_b) < len(a) + len(b):
            n_truncated += 1
            # Longest-first: the shorter side is kept whole, or both end up equal (a +1 on ties).
            if len(kept_a) < len(a) and len(kept_b) < len(b):
                assert len(kept_a) - len(kept_b) in (0, 1)
            elif len(kept_a) < len(a):
                assert kept_b == b and len(kept_a) >= len(b)
            else:
                assert kept_a == a and len(kept_b) >= len(a) - 1   # ties pop b
    assert n_truncated > 50
    labels = [e.label for e in examples]
    assert features["label_ids"].tolist() == [int(label) for label in labels]


def test_matches_hugging_face_bert_encoding(toolkit_tokenizer):
    """Un-truncated pairs encode exactly like HF's BertTokenizerFast (ConvBERT checkpoints'
    tokenizer) with padding="max_length": same ids, token types and attention mask."""
    transformers = pytest.importorskip("transformers")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    hf = transformers.BertTokenizerFast(vocab=str(vocab), do_lower_case=True)   # transformers 5 API
    examples = read_examples(shared_path("data", "glue"), "rte", "dev")[:60]
    features = convert_examples_to_features(examples, "rte", toolkit_tokenizer, 256)
    assert features["input_mask"].sum(axis=1).max() < 256     # nothing truncated
    encoded = hf([e.text_a for e in examples], [e.text_b for e in examples],
                 padding="max_length", max_length=256, truncation=False)
    assert features["input_ids"].tolist() == encoded["input_ids"]
    assert features["segment_ids"].tolist() == encoded["token_type_ids"]
    assert features["input_mask"].tolist() == encoded["attention_mask"]
