"""The shard builder as an Apache Beam pipeline (data/beam_builder.py) against the local builder.

Same corpus, vocab, seed and max_seq_length: the DirectRunner's examples are the local builder's
as a multiset (byte-equal serialized tf.train.Examples) and the summary counts are the same, on
a text corpus and on OpenWebText archives (streamed, never extracted). A Dataflow build is only
built (--dry_run): nothing is submitted and no address outside this machine is contacted. Bad
inputs of the Beam path are one line, exit status 1, nothing left behind. Tiny corpus, tiny
vocab: the in-process builds take about a second each; the command lines run concurrently.
"""
import io
import json
import lzma
import os
import random
import re
import socket
import subprocess
import sys
import tarfile

import pytest

pytest.importorskip("apache_beam", reason="Apache Beam is not installed (pip install -e '.[beam]')")

import tensorflow as tf  # noqa: E402

from data import beam_builder, pretraining_builder  # noqa: E402
from data.build_engine import build  # noqa: E402
from data.pretraining_builder import SUMMARY_FILE, BuildConfig  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402

SEQ = 32
WORDS = ("the a of and to in is was it for on that with as by at from this be are first second "
         "sentence here follows new document one more text some words game play").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
COUNTS = ("documents", "examples", "tokens", "two_segment_examples", "corpus_files",
          "corpus_units", "files_read", "skipped_files", "corpus_bytes", "corpus_lines",
          "corpus_tokens")


