"""The bad-input catalogue (issue 19): every entry point, fed a bad input, fails cleanly.

Each case of `CASES` is (id, a function that writes the bad input under the case's own directory
and returns the command line, the substrings the error line must hold: the file, and the line
where the input has lines). One shared runner (`_run_cases`) runs every selected case in a
subprocess, a few at a time (TensorFlow's import dominates each run), and
`test_bad_input_fails_cleanly` asserts, per case:

* the exit status is not 0;
* stderr holds exactly one line starting with `error: `, it is the last line, and it contains the
  expected substrings (after TensorFlow's start-up lines, `_NOISE`, are left out: the C++ runtime
  prints them before any Python runs and no flag of ours reaches them);
* "Traceback" is not in stderr;
* nothing under the case's directory changed: the command runs with that directory as its working
  directory, every output path points into it, and every case's directory holds an earlier
  output (`earlier/`, and where the tool has an output file, a file of that name in the output
  directory): the tree (names, sizes, bytes) after the run equals the tree before it, so no partial
  output is left and no earlier output is overwritten.

docs/RELIABILITY.md tables the cases, what the user sees and the bad inputs tested elsewhere.
Everything is generated under tmp_path (a 50 MB corpus line once per session); nothing needs
../shared.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PARALLEL = 3          # subprocesses at once (2 cores; each spends most of its time importing)
TIMEOUT_S = 120
SEQ = 32
WORDS = ("the a of and to in is was it for on that with as by at from this be are first second "
         "sentence here follows new document one more text some words game play").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Lines TensorFlow/XLA's C++ runtime writes to stderr at import, before Python can silence it
# (TF_CPP_MIN_LOG_LEVEL=3 is set and still leaves these): glog-format lines from a .cc file, the
# absl pre-initialisation banner and cpu_feature_guard's continuation line.
_NOISE = (re.compile(r"^[IWE]\d{4} [\d:.]+\s+\d+ [\w.]+\.cc:\d+\] "),
          re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
          re.compile(r"^To enable the following instructions: .* rebuild TensorFlow"))


# ------------------------------------------------------------------------------ shared inputs
@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """Good inputs the cases start from (read-only for them): a vocab, a shard, a checkpoint,
    GLUE and SQuAD files, a corpus, and the 50 MB line."""
    root = tmp_path_factory.mktemp("assets")
    a = {"root": root}
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + WORDS) + "\n")
    a["vocab"] = vocab
    a["vocab_size"] = len(SPECIAL) + len(WORDS)
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The first sentence is here.\nAnd a second one follows it.\n\n"
                                  "A new document.\nWith some more text.\n")
    a["corpus"] = corpus
    return a


@pytest.fixture(scope="module")
def big_line(tmp_path_factory):
    """A corpus directory whose one file is a single 50 MB line (made once)."""
    directory = tmp_path_factory.mktemp("big_line")
    chunk = ("word " * 1000).encode()
    with open(directory / "huge.txt", "wb") as f:
        for _ in range(50 * 1024 * 1024 // len(chunk) + 1):
            f.write(chunk)
        f.write(b"\n")
    return directory


@pytest.fixture(scope="module")
def tf_assets(assets):
    """A valid shard (max_seq_length 32) and a tiny native checkpoint, made with TensorFlow."""
    import tensorflow as tf

    from model import ConvBertConfig, ConvBertModel
    root = assets["root"]
    shard_dir = root / "shards"
    shard_dir.mkdir()
    write_shard(shard_dir / "pretrain_data.tfrecord-0-of-1", n=8)
    assets["shards"] = shard_dir
    config = ConvBertConfig(vocab_size=assets["vocab_size"], hidden_size=32, embedding_size=16,
                            num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=64)
    ConvBertModel(config).save_pretrained(root / "ckpt")
    assets["ckpt"] = root / "ckpt"
    del tf
    return assets


def write_shard(path, n=8, names=("input_ids", "input_mask", "segment_ids"), length=SEQ):
    import tensorflow as tf
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            ids = [2] + [5 + (i + j) % 20 for j in range(length - 2)] + [3]
            values = {"input_ids": ids, "input_mask": [1] * length, "segment_ids": [0] * length}
            feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(
                value=values.get(name, ids))) for name in names}
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())


# ------------------------------------------------------------------------------ case builders
def _script(name):
    return [sys.executable, str(REPO_ROOT / name)]


def _module(name):
    return [sys.executable, "-m", name]


def _write(path, content):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _mkdir(path):
    path.mkdir(parents=True)
    return path


def _corpus(d, files):
    for name, content in files.items():
        _write(d / "corpus" / name, content)
    return d / "corpus"


def _builder(d, a, corpus, vocab=None, output=None, *extra):
    return _script("build_pretraining_dataset.py") + [
        f"--corpus_dir={corpus}", f"--vocab_file={vocab or a['vocab']}",
        f"--output_dir={output or d / 'out'}", "--num_shards=2", f"--max_seq_length={SEQ}",
        "--noprogress", *extra]


def _vocab_builder(d, corpus, output=None, *extra):
    return _script("build_vocab.py") + [f"--corpus_dir={corpus}",
                                        f"--output={output or d / 'out' / 'vocab.txt'}",
                                        "--vocab_size=50", "--min_count=1", *extra]


TINY_PRETRAIN = {"model_size": "tiny", "train_batch_size": 4, "max_seq_length": SEQ,
                 "num_train_steps": 2, "model_hparam_overrides": {
                     "hidden_size": 32, "embedding_size": 16, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "head_ratio": 1, "intermediate_size": 64}}


def _pretrain(d, a, shards=None, vocab=None, hparams=None, *extra):
    hp = json.loads(json.dumps(TINY_PRETRAIN))
    for key, value in (hparams or {}).items():
        if key == "model_hparam_overrides":
            hp[key].update(value)
        else:
            hp[key] = value
    return _script("run_pretraining.py") + [
        f"--pretrain_tfrecords={shards or a['shards'] / 'pretrain_data.tfrecord*'}",
        f"--vocab_file={vocab or a['vocab']}", f"--model_dir={d / 'out' / 'model'}",
        "--hparams=" + json.dumps(hp), *extra]


def _on_jax(argv):
    """argv run with KERAS_BACKEND=jax (the runner's environment says tensorflow)."""
    return ["env", "KERAS_BACKEND=jax"] + argv


def _two_shards(d, a):
    """Two copies of the good shard (one for each of two processes): their glob."""
    data = (a["shards"] / "pretrain_data.tfrecord-0-of-1").read_bytes()
    for i in range(2):
        _write(d / "shards" / f"pretrain_data.tfrecord-{i}-of-2", data)
    return d / "shards" / "pretrain_data.tfrecord*"


def _closed_port():
    """A loopback port nothing listens on (bound, then let go)."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD_JSON_LINE3 = '{\n  "learning_rate": 1e-4,\n  "seed": 3,,\n}\n'      # error on line 3
BAD_JSON_LINE2 = '{\n  "learning_rate" 1e-4\n}\n'                      # error on line 2
BAD_JSON_LINE3_COMMA = '{\n  "hidden_size": 64\n  "num_hidden_layers": 1\n}\n'   # line 3
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROWS = ["0\tThe game was played.\tA game was played.\tentailment\n",
            "1\tIt was the first one.\tIt was the second one.\tnot_entailment\n"]


def _glue(d, train=None, dev=None):
    """A GLUE dir with RTE/{train,dev}.tsv (good unless given)."""
    good = RTE_HEADER + "".join(RTE_ROWS)
    _write(d / "glue" / "RTE" / "train.tsv", good if train is None else train)
    _write(d / "glue" / "RTE" / "dev.tsv", good if dev is None else dev)
    return d / "glue"


def _finetune(d, a, *extra):
    return _script("run_finetuning.py") + [
        "--task_names=rte", f"--vocab_file={a['vocab']}", f"--model_dir={d / 'out' / 'ft'}",
        "--model_size=small", "--max_train_steps=1", "--max_seq_length=32", *extra]


def _squad(context="The game was played in the first one.", answer="first one", start=None,
           drop=None):
    qa = {"id": "q1", "question": "Where was the game?",
          "answers": [{"text": answer, "answer_start": context.find(answer)
                       if start is None else start}]}
    paragraph = {"context": context, "qas": [qa]}
    for key in drop or ():
        (qa if key in qa else paragraph).pop(key)
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]},
                      indent=1)


def _finetune_squad(d, a, train_text, *extra):
    train = _write(d / "squad" / "train.json", train_text)
    dev = _write(d / "squad" / "dev.json", _squad())
    return _script("run_finetuning.py") + [
        "--task_names=squadv1", f"--train_file={train}", f"--predict_file={dev}",
        f"--vocab_file={a['vocab']}", f"--model_dir={d / 'out' / 'ft'}", "--model_size=small",
        "--max_train_steps=1", "--max_seq_length=64", *extra]


def _squad_features(d, a, doc_stride=32):
    """<d>/features: SQuAD 1.1 train + dev windows (python -m finetune.features, in process) at
    64 tokens with `doc_stride`, from the good _squad() file and the tiny vocab."""
    from finetune.features import make_feature_files
    from finetune.hparams import load_hparams
    data = d / "squad_data"
    for split in ("train", "dev"):
        _write(data / "squad" / f"{split}-v1.1.json", _squad())
    hp = load_hparams(None, max_seq_length=64, doc_stride=doc_stride,
                      max_query_length=16).for_task("squadv1")
    make_feature_files(["squadv1"], ["train", "dev"], str(data), str(a["vocab"]),
                       str(d / "features"), hp, printer=lambda *_: None)
    return d / "features"


def _finetune_squad_features(d, a, *extra):
    return _script("run_finetuning.py") + [
        "--task_names=squadv1", f"--features_dir={_squad_features(d, a)}",
        f"--model_dir={d / 'out' / 'ft'}", "--model_size=small", "--max_train_steps=1",
        '--hparams={"doc_stride": 32, "max_query_length": 16}', *extra]


def _damaged_features(d, a, damage):
    """KERAS_BACKEND=jax run_finetuning.py over _squad_features once `damage(<d>/features)` has
    changed a file of them (the features as another process or a bad copy left them)."""
    argv = _on_jax(_finetune_squad_features(d, a))
    damage(d / "features")
    return argv


def _flip_a_bit(path):
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0x01
    Path(path).write_bytes(bytes(data))


def _manifest_lists_another_sha256(features, key="squadv1_train"):
    manifest = json.loads((features / "manifest.json").read_text())
    manifest["files"][key]["sha256"] = hashlib.sha256(b"another build").hexdigest()
    (features / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _lm(d, a, *extra, train=None):
    train = train or _write(d / "text" / "train.txt", " ".join(WORDS * 20) + "\n")
    return _script("run_lm.py") + [
        f"--train_files={train}", f"--vocab_file={a['vocab']}", f"--model_dir={d / 'out' / 'lm'}",
        "--num_train_steps=1", "--seq_len=16", "--train_batch_size=2", *extra]


def _convert(d, source, *extra, output=None):
    return _script("scripts/convert_checkpoint.py") + [
        f"--input={source}", f"--output={output or d / 'out' / 'converted'}", "--format=keras",
        *extra]


def _copy_tree(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def _truncate(path, keep=0.5):
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:int(len(data) * keep)])


def _hf_other_architecture(d):
    """A Hugging Face BERT directory: config.json (model_type bert) + model.safetensors."""
    import numpy as np
    from safetensors.numpy import save_file
    directory = d / "bert_hf"
    directory.mkdir()
    _write(directory / "config.json", json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "hidden_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 50, "max_position_embeddings": 64}))
    save_file({"embeddings.word_embeddings.weight": np.zeros((50, 32), np.float32)},
              str(directory / "model.safetensors"))
    return directory


# Each case: (id, prepare(d, assets) -> argv, expected substrings of the error line (callable of
# d, assets -> list, or a list)). `d` is the case's own (empty but for earlier/) directory.
def _c(case_id, prepare, expected):
    return pytest.param(case_id, prepare, expected, id=case_id)


# The builders as an Apache Beam pipeline (--runner=DirectRunner; the `beam` extra).
_NEEDS_BEAM = pytest.mark.skipif(importlib.util.find_spec("apache_beam") is None,
                                 reason="Apache Beam is not installed (pip install -e '.[beam]')")


def _beam_c(case_id, prepare, expected):
    return pytest.param(case_id, lambda d, a: prepare(d, a) + ["--runner=DirectRunner"],
                        expected, id=case_id, marks=_NEEDS_BEAM)


# KerasHub presets (the `keras_hub` extra, which the `test` extra includes).
_NEEDS_KERAS_HUB = pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None,
                                      reason="KerasHub is not installed (pip install -e "
                                      "'.[keras_hub]')")


def _keras_hub_c(case_id, prepare, expected):
    return pytest.param(case_id, prepare, expected, id=case_id, marks=_NEEDS_KERAS_HUB)


def _preset_files(d, registered_name="convbert_keras_hub>ConvBertBackbone", weights=True):
    """A preset directory's files (config, tokenizer and its vocabulary asset, weights unless
    not `weights`): what the checks before Keras reads a byte look at."""
    directory = d / "preset"
    _write(directory / "config.json", json.dumps({
        "module": registered_name.split(">")[0], "class_name": registered_name.split(">")[1],
        "config": {}, "registered_name": registered_name}))
    _write(directory / "tokenizer.json", "{}")
    _write(directory / "assets" / "tokenizer" / "vocabulary.txt", "\n".join(SPECIAL) + "\n")
    if weights:
        _write(directory / "model.weights.h5", b"\x89HDF\r\n")
    return directory


def _big_vocab(d):
    """A good vocabulary of 205 tokens: more than the tiny checkpoint's word embeddings."""
    return _write(d / "big_vocab.txt", "\n".join(SPECIAL + [f"w{i}" for i in range(200)]) + "\n")


