"""The embedded default corpus (pydoc_data) and its vocab: no download, deterministic, usable."""
import os

import pytest

from data import default_corpus
from data.pretraining_input import pretraining_dataset
from data.tokenization import Tokenizer
from tests.data.helpers import assert_well_formed, read_examples


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("CONVBERT_CACHE_DIR")
    os.environ["CONVBERT_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("CONVBERT_CACHE_DIR")
    else:
        os.environ["CONVBERT_CACHE_DIR"] = previous


def test_corpus_files_are_documents_of_sentences(cache):
    corpus = default_corpus.default_corpus_dir()
    assert corpus.startswith(str(cache))
    files = sorted(os.listdir(corpus))
    assert len(files) > 50
    lines = open(os.path.join(corpus, files[0]), encoding="utf-8").read().splitlines()
    assert len(lines) > 1 and all(line.strip() for line in lines)
    assert default_corpus.default_corpus_dir() == corpus  # cached, same key


def test_default_vocab_is_cached_with_bert_special_ids(cache):
    # Determinism: the corpus text is fixed (checked here) and the learner is deterministic
    # (tests/data/test_vocab.py learns twice and compares).
    assert default_corpus.default_documents() == default_corpus.default_documents()
    path = default_corpus.default_vocab_file()
    assert path.startswith(str(cache))
    modified = os.path.getmtime(path)
    assert default_corpus.default_vocab_file() == path and os.path.getmtime(path) == modified
    tokenizer = Tokenizer(path)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 100, 101, 102, 103)
    assert tokenizer.vocab_size > 2000
    ids = tokenizer.tokenize(["The attribute access of a class instance."])[0]
    assert tokenizer.unk_id not in ids


def test_build_default_pretraining_data_feeds_the_pipeline(cache, tmp_path):
    paths = default_corpus.build_default_pretraining_data(tmp_path, max_seq_length=64)
    assert len(paths) == 4 and all(os.path.exists(p) for p in paths)
    tokenizer = Tokenizer(default_corpus.default_vocab_file())
    examples = read_examples(tmp_path)
    assert len(examples["input_ids"]) > 500
    assert_well_formed(examples, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                       tokenizer.vocab_size, 64)
    batch = next(iter(pretraining_dataset(paths, 16, 64, is_training=True, seed=0)))
    assert batch["input_ids"].shape == (16, 64)
