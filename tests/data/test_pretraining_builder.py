"""The builder end to end: WikiText-2 against ELECTRA's counts, structure, determinism."""
import json
import os

import numpy as np
import pytest

from data import pretraining_builder
from data.pretraining_builder import SUMMARY_FILE, BuildConfig, build_pretraining_dataset
from data.tokenization import Tokenizer
from tests.conftest import shared_path
from tests.data.helpers import assert_well_formed, read_examples
from tests.data.test_example_packer import ScriptedRandom

# ELECTRA's fixed builder on wiki.{valid,test}.raw, BERT uncased vocab, max_seq_length 128.
ELECTRA_COUNTS = {
    False: dict(examples=2435, tokens=310013, two_segment_share=0.444),
    True: dict(examples=4046, tokens=337871, two_segment_share=0.156),
}


@pytest.fixture(scope="module")
def wikitext_dir(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("wikitext")
    for name in ("wiki.valid.raw", "wiki.test.raw"):
        os.symlink(shared_path("data", "corpus", "wikitext-2-raw", name), corpus / name)
    return corpus


def _build(corpus_dir, output_dir, vocab_file, **overrides):
    settings = dict(corpus_dir=str(corpus_dir), output_dir=str(output_dir),
                    vocab_file=str(vocab_file), num_shards=3, progress=False)
    settings.update(overrides)
    return build_pretraining_dataset(BuildConfig(**settings))


@pytest.mark.parametrize("blanks_separate_docs", [False, True])
def test_wikitext_matches_electra_counts_and_examples_are_well_formed(
        wikitext_dir, tmp_path, bert_vocab_file, blanks_separate_docs):
    summary = _build(wikitext_dir, tmp_path, bert_vocab_file,
                     blanks_separate_docs=blanks_separate_docs)
    expected = ELECTRA_COUNTS[blanks_separate_docs]
    assert summary["examples"] == pytest.approx(expected["examples"], rel=0.03)
    assert summary["tokens"] == pytest.approx(expected["tokens"], rel=0.03)
    assert summary["two_segment_share"] == pytest.approx(expected["two_segment_share"], abs=0.03)

    examples = read_examples(tmp_path)
    tokenizer = Tokenizer(bert_vocab_file)
    assert_well_formed(examples, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                       tokenizer.vocab_size, 128)
    # The summary (also on disk as JSON) describes what is in the shards.
    on_disk = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert on_disk["examples"] == len(examples["input_ids"]) == summary["examples"]
    assert on_disk["tokens"] == int(examples["input_mask"].sum())
    assert on_disk["two_segment_examples"] == int((examples["segment_ids"].sum(1) > 0).sum())
    assert on_disk["config"]["blanks_separate_docs"] is blanks_separate_docs
    assert sorted(os.listdir(tmp_path)) == sorted(
        [SUMMARY_FILE] + [f"pretrain_data.tfrecord-{i}-of-3" for i in range(3)])


def test_hand_made_corpus_end_to_end(tmp_path, bert_vocab_file, monkeypatch):
    """CRLF text, Unicode, a blank-line document boundary, a document over max_seq_length."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "doc.txt").write_bytes(
        "The cat sat.\r\nIt was Café time.\r\n\r\n".encode()
        + ("word " * 30).encode() + b"\r\n")
    monkeypatch.setattr(pretraining_builder, "_file_rng", lambda seed, path: ScriptedRandom())
    summary = _build(corpus, tmp_path / "out", bert_vocab_file, max_seq_length=16, num_shards=1)
    tokenizer = Tokenizer(bert_vocab_file)
    examples = read_examples(tmp_path / "out")
    decoded = [tokenizer.convert_ids_to_tokens(row[row > 0]) for row in examples["input_ids"]]
    # Doc 1: 4 + 5 tokens < 16; first-segment target (16-3)//2 = 6 -> sentence 2 goes to B.
    # Doc 2: 30 tokens -> first segment cut to 16-2 = 14.
    assert decoded == [
        ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "it", "was", "cafe", "time", ".", "[SEP]"],
        ["[CLS]"] + ["word"] * 14 + ["[SEP]"],
    ]
    np.testing.assert_array_equal(examples["segment_ids"][0], [0] * 6 + [1] * 6 + [0] * 4)
    np.testing.assert_array_equal(examples["input_mask"][0], [1] * 12 + [0] * 4)
    assert (summary["documents"], summary["examples"], summary["tokens"]) == (2, 2, 28)


def test_same_seed_gives_identical_shards_other_seed_differs(wikitext_dir, tmp_path,
                                                             bert_vocab_file):
    def shard_bytes(directory):
        return [(directory / f"pretrain_data.tfrecord-{i}-of-3").read_bytes() for i in range(3)]

    _build(wikitext_dir, tmp_path / "a", bert_vocab_file, seed=7)
    _build(wikitext_dir, tmp_path / "b", bert_vocab_file, seed=7)
    _build(wikitext_dir, tmp_path / "c", bert_vocab_file, seed=8)
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")
    assert shard_bytes(tmp_path / "a") != shard_bytes(tmp_path / "c")


def test_two_processes_give_the_same_examples(wikitext_dir, tmp_path, bert_vocab_file):
    # A slice of WikiText in 5 files (the cost of this test is the workers' start-up).
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = (wikitext_dir / "wiki.valid.raw").read_text(encoding="utf-8").split("\n")[:1000]
    for i in range(5):
        (corpus / f"part{i}.txt").write_text("\n".join(text[i * 200:(i + 1) * 200]),
                                              encoding="utf-8")
    one = _build(corpus, tmp_path / "one", bert_vocab_file, num_shards=4)
    two = _build(corpus, tmp_path / "two", bert_vocab_file, num_shards=4, num_processes=2)
    assert one["examples"] > 100
    assert (one["examples"], one["tokens"]) == (two["examples"], two["tokens"])

    def rows(directory):
        return sorted(map(tuple, read_examples(directory)["input_ids"].tolist()))

    assert rows(tmp_path / "one") == rows(tmp_path / "two")


def test_rebuild_replaces_old_shards_and_cleans_stale_temp_files(wikitext_dir, tmp_path,
                                                                 bert_vocab_file):
    out = tmp_path / "out"
    _build(wikitext_dir, out, bert_vocab_file, num_shards=5)
    (out / "pretrain_data.tfrecord-9-of-10.incomplete").write_bytes(b"left by a killed run")
    _build(wikitext_dir, out, bert_vocab_file, num_shards=2)
    assert sorted(os.listdir(out)) == sorted(
        [SUMMARY_FILE, "pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2"])


def test_small_files_grouped_per_tokenizer_call_give_the_same_examples(tmp_path, bert_vocab_file):
    """Small files are tokenized together, one call per `lines_per_batch` lines: a group that
    fills up is packed and a new one starts; the examples are those of one call for all."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"doc{i}.txt").write_text(
            f"File {i} starts here.\nIt has a second line.\n\nAnd a second document {i}.\n")
    one_call = _build(corpus, tmp_path / "one", bert_vocab_file, max_seq_length=16, num_shards=1)
    grouped = _build(corpus, tmp_path / "grouped", bert_vocab_file, max_seq_length=16,
                     num_shards=1, lines_per_batch=6)     # 4-line files: a group per two files
    assert grouped["examples"] == one_call["examples"] > 0
    for name, rows in read_examples(tmp_path / "one").items():
        np.testing.assert_array_equal(read_examples(tmp_path / "grouped")[name], rows)