def _text(rng, lines):
    """`lines` lines of random words, about one in ten blank (a document boundary)."""
    return "\n".join("" if rng.random() < 0.1 else
                     " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))
                     for _ in range(lines)) + "\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam_inputs")
    rng = random.Random(3)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + WORDS) + "\n")
    corpus = root / "corpus"
    corpus.mkdir()
    for i, lines in enumerate((150, 40, 3, 90, 1)):
        (corpus / f"part{i}.txt").write_text(_text(rng, lines))
    owt = root / "data" / "openwebtext"
    owt.mkdir(parents=True)
    for a in range(2):
        _tar_xz(owt / f"urlsf_subset00-{a}_data.xz",
                {f"{a:04d}{m:03d}-{m}.txt": _text(rng, rng.randint(1, 25)) for m in range(12)})
    bad = root / "bad" / "openwebtext"
    bad.mkdir(parents=True)
    good = (owt / "urlsf_subset00-0_data.xz").read_bytes()
    (bad / "urlsf_subset00-0_data.xz").write_bytes(good)
    (bad / "urlsf_subset00-1_data.xz").write_bytes(good[:len(good) // 2])  # cut short
    return dict(root=root, vocab=vocab, corpus=corpus, data_dir=root / "data", owt=owt,
                bad_data_dir=root / "bad")


def _tar_xz(path, files):
    with tarfile.open(path, "w:xz") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _records(output_dir):
    """The serialized examples of every finished shard, sorted (a multiset)."""
    paths = sorted(tf.io.gfile.glob(os.path.join(str(output_dir), "pretrain_data.tfrecord-*")))
    assert paths and not [p for p in paths if p.endswith(".incomplete")]
    return sorted(r.numpy() for p in paths for r in tf.data.TFRecordDataset(p))


def _config(inputs, output_dir, **overrides):
    settings = dict(corpus_dir=str(inputs["corpus"]), output_dir=str(output_dir),
                    vocab_file=str(inputs["vocab"]), max_seq_length=SEQ, num_shards=3,
                    progress=False)
    settings.update(overrides)
    return BuildConfig(**settings)


def _assert_same_build(local_dir, beam_dir, local, beamed):
    assert _records(local_dir) == _records(beam_dir)
    assert {k: local[k] for k in COUNTS} == {k: beamed[k] for k in COUNTS}
    on_disk = json.loads((beam_dir / SUMMARY_FILE).read_text())
    assert {k: on_disk[k] for k in COUNTS} == {k: beamed[k] for k in COUNTS}
    assert on_disk["engine"] == "beam, DirectRunner"
    assert sorted(os.listdir(beam_dir)) == sorted(
        [SUMMARY_FILE] + [f"pretrain_data.tfrecord-{i}-of-3" for i in range(3)])


@pytest.mark.parametrize("lines_per_batch", [20000, 16])  # one tokenizer call; big files chunked
def test_direct_runner_gives_the_local_builders_examples(inputs, tmp_path, lines_per_batch):
    local = build(_config(inputs, tmp_path / "local", lines_per_batch=lines_per_batch))
    beamed = build(_config(inputs, tmp_path / "beam", lines_per_batch=lines_per_batch),
                   "DirectRunner", [])
    assert local["examples"] > 50 and local["two_segment_examples"] > 0
    _assert_same_build(tmp_path / "local", tmp_path / "beam", local, beamed)
    # The Beam shards are a function of the examples alone: the same bytes on a rebuild.
    again = build(_config(inputs, tmp_path / "beam", lines_per_batch=lines_per_batch),
                  "DirectRunner", [])
    assert again["examples"] == beamed["examples"]


def test_direct_runner_on_openwebtext_archives_streamed(inputs, tmp_path, monkeypatch):
    from data.openwebtext import read_archive
    from data.pretraining_builder import openwebtext_config

    def no_extraction(*args, **kwargs):
        raise AssertionError("an archive was extracted to disk")
    monkeypatch.setattr(tarfile.TarFile, "extract", no_extraction)
    monkeypatch.setattr(tarfile.TarFile, "extractall", no_extraction)

    def owt(output_dir):
        return openwebtext_config(inputs["data_dir"], dict(
            vocab_file=str(inputs["vocab"]), output_dir=str(output_dir), max_seq_length=SEQ,
            num_shards=3, progress=False))

    local = build(owt(tmp_path / "local"))
    beamed = build(owt(tmp_path / "beam"), "DirectRunner", [])
    assert (local["corpus_units"], local["corpus_files"], local["documents"]) == (2, 24, 24)
    _assert_same_build(tmp_path / "local", tmp_path / "beam", local, beamed)
    # Each member is seeded by the name earlier versions gave it in their staging folder.
    names = [name for name, _, _ in read_archive(str(inputs["owt"] / "urlsf_subset00-1_data.xz"))]
    assert names[:2] == ["urlsf_subset00-1_data__000000__0001000-0.txt",
                         "urlsf_subset00-1_data__000001__0001001-1.txt"]


def test_any_tensorflow_filesystem(inputs, tmp_path):
    """Corpus, archives, vocab and output on TensorFlow's ram:// filesystem (as on gs://)."""
    from data.pretraining_builder import openwebtext_config
    root = f"ram://beam_{os.getpid()}_{tmp_path.name}"
    for local, remote in ((inputs["corpus"], f"{root}/corpus"),
                          (inputs["owt"], f"{root}/data/openwebtext")):
        tf.io.gfile.makedirs(remote)
        for name in os.listdir(local):
            tf.io.gfile.copy(str(local / name), f"{remote}/{name}")
    tf.io.gfile.copy(str(inputs["vocab"]), f"{root}/vocab.txt")
    beamed = build(_config(inputs, f"{root}/out", corpus_dir=f"{root}/corpus",
                           vocab_file=f"{root}/vocab.txt"), "DirectRunner", [])
    local = build(_config(inputs, tmp_path / "local"))
    assert _records(f"{root}/out") == _records(tmp_path / "local")
    assert {k: local[k] for k in COUNTS} == {k: beamed[k] for k in COUNTS}
    assert sorted(tf.io.gfile.listdir(f"{root}/out")) == sorted(
        [SUMMARY_FILE] + [f"pretrain_data.tfrecord-{i}-of-3" for i in range(3)])
    owt = build(openwebtext_config(f"{root}/data", dict(
        vocab_file=f"{root}/vocab.txt", output_dir=f"{root}/owt_out", max_seq_length=SEQ,
        num_shards=3, progress=False)), "DirectRunner", [])
    assert owt["corpus_files"] == 24 and owt["examples"] == len(_records(f"{root}/owt_out"))


def test_a_plain_xz_is_one_document(tmp_path, inputs):
    from data.openwebtext import read_archive
    path = tmp_path / "single.xz"
    path.write_bytes(lzma.compress(b"one text\nof two lines\n"))
    assert read_archive(str(path)) == [("single.txt", str(path), b"one text\nof two lines\n")]


def test_dataflow_dry_run_builds_the_pipeline_and_contacts_nobody(inputs, tmp_path,
                                                                   monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    args = ["--project=P", "--region=R", "--temp_location=gs://b/t",
            "--worker_machine_type=n2-standard-4"]
    line = build(_config(inputs, tmp_path / "out"), "DataflowRunner", args, dry_run=True)
    assert line.startswith("dry run: DataflowRunner: 5 unit(s) of work")
    assert "project P, region R, temp location gs://b/t" in line
    assert "worker machine type n2-standard-4" in line and "nothing submitted" in line
    assert not (tmp_path / "out").exists()
    options = beam_builder.pipeline_options("DataflowRunner", args)
    cloud = options.view_as(beam_builder.GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("P", "R", "gs://b/t")
    # The workers get the toolkit from its setup.py unless told otherwise.
    assert options.view_as(beam_builder.SetupOptions).setup_file == str(REPO_ROOT / "setup.py")
    # An output on a bucket is not looked at either.
    build(_config(inputs, "gs://b/out"), "DataflowRunner", args, dry_run=True)


@pytest.mark.parametrize("args, fragment", [
    (["--project=P", "--temp_location=gs://b/t"], "needs --region"),
    (["--project=P", "--region=R", "--temp_location=/tmp/t"], "needs a gs:// path"),
    (["--project=P", "--region=R", "--temp_location=gs://b/t", "--num_workrs=3"],
     "unknown flag(s): --num_workrs=3"),
])
def test_dataflow_options_are_checked_first(inputs, tmp_path, args, fragment):
    with pytest.raises(pretraining_builder.DataError, match=re.escape(fragment)):
        build(_config(inputs, tmp_path / "out"), "DataflowRunner", args, dry_run=True)


# --- the command lines on bad input ----------------------------------------------------------
@pytest.fixture(scope="module")
def cli_runs(inputs, tmp_path_factory):
    """name -> (returncode, stdout, stderr, output_dir) of each command, run concurrently."""
    root = tmp_path_factory.mktemp("beam_cli")
    bad = inputs["bad_data_dir"]
    vocab, corpus = str(inputs["vocab"]), str(inputs["corpus"])
    text = [sys.executable, str(REPO_ROOT / "build_pretraining_dataset.py"), "--num_shards=2",
            f"--max_seq_length={SEQ}", "--noprogress", "--runner=DirectRunner"]
    owt = [sys.executable, str(REPO_ROOT / "build_openwebtext_pretraining_dataset.py"),
           "--num_shards=2", f"--max_seq_length={SEQ}", "--noprogress", "--runner=DirectRunner",
           f"--vocab_file={vocab}"]
    # The catalogue (tests/test_bad_inputs.py, `*_beam`) runs the other bad inputs of the Beam
    # path on the default DirectRunner; here, two worker processes.
    cases = {
        "bad_archive_two_workers": owt + [f"--data_dir={bad}",
                                          "--direct_num_workers=2",
                                          "--direct_running_mode=multi_processing"],
        "dataflow_dry_run": text[:-1] + [
            f"--corpus_dir={corpus}", f"--vocab_file={vocab}", "--runner=DataflowRunner",
            "--project=P", "--region=R", "--temp_location=gs://b/t", "--dry_run"],
    }
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    running = {}
    for name, command in cases.items():
        output_dir = root / f"out_{name}"
        command = command + [f"--output_dir={output_dir}"]
        running[name] = (subprocess.Popen(command, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env),
                         output_dir)
    results = {}
    for name, (process, output_dir) in running.items():
        stdout, stderr = process.communicate(timeout=300)
        results[name] = (process.returncode, stdout, stderr, output_dir)
    return results


def _one_line_error(result, *fragments):
    returncode, _, stderr, output_dir = result
    assert returncode == 1, stderr
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    assert "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    if output_dir.is_dir():
        assert not [f for f in os.listdir(output_dir) if f.startswith("pretrain_data")]
    return errors[0]


def _build_error(config, *fragments):
    """The one-line DataError of a Beam build (the command line prints it as `error: ...`)."""
    with pytest.raises(pretraining_builder.DataError) as raised:
        build(config, "DirectRunner", [])
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "while running" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    output_dir = str(config.output_dir)
    if os.path.isdir(output_dir):
        assert not [f for f in os.listdir(output_dir) if f.startswith("pretrain_data")]
    return message


def test_missing_corpus(inputs, tmp_path):
    _build_error(_config(inputs, tmp_path / "out", corpus_dir=str(tmp_path / "no_corpus")),
                 "no_corpus", "not found")
    assert not (tmp_path / "out").exists()


def test_missing_vocab(inputs, tmp_path):
    _build_error(_config(inputs, tmp_path / "out", vocab_file=str(tmp_path / "no.txt")),
                 "no.txt", "not found")
    assert not (tmp_path / "out").exists()


def _bad_owt(inputs, output_dir, **overrides):
    from data.pretraining_builder import openwebtext_config
    settings = dict(vocab_file=str(inputs["vocab"]), output_dir=str(output_dir),
                    max_seq_length=SEQ, num_shards=2, progress=False)
    settings.update(overrides)
    return openwebtext_config(inputs["bad_data_dir"], settings)


def test_unreadable_archive_in_process(inputs, tmp_path):
    _build_error(_bad_owt(inputs, tmp_path / "out"), "urlsf_subset00-1_data.xz",
                 "not a valid .xz")
    assert os.listdir(tmp_path / "out") == []  # the temporary shards are gone


def test_unreadable_archive_with_two_worker_processes(cli_runs):
    # A worker process prints the failing DoFn's traceback itself; the build keeps it off the
    # console and says the error in one line.
    line = _one_line_error(cli_runs["bad_archive_two_workers"], "urlsf_subset00-1_data.xz",
                           "not a valid .xz")
    assert "while running" not in line


def test_unreadable_archive_skipped_and_counted(inputs, tmp_path, capfd):
    # with the progress lines the local builder prints (the packing reports from the workers)
    summary = build(_bad_owt(inputs, tmp_path / "out", skip_bad_files=True, progress=True),
                    "DirectRunner", [])
    err = capfd.readouterr().err
    assert "warning: skipping archive" in err
    progress = [line for line in err.splitlines() if line.startswith(
        "[build_pretraining_dataset] ") and " MB (" in line]
    assert progress and progress[-1].endswith("ETA 0:00:00"), err
    assert f"(100%), {summary['examples']:,} examples, elapsed " in progress[-1]
    assert len(summary["skipped_files"]) == 1 and "subset00-1" in summary["skipped_files"][0]
    assert (summary["files_read"], summary["corpus_units"]) == (12, 2)
    local = build(_bad_owt(inputs, tmp_path / "local", skip_bad_files=True))
    assert {k: local[k] for k in COUNTS} == {k: summary[k] for k in COUNTS}
    assert _records(tmp_path / "local") == _records(tmp_path / "out")


def test_dataflow_dry_run_command_line(cli_runs):
    returncode, stdout, stderr, output_dir = cli_runs["dataflow_dry_run"]
    assert returncode == 0, stderr
    assert "project P, region R, temp location gs://b/t" in stdout
    assert "nothing submitted" in stdout and not output_dir.exists()
