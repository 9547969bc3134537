"""The command line on bad input: one-line error naming the file, exit status 1, no shards.

All CLI runs start together (TensorFlow's import dominates each run), then each test checks one.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, shared_path

GOOD_TEXT = "The first sentence is here.\nAnd a second one follows it.\n\nA new document.\n"


def _corpus(root, name, files):
    directory = root / name
    directory.mkdir()
    for file_name, content in files.items():
        (directory / file_name).write_bytes(content)
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (returncode, stdout, stderr, output_dir) for every CLI case, run concurrently."""
    root = tmp_path_factory.mktemp("cli")
    vocab = str(shared_path("data", "vocab", "bert-uncased-vocab.txt"))
    bad_vocab = root / "bad_vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\nhello\n")
    good = _corpus(root, "good", {"a.txt": GOOD_TEXT.encode()})
    bad_utf8 = _corpus(root, "bad_utf8", {"a.txt": GOOD_TEXT.encode(),
                                          "b.txt": b"caf\xc3\xa9 ok\nthen \xff bad\n"})
    binary = _corpus(root, "binary", {"a.txt": GOOD_TEXT.encode(),
                                      "z.bin": b"PK\x03\x04\x00\x00data"})
    cases = {
        "empty_dir": ([f"--corpus_dir={_corpus(root, 'empty', {})}"], vocab),
        "binary": ([f"--corpus_dir={binary}"], vocab),
        "bad_utf8": ([f"--corpus_dir={bad_utf8}"], vocab),
        "skip_bad": ([f"--corpus_dir={bad_utf8}", "--skip_bad_files"], vocab),
        "missing_vocab": ([f"--corpus_dir={good}"], str(root / "no_such_vocab.txt")),
        "bad_vocab": ([f"--corpus_dir={good}"], str(bad_vocab)),
        "short_seq": ([f"--corpus_dir={good}", "--max_seq_length=7"], vocab),
        "no_blank_docs": ([f"--corpus_dir={good}", "--blanks_separate_docs=false"], vocab),
        "good": ([f"--corpus_dir={good}"], vocab),
    }
    processes = {}
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    for name, (args, vocab_file) in cases.items():
        output_dir = root / f"out_{name}"
        # no_blank_docs leaves --num_shards out: the count is sized to the corpus
        shards = [] if name == "no_blank_docs" else ["--num_shards=2"]
        command = [sys.executable, str(REPO_ROOT / "build_pretraining_dataset.py"),
                   f"--vocab_file={vocab_file}", f"--output_dir={output_dir}", *shards, *args]
        processes[name] = (subprocess.Popen(command, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, env=env),
                           output_dir)
    results = {}
    for name, (process, output_dir) in processes.items():
        stdout, stderr = process.communicate(timeout=300)
        results[name] = (process.returncode, stdout, stderr, output_dir)
    return results


def _assert_failed_cleanly(result, *fragments):
    returncode, _, stderr, output_dir = result
    assert returncode == 1, stderr
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert lines[-1].startswith("error: "), stderr
    assert sum(line.startswith("error") for line in lines) == 1
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]
    leftovers = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    assert not [f for f in leftovers if f.startswith("pretrain_data")], leftovers
    return lines[-1]


def test_empty_corpus_directory(runs):
    _assert_failed_cleanly(runs["empty_dir"], "empty", "contains no files")


def test_binary_file_named_and_no_partial_shards(runs):
    _assert_failed_cleanly(runs["binary"], "z.bin", "binary data", "byte offset 4")


def test_invalid_utf8_names_file_and_byte_offset(runs):
    # b"caf\xc3\xa9 ok\nthen \xff": the bad byte is at offset 14.
    _assert_failed_cleanly(runs["bad_utf8"], "b.txt", "invalid UTF-8", "byte offset 14")


def test_skip_bad_files_counts_and_warns(runs):
    returncode, stdout, stderr, output_dir = runs["skip_bad"]
    assert returncode == 0, stderr
    assert "warning: skipping corpus file" in stderr and "b.txt" in stderr
    summary = json.loads((output_dir / "pretrain_data.summary.json").read_text())
    assert len(summary["skipped_files"]) == 1 and "b.txt" in summary["skipped_files"][0]
    assert summary["files_read"] == 1 and summary["examples"] == 2
    assert "1 files skipped" in stdout
    # --num_shards=2 for 2 examples: the summary says the count is more than the corpus needs
    assert "; 2 shards of ~1 examples each: more than this corpus needs (leave --num_shards " \
        "out to size them to the corpus)" in stdout


def test_missing_vocab(runs):
    _assert_failed_cleanly(runs["missing_vocab"], "no_such_vocab.txt", "not found")


def test_malformed_vocab(runs):
    _assert_failed_cleanly(runs["bad_vocab"], "bad_vocab.txt", "[CLS]")


def test_max_seq_length_too_small(runs):
    _assert_failed_cleanly(runs["short_seq"], "--max_seq_length", "at least 8")


def test_boolean_flag_false_means_false(runs):
    returncode, stdout, stderr, output_dir = runs["no_blank_docs"]
    assert returncode == 0, stderr
    summary = json.loads((output_dir / "pretrain_data.summary.json").read_text())
    assert summary["config"]["blanks_separate_docs"] is False
    # Without blank-line boundaries the single file is one document.
    assert summary["documents"] == 1
    assert "ETA" in stderr  # the progress line goes to stderr
    # No --num_shards: one shard for this corpus of a few bytes (not the 1,000 of old), and why
    assert summary["config"]["num_shards"] == 1
    assert sorted(p.name for p in output_dir.glob("pretrain_data.tfrecord*")) == [
        "pretrain_data.tfrecord-0-of-1"]
    assert "; 1 shard (sized to the corpus: 0.0 MB, one shard per 32 MB)" in stdout


def test_a_build_ends_with_its_shards_complete(runs, tmp_path):
    """The command ends its process with os._exit once the shards and the summary are written
    (build_pretraining_dataset.end_now: no interpreter teardown with TensorFlow loaded): status 0,
    the summary line printed, and the shards byte for byte those of the same build in process."""
    from data.pretraining_builder import BuildConfig, build_pretraining_dataset
    returncode, stdout, stderr, output_dir = runs["good"]
    assert returncode == 0, stderr
    assert stdout.startswith("2 documents -> 2 examples") and stdout.endswith("corpus)\n")
    config = BuildConfig(corpus_dir=str(output_dir.parent / "good"),
                         output_dir=str(tmp_path / "in_process"), num_shards=2, progress=False,
                         vocab_file=str(shared_path("data", "vocab", "bert-uncased-vocab.txt")))
    summary = build_pretraining_dataset(config)
    assert summary["examples"] == 2
    for name in summary["shards"] + ["pretrain_data.summary.json"]:
        ours, theirs = (output_dir / name).read_bytes(), (tmp_path / "in_process" / name)
        if name.endswith(".json"):   # the build's seconds differ
            ours, theirs = json.loads(ours), json.loads(theirs.read_bytes())
            ours.pop("seconds"), theirs.pop("seconds")
            ours.pop("corpus_tokens_per_second"), theirs.pop("corpus_tokens_per_second")
            ours["config"].pop("output_dir"), theirs["config"].pop("output_dir")
            ours["config"].pop("progress", None), theirs["config"].pop("progress", None)
        else:
            theirs = theirs.read_bytes()
        assert ours == theirs, name
