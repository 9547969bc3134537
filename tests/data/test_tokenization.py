"""The WordPiece tokenizer: BERT parity, offsets in characters, in-graph use, options."""
import pytest
import tensorflow as tf

from data.tokenization import Tokenizer, load_tokenizer
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(shared_path("data", "vocab", "bert-uncased-vocab.txt"))


def _wikitext_lines(limit):
    path = shared_path("data", "corpus", "wikitext-2-raw", "wiki.valid.raw")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").split("\n")]
    return [line for line in lines if line][:limit]


def test_special_ids(tokenizer):
    assert (tokenizer.vocab_size, tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id,
            tokenizer.sep_id, tokenizer.mask_id) == (30522, 0, 100, 101, 102, 103)
    assert tokenizer.token_to_id("hello") == 7592
    with pytest.raises(KeyError):
        tokenizer.token_to_id("not-a-token-at-all")


def test_matches_reference_bert_tokenizer_on_wikitext(tokenizer):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertTokenizer(
        str(shared_path("data", "vocab", "bert-uncased-vocab.txt")), do_lower_case=True)
    lines = _wikitext_lines(400)
    ours = tokenizer.tokenize(lines)
    theirs = [reference.convert_tokens_to_ids(reference.tokenize(line)) for line in lines]
    same = sum(a == b for a, b in zip(ours, theirs))
    assert same >= 0.99 * len(lines), f"only {same}/{len(lines)} lines tokenize identically"


def test_lowercase_accents_punctuation_cjk(tokenizer):
    ids = tokenizer.tokenize(["Héllo, WÖRLD! 日本"])[0]
    assert tokenizer.convert_ids_to_tokens(ids) == ["hello", ",", "world", "!", "日", "本"]


def test_offsets_are_characters_of_the_original_text(tokenizer):
    text = "Zoë’s café — naïve “quotes” 😀 unaffable"
    [(ids, starts, ends)] = tokenizer.tokenize_with_offsets([text])
    assert ids == tokenizer.tokenize([text])[0]
    pieces = [text[s:e] for s, e in zip(starts, ends)]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[:2] == ["Zoë", "’"]
    assert "café" in pieces and "naïve" in pieces
    # Word pieces of "unaffable" are contiguous character spans of it.
    assert "".join(pieces[-len([t for t in tokens if t.startswith("##")]) - 1:]) == "unaffable"


def test_cased_offsets_when_only_lowercasing(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "héllo", "world",
                                "hello", ","]) + "\n")
    keep_accents = Tokenizer(vocab, do_lower_case=True, strip_accents=False)
    text = "HÉLLO, World"
    [(ids, starts, ends)] = keep_accents.tokenize_with_offsets([text])
    assert keep_accents.convert_ids_to_tokens(ids) == ["héllo", ",", "world"]
    assert [text[s:e] for s, e in zip(starts, ends)] == ["HÉLLO", ",", "World"]
    assert keep_accents.tokenize([text])[0] == ids
    assert Tokenizer(vocab).convert_ids_to_tokens(Tokenizer(vocab).tokenize([text])[0]) == \
        ["hello", ",", "world"]


def test_tf_tokenize_inside_tf_data_matches_python(tokenizer):
    lines = _wikitext_lines(50)
    dataset = tf.data.Dataset.from_tensor_slices(lines).map(tokenizer.tf_tokenize)
    in_graph = [row.numpy().tolist() for row in dataset]
    assert in_graph == tokenizer.tokenize(lines)
    serving = tf.function(tokenizer.tf_tokenize,
                          input_signature=[tf.TensorSpec([None], tf.string)])
    assert serving(tf.constant(lines[:3])).to_list() == tokenizer.tokenize(lines[:3])


def test_load_tokenizer_needs_exactly_one_source():
    with pytest.raises(ValueError):
        load_tokenizer()


def test_sentencepiece_survives_a_new_random_seed(tmp_path):
    """tf.random.set_seed (every fine-tuning trial) clears TF's kernel cache, which deleted the
    SentencePiece op's model resource: tokenizing after it failed with NotFoundError."""
    import tensorflow as tf
    from data.tokenization import SentencePieceTokenizer
    from data.vocab import learn_sentencepiece_model
    texts = ["the quick brown fox jumps over the lazy dog", "a fox is quick and brown"] * 50
    tokenizer = SentencePieceTokenizer(learn_sentencepiece_model(texts, tmp_path / "sp", 40))
    before = tokenizer.tokenize_with_offsets(["the lazy fox"])
    tf.random.set_seed(1)
    assert tokenizer.tokenize_with_offsets(["the lazy fox"]) == before
    tf.random.set_seed(2)
    assert tokenizer.tokenize(["the lazy fox"]) == [before[0][0]]


def test_bulk_arrays_match_the_python_tokenizer(tokenizer):
    """tokenize_to_arrays (the builders' bulk path): flat ids and row splits equal to the ids of
    the offsets path, text by text; no texts gives no ids, one split and no rows."""
    texts = ["The cat sat.", "", "Café au lait, 42!"]
    flat, splits = tokenizer.tokenize_to_arrays(texts)
    rows = [list(flat[a:b]) for a, b in zip(splits[:-1], splits[1:])]
    assert rows == [list(ids) for ids, _, _ in tokenizer.tokenize_with_offsets(texts)]
    assert len(rows[0]) == 4 and rows[1] == []
    flat, splits = tokenizer.tokenize_to_arrays([])
    assert flat.shape == (0,) and list(splits) == [0] and tokenizer.tokenize([]) == []