def _tar_xz(files):
    """The bytes of a tar.xz archive of text files {name: text}."""
    import io
    import tarfile
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


def _owt_builder(d, a, archives):
    """build_openwebtext_pretraining_dataset.py over <d>/owt/openwebtext/{name: bytes}."""
    for name, data in archives.items():
        _write(d / "owt" / "openwebtext" / name, data)
    return _script("build_openwebtext_pretraining_dataset.py") + [
        f"--data_dir={d / 'owt'}", f"--vocab_file={a['vocab']}", f"--output_dir={d / 'out'}",
        "--num_shards=2", f"--max_seq_length={SEQ}", "--noprogress"]


_GOOD_ARCHIVE = _tar_xz({f"doc{i}.txt": "The first sentence is here.\nA new document.\n"
                         for i in range(5)})


CASES = [
    # ---- corpus -------------------------------------------------------------------------------
    _c("corpus_empty_dir_vocab", lambda d, a: _vocab_builder(d, _mkdir(d / "corpus")),
       lambda d, a: [str(d / "corpus"), "contains no files"]),
    _c("corpus_binary_file_vocab", lambda d, a: _vocab_builder(d, _corpus(d, {
        "a.txt": "Good text here.\n", "b.bin": b"\x89PNG\r\n\x1a\n\x00\x00"})),
       lambda d, a: [str(d / "corpus" / "b.bin"), "binary data"]),
    _c("corpus_invalid_utf8_vocab", lambda d, a: _vocab_builder(d, _corpus(d, {
        "a.txt": b"good line\nsecond line\nthen \xff bad\n"})),
       lambda d, a: [str(d / "corpus" / "a.txt"), "line 3", "invalid UTF-8"]),
    _c("corpus_50mb_line_builder", lambda d, a: _builder(d, a, a["big_line"]),
       lambda d, a: [str(a["big_line"] / "huge.txt"), "line 1", "longer than"]),
    _c("corpus_invalid_utf8_lm", lambda d, a: _lm(d, a, train=_write(
        d / "text" / "train.txt", b"good text\nmore \xc3\x28 text\n")),
       lambda d, a: [str(d / "text" / "train.txt"), "line 2", "invalid UTF-8"]),
    # ---- vocab --------------------------------------------------------------------------------
    _c("vocab_duplicate_token_builder", lambda d, a: _builder(d, a, a["corpus"], vocab=_write(
        d / "dup_vocab.txt", "\n".join(SPECIAL + ["the", "game", "the"]) + "\n")),
       lambda d, a: [str(d / "dup_vocab.txt"), "duplicate token 'the'", "line 8"]),
    _c("vocab_no_mask_pretrain", lambda d, a: _pretrain(d, a, vocab=_write(
        d / "no_mask.txt", "\n".join([t for t in SPECIAL if t != "[MASK]"] + list(WORDS)) + "\n")),
       lambda d, a: [str(d / "no_mask.txt"), "[MASK]"]),
    _c("vocab_no_cls_sep_finetune", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d)}",
       f"--vocab_file={_write(d / 'no_cls.txt', chr(10).join(['[PAD]', '[UNK]', '[MASK]'] + list(WORDS)))}"),
       lambda d, a: [str(d / "no_cls.txt"), "[CLS]", "[SEP]"]),
    _c("vocab_missing_finetune", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d)}",
                                                        f"--vocab_file={d / 'nope.txt'}"),
       lambda d, a: [str(d / "nope.txt"), "not found"]),
    _c("vocab_no_unk_lm", lambda d, a: _lm(d, a, f"--vocab_file={_write(d / 'no_unk.txt', chr(10).join([t for t in SPECIAL if t != '[UNK]'] + list(WORDS)))}"),
       lambda d, a: [str(d / "no_unk.txt"), "[UNK]"]),
    # ---- configs and --hparams ----------------------------------------------------------------
    _c("hparams_unknown_key_lm", lambda d, a: _lm(d, a, '--hparams={"seq_lenght": 8}'),
       ["seq_lenght"]),
    _c("hparams_wrong_type_pretrain", lambda d, a: _pretrain(d, a, hparams={
        "learning_rate": "fast"}), ["learning_rate", "'fast'"]),
    _c("hparams_malformed_json_file_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}",
        "--hparams=" + str(_write(d / "hp.json", BAD_JSON_LINE3))),
       lambda d, a: [str(d / "hp.json"), "line 3"]),
    _c("hparams_malformed_json_elastic", lambda d, a: _module("elastic.run") + [
        "--task_name=rte", f"--teacher_dir={d}", f"--data_dir={_glue(d)}",
        f"--vocab_file={a['vocab']}", f"--output_dir={d / 'out' / 'elastic'}",
        "--hparams=" + str(_write(d / "hp.json", BAD_JSON_LINE2))],
       lambda d, a: [str(d / "hp.json"), "line 2"]),
    _c("config_inconsistent_sizes_pretrain", lambda d, a: _pretrain(d, a, hparams={
        "model_hparam_overrides": {"hidden_size": 30, "num_attention_heads": 4}}),
       ["hidden_size", "30", "num_attention_heads"]),
    _c("config_inconsistent_sizes_convert", lambda d, a: _convert(
        d, a["ckpt"], f"--config={_write(d / 'cfg.json', json.dumps({'hidden_size': 30, 'num_attention_heads': 4, 'embedding_size': 16}))}"),
       lambda d, a: [str(d / "cfg.json"), "hidden_size"]),
    _c("config_malformed_json_lm", lambda d, a: _lm(
        d, a, "--model_config=" + str(_write(d / "model.json", BAD_JSON_LINE3_COMMA))),
       lambda d, a: [str(d / "model.json"), "line 3"]),
    # ---- TFRecords ----------------------------------------------------------------------------
    _c("tfrecord_truncated_pretrain", lambda d, a: _pretrain(
        d, a, shards=_truncated_shard(d, a)),
       lambda d, a: [str(d / "shards" / "pretrain_data.tfrecord-0-of-1"), "truncated"]),
    _c("tfrecord_zero_records_pretrain", lambda d, a: _pretrain(d, a, shards=_write(
        d / "shards" / "pretrain_data.tfrecord-0-of-1", b"")),
       lambda d, a: [str(d / "shards" / "pretrain_data.tfrecord-0-of-1"), "no records"]),
    _c("tfrecord_not_an_example_pretrain", lambda d, a: _pretrain(d, a, shards=_garbage_shard(d)),
       lambda d, a: [str(d / "shards" / "pretrain_data.tfrecord-0-of-1"), "record 0",
                     "not a tf.train.Example"]),
    # ---- GLUE TSV -----------------------------------------------------------------------------
    _c("glue_wrong_columns", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d, train=RTE_HEADER + RTE_ROWS[0] + '2' + chr(9) + 'only two columns' + chr(10))}"),
       lambda d, a: [str(d / "glue" / "RTE" / "train.tsv") + ":3", "expected 4", "found 2"]),
    _c("glue_unknown_label", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d, train=RTE_HEADER + RTE_ROWS[0].replace('entailment', 'Entailment') + RTE_ROWS[1])}"),
       lambda d, a: [str(d / "glue" / "RTE" / "train.tsv") + ":2", "'Entailment'"]),
    _c("glue_empty_file", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d, train='')}"),
       lambda d, a: [str(d / "glue" / "RTE" / "train.tsv"), "no examples"]),
    _c("glue_header_only", lambda d, a: _finetune(d, a, f"--data_dir={_glue(d, dev=RTE_HEADER)}"),
       lambda d, a: [str(d / "glue" / "RTE" / "dev.tsv"), "no examples"]),
    # ---- SQuAD JSON ---------------------------------------------------------------------------
    _c("squad_malformed_json", lambda d, a: _finetune_squad(d, a, _squad()[:-40]),
       lambda d, a: [str(d / "squad" / "train.json"), "line"]),
    _c("squad_missing_question", lambda d, a: _finetune_squad(d, a, _squad(drop=["question"])),
       lambda d, a: [str(d / "squad" / "train.json"), "'question'"]),
    _c("squad_answer_outside_context", lambda d, a: _finetune_squad(
        d, a, _squad(answer="not in the text", start=500)),
       lambda d, a: [str(d / "squad" / "train.json"), "answer"]),
    _c("squad_features_other_vocab_finetune", lambda d, a: _finetune_squad_features(
        d, a, f"--vocab_file={_write(d / 'other_vocab.txt', chr(10).join(SPECIAL + ['hello']))}"),
       lambda d, a: [str(d / "features" / "manifest.json"), "another vocabulary"]),
    _c("squad_features_other_doc_stride_finetune", lambda d, a: _finetune_squad_features(
        d, a, '--hparams={"doc_stride": 64, "max_query_length": 16}'),
       lambda d, a: [str(d / "features" / "manifest.json"), "doc_stride 32",
                     "this run asks for 64"]),
    # Feature files damaged after their manifest was written (KERAS_BACKEND=jax): the npz's
    # size and sha256 against the manifest's, before any model is built.
    _c("squad_features_truncated_npz_jax", lambda d, a: _damaged_features(
        d, a, lambda f: _truncate(f / "squadv1_train.npz")),
       lambda d, a: [str(d / "features" / "squadv1_train.npz"), "cut short"]),
    _c("squad_features_bit_flip_npz_jax", lambda d, a: _damaged_features(
        d, a, lambda f: _flip_a_bit(f / "squadv1_dev.npz")),
       lambda d, a: [str(d / "features" / "squadv1_dev.npz"), "sha256",
                     str(d / "features" / "manifest.json")]),
    _c("squad_features_manifest_other_sha256_jax", lambda d, a: _damaged_features(
        d, a, _manifest_lists_another_sha256),
       lambda d, a: [str(d / "features" / "squadv1_train.npz"), "does not match",
                     hashlib.sha256(b"another build").hexdigest()]),
    # ---- checkpoints --------------------------------------------------------------------------
    _c("checkpoint_other_size_convert", lambda d, a: _convert(d, a["ckpt"], "--config=small"),
       lambda d, a: [str(a["ckpt"]), "another size"]),
    _c("checkpoint_truncated_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}", f"--init_checkpoint={_truncated_ckpt(d, a)}"),
       lambda d, a: [str(d / "ckpt" / "model.safetensors")]),
    _c("checkpoint_not_a_checkpoint_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}",
        f"--init_checkpoint={_write(d / 'notes' / 'README.txt', 'hello').parent}"),
       lambda d, a: [str(d / "notes"), "not a ConvBERT checkpoint"]),
    _c("checkpoint_hf_other_architecture_convert", lambda d, a: _convert(
        d, _hf_other_architecture(d)), lambda d, a: [str(d / "bert_hf" / "config.json"), "'bert'"]),
    _c("checkpoint_hf_other_architecture_attention", lambda d, a: _module("analysis.attention") + [
        f"--checkpoint=bert={_hf_other_architecture(d)}", f"--glue_dir={_glue(d)}", "--task=rte",
        f"--vocab_file={a['vocab']}", f"--output_dir={d / 'out' / 'attention'}"],
       lambda d, a: [str(d / "bert_hf" / "config.json"), "'bert'"]),
    # Fine-tuning reads a preset without KerasHub (model/checkpoints.py): no extra needed.
    _c("checkpoint_keras_hub_other_architecture_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}",
        f"--init_checkpoint={_preset_files(d, 'keras_hub>BertBackbone')}"),
        lambda d, a: [str(d / "preset" / "config.json"), "keras_hub>BertBackbone",
                      "not a ConvBERT"]),
    _keras_hub_c("checkpoint_keras_hub_missing_weights_convert", lambda d, a: _convert(
        d, _preset_files(d, weights=False)),
        lambda d, a: [str(d / "preset"), "missing model.weights.h5"]),
    _keras_hub_c("checkpoint_keras_hub_vocab_too_big_convert", lambda d, a: _convert(
        d, a["ckpt"], "--format=keras_hub", f"--vocab_file={_big_vocab(d)}"),
        lambda d, a: [str(d / "big_vocab.txt"), "205 tokens", "word embeddings"]),
    # ---- flags --------------------------------------------------------------------------------
    _c("flags_negative_steps_pretrain", lambda d, a: _pretrain(d, a, None, None, None,
                                                               "--num_train_steps=-5"),
       ["num_train_steps", "-5"]),
    _c("flags_negative_steps_lm", lambda d, a: _lm(d, a, "--num_train_steps=-1"),
       ["num_train_steps", "-1"]),
    _c("flags_batch_not_divisible_pretrain", lambda d, a: _pretrain(
        d, a, None, None, {"train_batch_size": 3}, "--distribution=mirrored",
        "--num_cpu_devices=2"), ["train_batch_size 3", "2"]),
    _c("flags_seq_above_positions_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}", "--max_seq_length=1024"), ["1024", "512"]),
    _c("flags_seq_above_positions_lm", lambda d, a: _lm(d, a, "--seq_len=4096"), ["4096"]),
    _c("flags_output_is_file_builder", lambda d, a: _builder(
        d, a, a["corpus"], None, _write(d / "out" / "shards", "an earlier file\n")),
       lambda d, a: [str(d / "out" / "shards")]),
    _c("flags_output_is_file_pretrain", lambda d, a: _pretrain(d, a) + [
        f"--model_dir={_write(d / 'out' / 'model_file', 'an earlier file')}"],
       lambda d, a: [str(d / "out" / "model_file")]),
    _c("flags_output_is_file_vocab", lambda d, a: _vocab_builder(
        d, a["corpus"], _write(d / "out" / "afile", "x") / "vocab.txt"),
       lambda d, a: [str(d / "out" / "afile")]),
    _c("flags_output_is_file_lm", lambda d, a: _lm(d, a) + [
        f"--model_dir={_write(d / 'out' / 'lm_file', 'an earlier file')}"],
       lambda d, a: [str(d / "out" / "lm_file")]),
    # Several processes on JAX (training/jax_distribution.py start_processes; loopback only): the
    # coordinator's port closed, and one shard for two processes that each read their own.
    _c("flags_coordinator_no_answer_pretrain", lambda d, a: _on_jax(_pretrain(
        d, a, _two_shards(d, a), None, None, f"--coordinator_address=127.0.0.1:{_closed_port()}",
        "--num_processes=2", "--process_id=1", "--distributed_timeout=2")),
       ["the coordinator 127.0.0.1:", "did not answer within 2s"]),
    _c("flags_coordinator_no_answer_finetune", lambda d, a: _on_jax(_finetune_squad_features(
        d, a, f"--coordinator_address=127.0.0.1:{_closed_port()}", "--num_processes=2",
        "--process_id=1", "--distributed_timeout=2")),
       ["the coordinator 127.0.0.1:", "did not answer within 2s"]),
    _c("flags_files_fewer_than_processes_pretrain", lambda d, a: _on_jax(_pretrain(
        d, a, None, None, None, "--coordinator_address=127.0.0.1:1", "--num_processes=2",
        "--process_id=0")),
       lambda d, a: [str(a["shards"]), "1 TFRecord file(s) do not split evenly over 2 processes"]),
    # Several-process flags that cannot work (training/jax_distribution.py check_process_flags): one
    # line naming the flag before any data is read or any process joined.
    _c("flags_coordinator_no_port_pretrain", lambda d, a: _on_jax(_pretrain(
        d, a, _two_shards(d, a), None, None, "--coordinator_address=localhost",
        "--num_processes=2", "--process_id=1")),
       ["--coordinator_address 'localhost': no port"]),
    _c("flags_coordinator_port_out_of_range_finetune", lambda d, a: _on_jax(
        _finetune_squad_features(d, a, "--coordinator_address=127.0.0.1:70000",
                                 "--num_processes=2", "--process_id=1")),
       ["--coordinator_address '127.0.0.1:70000'", "port 70000 is outside 1..65535"]),
    _c("flags_num_processes_zero_pretrain", lambda d, a: _on_jax(_pretrain(
        d, a, None, None, None, "--num_processes=0")), ["--num_processes", "got 0"]),
    _c("flags_process_id_out_of_range_finetune", lambda d, a: _on_jax(_finetune_squad_features(
        d, a, "--coordinator_address=127.0.0.1:1", "--num_processes=2", "--process_id=2")),
       ["--process_id 2 is outside 0..1"]),
    _c("flags_predict_file_with_features_finetune", lambda d, a: _on_jax(
        _finetune_squad_features(d, a, f"--predict_file={_write(d / 'dev.json', _squad())}")),
       ["--predict_file", "--features_dir"]),
    _c("flags_model_size_tiny_finetune", lambda d, a: _finetune(
        d, a, f"--data_dir={_glue(d)}", "--model_size=tiny"),
       ["--model_size 'tiny'", "small, medium-small, base"]),
    # ---- the builders as a Beam pipeline (--runner=DirectRunner) ------------------------------
    _beam_c("corpus_missing_dir_builder_beam", lambda d, a: _builder(d, a, d / "no_corpus"),
            lambda d, a: [str(d / "no_corpus"), "not found"]),
    _beam_c("corpus_bad_archive_owt_beam", lambda d, a: _owt_builder(d, a, {
        "urlsf_subset00-0_data.xz": _GOOD_ARCHIVE,
        "urlsf_subset00-1_data.xz": _GOOD_ARCHIVE[:len(_GOOD_ARCHIVE) // 2]}),
            lambda d, a: [str(d / "owt" / "openwebtext" / "urlsf_subset00-1_data.xz"),
                          "not a valid .xz"]),
    _beam_c("vocab_missing_builder_beam", lambda d, a: _builder(d, a, a["corpus"],
                                                                d / "nope.txt"),
            lambda d, a: [str(d / "nope.txt"), "not found"]),
    _beam_c("flags_output_is_file_builder_beam", lambda d, a: _builder(
        d, a, a["corpus"], None, _write(d / "out" / "shards", "an earlier file\n")),
        lambda d, a: [str(d / "out" / "shards"), "is a file"]),
]


def _truncated_shard(d, a):
    path = d / "shards" / "pretrain_data.tfrecord-0-of-1"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (a["shards"] / "pretrain_data.tfrecord-0-of-1").read_bytes()
    path.write_bytes(data[:len(data) - 100])   # the last record loses its end
    return path


def _garbage_shard(d):
    """Correct TFRecord framing around a record that is not a tf.train.Example."""
    import tensorflow as tf
    path = d / "shards" / "pretrain_data.tfrecord-0-of-1"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(b"\xff\xff\xff\xff not a protobuf")
    return path


def _truncated_ckpt(d, a):
    directory = _copy_tree(a["ckpt"], d / "ckpt")
    _truncate(directory / "model.safetensors")
    return directory


# ------------------------------------------------------------------------------------ runner
def _tree(root):
    """{relative path: (kind, sha256 of the bytes)} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = ("dir", None)
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


def _env():
    env = dict(os.environ)
    env.update(PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow",
               JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    return env


def _selected_cases(request):
    """The case ids of this module's collected tests (all, or what -k left)."""
    ids = []
    for item in request.session.items:
        if item.module is not None and item.module.__name__ == __name__ and \
                hasattr(item, "callspec") and "case_id" in item.callspec.params:
            ids.append(item.callspec.params["case_id"])
    return ids


@pytest.fixture(scope="module")
def results(request, tmp_path_factory, tf_assets, big_line):
    """case id -> dict(returncode, stderr, before, after, dir) for every selected case."""
    assets = dict(tf_assets, big_line=big_line)
    by_id = {p.values[0]: p.values[1:] for p in CASES}
    prepared = {}
    for case_id in _selected_cases(request):
        prepare, expected = by_id[case_id]
        d = tmp_path_factory.mktemp(case_id)
        _write(d / "earlier" / "result.json", '{"an": "earlier output"}\n')
        _write(d / "out" / "earlier_output.txt", "written by an earlier run\n")
        argv = [str(x) for x in prepare(d, assets)]
        wanted = expected(d, assets) if callable(expected) else list(expected)
        prepared[case_id] = (d, argv, wanted, _tree(d))

    def run(case_id):
        d, argv, _, _ = prepared[case_id]
        env = _env()
        if argv[:2] == _on_jax([]):     # in the environment: a zygote's fork (tests/zygote.py)
            env["KERAS_BACKEND"], argv = "jax", argv[2:]
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:   # e.g. training on an input that never ends
            stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else \
                (e.stderr or "")
            proc = subprocess.CompletedProcess(argv, None, "", stderr + f"\n(timed out after "
                                               f"{TIMEOUT_S}s)")
        proc.wall_s = time.monotonic() - start
        return case_id, proc

    out = {}
    with ThreadPoolExecutor(PARALLEL) as pool:
        for case_id, proc in pool.map(run, list(prepared)):
            d, argv, wanted, before = prepared[case_id]
            out[case_id] = dict(returncode=proc.returncode, stderr=proc.stderr,
                                stdout=proc.stdout, argv=argv, expected=wanted, before=before,
                                after=_tree(d), dir=d, wall_s=proc.wall_s)
    if os.environ.get("BAD_INPUTS_REPORT"):   # {case: [seconds, error line]} for the docs table
        with open(os.environ["BAD_INPUTS_REPORT"], "w") as f:
            json.dump({k: [round(v["wall_s"], 1), ([line for line in stderr_lines(v["stderr"])
                                                    if line.startswith("error: ")] or [""])[-1]]
                       for k, v in out.items()}, f, indent=1)
    return out


def stderr_lines(stderr):
    """stderr without blank lines and TensorFlow's start-up lines (`_NOISE`)."""
    return [line for line in stderr.splitlines()
            if line.strip() and not any(p.match(line) for p in _NOISE)]


@pytest.mark.parametrize("case_id, prepare, expected", CASES)
def test_bad_input_fails_cleanly(case_id, prepare, expected, results):
    r = results[case_id]
    context = f"\n$ {' '.join(r['argv'])}\nstderr:\n{r['stderr'][-3000:]}"
    assert r["returncode"] not in (0, None), context
    lines = stderr_lines(r["stderr"])
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, context
    assert lines[-1] == errors[0], context            # the error is the last thing said
    assert "Traceback" not in r["stderr"], context
    for fragment in r["expected"]:
        assert fragment in errors[0], f"{fragment!r} not in the error line{context}"
    added = sorted(set(r["after"]) - set(r["before"]))
    assert not added, f"partial output left: {added}{context}"
    changed = sorted(k for k in r["before"] if r["after"].get(k) != r["before"][k])
    assert not changed, f"earlier files changed or removed: {changed}{context}"


def test_catalogue_covers_every_group_and_is_documented():
    groups = {"corpus", "vocab", "hparams", "config", "tfrecord", "glue", "squad", "checkpoint",
              "flags"}
    ids = [p.values[0] for p in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 30
    assert groups == {i.split("_")[0] for i in ids}
    doc = (REPO_ROOT / "docs" / "RELIABILITY.md").read_text()
    missing = [i for i in ids if f"`{i}`" not in doc]
    assert not missing, f"docs/RELIABILITY.md lacks {missing}"
