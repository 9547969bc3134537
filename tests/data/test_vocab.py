"""Vocab files: loading, validation errors that name the file, learning WordPiece/SentencePiece."""
import pytest

from data.errors import VocabError
from data.tokenization import SentencePieceTokenizer, Tokenizer, load_tokenizer
from data.vocab import bert_reserved_tokens, learn_sentencepiece_model, learn_wordpiece_vocab
from data.vocab import load_vocab, write_vocab

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A quick brown dog jumps over the lazy fox!",
    "Foxes and dogs are quick; dogs are lazy, foxes are not.",
    "Jumping foxes, jumping dogs, lazy afternoons.",
] * 20


def test_bert_vocab_loads_with_bert_special_ids(bert_vocab_file):
    vocab = load_vocab(bert_vocab_file)
    assert len(vocab) == 30522
    assert [vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == \
        [0, 100, 101, 102, 103]


def test_missing_vocab_names_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(VocabError, match=f"{path}: not found"):
        load_vocab(path)


def test_vocab_without_special_tokens_names_file_and_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\nhello\nworld\n")
    with pytest.raises(VocabError) as error:
        load_vocab(path)
    message = str(error.value)
    assert str(path) in message and "[CLS] [SEP] [MASK]" in message and "\n" not in message


def test_binary_vocab_rejected(tmp_path):
    path = tmp_path / "vocab.bin"
    path.write_bytes(b"[PAD]\n\x00\x01\x02")
    with pytest.raises(VocabError, match="binary"):
        load_vocab(path)


def test_crlf_vocab_is_accepted(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join(bert_reserved_tokens(2) + ["hello"]).encode() + b"\r\n")
    assert load_vocab(path)[-1] == "hello"


def test_learned_wordpiece_vocab_has_bert_layout_and_is_deterministic(tmp_path):
    first = learn_wordpiece_vocab(CORPUS, vocab_size=200, num_unused=5, min_count=1)
    second = learn_wordpiece_vocab(CORPUS, vocab_size=200, num_unused=5, min_count=1)
    assert first == second
    assert first[:10] == bert_reserved_tokens(5)
    assert "fox" in first and "quick" in first
    tokenizer = Tokenizer(write_vocab(first, tmp_path / "learned.txt"))
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id) == (0, 6, 7)
    ids = tokenizer.tokenize(["The lazy fox."])[0]
    assert tokenizer.convert_ids_to_tokens(ids) == ["the", "lazy", "fox", "."]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_model_and_tokenizer_interface(tmp_path, model_type):
    model = learn_sentencepiece_model(CORPUS, tmp_path / f"sp_{model_type}", vocab_size=60,
                                      model_type=model_type)
    tokenizer = load_tokenizer(sp_model=model)
    assert isinstance(tokenizer, SentencePieceTokenizer)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)
    text = "The Lazy fox jumps."
    [(ids, starts, ends)] = tokenizer.tokenize_with_offsets([text])
    assert ids == tokenizer.tokenize([text])[0]
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    # Offsets cover the words of the original (cased) text.
    assert "".join(text[s:e] for s, e in zip(starts, ends)).replace(" ", "") == \
        text.replace(" ", "")


def test_bad_sentencepiece_model_names_file(tmp_path):
    path = tmp_path / "bad.model"
    path.write_bytes(b"not a model")
    with pytest.raises(VocabError, match=f"{path}"):
        load_tokenizer(sp_model=path)


def test_build_vocab_both_types_and_bad_input(tmp_path):
    from data.errors import DataError
    from data.vocab import build_vocab
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(CORPUS), encoding="utf-8")
    (corpus / "b.txt").write_text("\n".join(reversed(CORPUS)), encoding="utf-8")
    messages = []
    path = build_vocab([str(corpus)], str(tmp_path / "out" / "vocab.txt"), "wordpiece", 200,
                       min_count=1, log=messages.append)
    tokens = load_vocab(path)
    assert tokens[:1] == ["[PAD]"] and tokens[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert messages[0].startswith("read ") and "2/2 files" in messages[-3]
    assert messages[-1].startswith(f"wrote {path}: {len(tokens)} tokens")
    model = build_vocab([str(corpus)], str(tmp_path / "sp.model"), "sentencepiece", 60,
                        log=messages.append)
    size = load_tokenizer(sp_model=model).vocab_size
    assert 30 < size <= 60 and messages[-1].startswith(f"wrote {model}: {size} tokens")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out", "sp.model", "sp.vocab"]
    with pytest.raises(DataError, match="must end in .model"):
        build_vocab([str(corpus)], str(tmp_path / "sp2"), "sentencepiece", 60)
    with pytest.raises(DataError, match="unknown vocab type 'bpe'"):
        build_vocab([str(corpus)], str(tmp_path / "v.txt"), "bpe", 60)
    with pytest.raises(DataError, match="not found"):
        build_vocab([str(tmp_path / "missing")], str(tmp_path / "v.txt"))
    assert not (tmp_path / "v.txt").exists() and not (tmp_path / "sp2.model").exists()
