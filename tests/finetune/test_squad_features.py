"""SQuAD without TensorFlow (issue #50 item 1): `python -m finetune.features --task_names=squadv1,
squad` writes the windows and what post-processing needs; `KERAS_BACKEND=jax run_finetuning.py
--features_dir` trains, predicts and scores them with `tensorflow` unimportable and writes the
files and metric keys of the TensorFlow run from the JSON files (../shared/data/squad, skipped
when absent). The TensorFlow-vs-JAX losses of the QA head are compared in
tests/finetune/test_jax_finetune.py.

The data: each official dev set split by article (the first one trains, the second is evaluated),
at 64 tokens, doc stride 32, questions cut to 16 tokens; a tiny random encoder, 3 steps.
"""
import importlib.util
import json

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, shared_path
from tests.finetune.test_run_finetuning_features import (TINY_MODEL, error_lines, explain,
                                                         files_under, finish, run_driver,
                                                         start_driver, tensorboard_scalars)

MAX_LEN = 64
QA = {"model_hparam_overrides": TINY_MODEL, "train_batch_size": 8, "predict_batch_size": 32,
      "max_train_examples": 32, "max_eval_examples": 24, "doc_stride": 32,
      "max_query_length": 16, "beam_size": 5, "qa_hidden_size": 32, "n_best_size": 5,
      "log_every_steps": 1}
TASKS = {"squadv1": "1.1", "squad": "2.0"}


def features_command(*args, timeout=300):
    import subprocess
    import sys
    from tests.finetune.test_run_finetuning_features import env
    return subprocess.run([sys.executable, "-m", "finetune.features", *map(str, args)],
                          cwd=REPO_ROOT, env=env("tensorflow"), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def vocab():
    return shared_path("data", "vocab", "bert-uncased-vocab.txt")


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_features_data")
    (root / "squad").mkdir()
    for version in TASKS.values():
        data = json.loads(shared_path("data", "squad", f"dev-v{version}.json").read_text())
        (root / "squad" / f"train-v{version}.json").write_text(
            json.dumps(dict(data, data=data["data"][:1])))
        (root / "squad" / f"dev-v{version}.json").write_text(
            json.dumps(dict(data, data=data["data"][1:2])))
    return root


@pytest.fixture(scope="module")
def features(tmp_path_factory, squad_dir, vocab):
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("squad_features") / "squad64"
    proc = features_command(f"--task_names={','.join(TASKS)}", f"--data_dir={squad_dir}",
                            f"--vocab_file={vocab}", f"--max_seq_length={MAX_LEN}",
                            "--doc_stride=32", "--max_query_length=16",
                            "--max_train_examples=32", f"--output_dir={out}")
    assert proc.returncode == 0, explain(proc)
    return out


def driver_args(model_dir, **extra):
    args = ["--task_names", ",".join(TASKS), "--model_dir", model_dir, "--hparams",
            json.dumps(QA), "--max_seq_length", MAX_LEN, "--max_train_steps", 3]
    for key, value in extra.items():
        args += [f"--{key}", value]
    return args


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory, features, squad_dir, vocab):
    """{backend: (model_dir, process)}: SQuAD 1.1 and 2.0 from the features on JAX (tensorflow
    unimportable, exit status 3 had any of it loaded) and from the JSON files on TensorFlow,
    side by side."""
    root = tmp_path_factory.mktemp("squad_runs")
    procs = {"jax": start_driver(driver_args(root / "jax", features_dir=features), "jax"),
             "tensorflow": start_driver(driver_args(root / "tf", data_dir=squad_dir,
                                                    vocab_file=vocab), "tensorflow")}
    return {backend: (root / ("jax" if backend == "jax" else "tf"), finish(proc))
            for backend, proc in procs.items()}


def test_features_are_the_drivers_windows(features, squad_dir, vocab):
    """The stored windows are what the TensorFlow run tokenizes (finetune/qa/squad_data.py), and
    the dev file carries the SQuAD JSON the examples and gold answers come from."""
    from data.tokenization import load_tokenizer
    from finetune import feature_files
    from finetune.qa import squad_data
    manifest = feature_files.read_manifest(features)
    assert (manifest["max_seq_length"], manifest["doc_stride"],
            manifest["max_query_length"], manifest["max_train_examples"]) == (MAX_LEN, 32, 16, 32)
    assert sorted(manifest["files"]) == ["squad_dev", "squad_train", "squadv1_dev",
                                         "squadv1_train"]
    tokenizer = load_tokenizer(str(vocab))
    for task, version in TASKS.items():
        for split, training in (("train", True), ("dev", False)):
            path = squad_dir / "squad" / f"{split}-v{version}.json"
            examples = squad_data.read_squad_examples(str(path), is_training=training)
            if training:
                examples = examples[:32]
            want = squad_data.convert_examples_to_features(examples, tokenizer, MAX_LEN, 32, 16,
                                                           is_training=training)
            got, dataset = feature_files.load_squad_split(features, task, split, manifest,
                                                          with_dataset=not training)
            for key in feature_files.SQUAD_ARRAYS:
                np.testing.assert_array_equal(getattr(got, key), getattr(want, key), key)
            if not training:
                assert dataset == json.loads(path.read_text())
            entry = manifest["files"][f"{task}_{split}"]
            assert entry["examples"] == len(want) and entry["kind"] == "squad"


def test_jax_squad_writes_what_tensorflow_writes(both_runs, squad_dir):
    from finetune.qa import squad_eval
    for backend, (_, proc) in both_runs.items():
        assert proc.returncode == 0, f"{backend}: {explain(proc)}"
    (tf_dir, _), (jax_dir, jax_proc) = both_runs["tensorflow"], both_runs["jax"]
    assert "; JAX)" in jax_proc.stdout   # the JAX trainer's progress lines
    assert files_under(tf_dir / "results") == files_under(jax_dir / "results")
    assert sorted(p.name for p in (jax_dir / "tensorboard").iterdir()) == sorted(TASKS)
    if importlib.util.find_spec("tensorboard"):   # the same tags at the same steps
        jax_runs = tensorboard_scalars(jax_dir / "tensorboard")
        assert jax_runs == tensorboard_scalars(tf_dir / "tensorboard")
        assert jax_runs["squad"]["train/loss"] == [1, 2, 3]
        assert jax_runs["squad"]["dev_squad/best_f1"] == [3]
    for task, version in TASKS.items():
        assert f"{task}: step 3/3 (100.0%)" in jax_proc.stdout
        records = [json.loads((d / "results" / f"{task}_metrics.json").read_text())
                   for d in (tf_dir, jax_dir)]
        assert set(records[0]) == set(records[1])
        assert set(records[0]["metrics"]) == set(records[1]["metrics"]) != set()
        for key in ("task", "version", "num_questions", "num_windows", "train_steps"):
            assert records[0][key] == records[1][key], key
        assert records[1]["train_steps"] == 3 and records[1]["num_questions"] == 24
        # The JAX metrics are the official evaluation of the files it wrote.
        results = jax_dir / "results"
        predictions = json.loads((results / f"{task}_predictions.json").read_text())
        data = json.loads((squad_dir / "squad" / f"dev-v{version}.json").read_text())
        qids = [qa["id"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]][:24]
        assert list(predictions) == qids
        subset = [dict(a, paragraphs=[dict(p, qas=[qa for qa in p["qas"] if qa["id"] in qids])
                                      for p in a["paragraphs"]]) for a in data["data"]]
        if version == "1.1":
            expected = squad_eval.evaluate_v1(subset, predictions, log=lambda m: None)
        else:   # best no-answer threshold, as on TensorFlow
            null_odds = json.loads((results / f"{task}_null_odds.json").read_text())
            expected = squad_eval.evaluate_v2(subset, predictions, null_odds, -2.75,
                                              log=lambda m: None)
            assert "best_f1_thresh" in records[1]["metrics"]
        assert records[1]["metrics"] == pytest.approx(expected)


BAD_INPUTS = {   # name: (extra flags, what the one error line says)
    "another vocabulary": (["--vocab_file", "{other_vocab}"],
                           "manifest.json: features were made with another vocabulary"),
    "another doc_stride": (["--hparams", json.dumps({**QA, "doc_stride": 64})],
                           "manifest.json: features were made with doc_stride 32, this run asks "
                           "for 64"),
    "another max_query_length": (["--hparams", json.dumps({**QA, "max_query_length": 24})],
                                 "manifest.json: features were made with max_query_length 16, "
                                 "this run asks for 24"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_squad_features_are_one_line_before_any_output(case, features, tmp_path):
    extra, expected = BAD_INPUTS[case]
    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n", encoding="utf-8")
    extra = [str(a).replace("{other_vocab}", str(other_vocab)) for a in extra]
    model_dir = tmp_path / "out"
    proc = run_driver(driver_args(model_dir, features_dir=features) + extra)   # later flag wins
    assert proc.returncode == 1, explain(proc)
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("error: "), explain(proc)
    assert expected in lines[0] and str(features / "manifest.json") in lines[0]
    assert not model_dir.exists()


def test_sentencepiece_features_on_jax(squad_dir, tmp_path):
    """--sp_model in the features command as in the drivers; the JAX run checks the model's
    sha256 (--sp_model) and predicts SQuAD 1.1's dev windows without training."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("jax")
    from data.vocab import learn_sentencepiece_model
    data = json.loads((squad_dir / "squad" / "train-v1.1.json").read_text())
    texts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    sp_model = learn_sentencepiece_model(texts * 4, str(tmp_path / "sp"), vocab_size=300)
    out = tmp_path / "sp_features"
    proc = features_command("--task_names=squadv1", f"--data_dir={squad_dir}",
                            f"--sp_model={sp_model}", "--max_seq_length=64", "--doc_stride=32",
                            "--max_query_length=16", "--splits=dev", f"--output_dir={out}")
    assert proc.returncode == 0, explain(proc)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vocab_file"] == str(sp_model) and manifest["vocab_size"] == 300
    model_dir = tmp_path / "run"
    hparams = {**QA, "max_eval_examples": 8}
    proc = run_driver(["--features_dir", out, "--task_names", "squadv1", "--sp_model", sp_model,
                       "--model_dir", model_dir, "--hparams", json.dumps(hparams),
                       "--do_train=false"])
    assert proc.returncode == 0, explain(proc)
    assert files_under(model_dir / "results") == [
        "squadv1_metrics.json", "squadv1_nbest_predictions.json", "squadv1_predictions.json"]
    record = json.loads((model_dir / "finetune_hparams.json").read_text())
    assert record["sp_model"] == str(sp_model) and record["vocab_file"] is None


def test_a_run_takes_the_features_shapes_it_does_not_ask_for():
    """Without --max_seq_length / SQuAD keys in --hparams the run adopts the manifest's (a
    default that refused the features it was handed was a first-hour rough edge); what it asks
    for is kept, and then checked against the manifest."""
    from finetune.hparams import load_hparams
    from finetune.run import adopt_manifest_shapes
    manifest = {"max_seq_length": 64, "doc_stride": 32, "max_query_length": 16}
    hp = adopt_manifest_shapes(load_hparams(None), manifest)
    assert (hp.max_seq_length, hp.doc_stride, hp.max_query_length) == (64, 32, 16)
    hp = adopt_manifest_shapes(load_hparams('{"doc_stride": 48}', max_seq_length=128), manifest,
                               asked={"doc_stride": 48})
    assert (hp.max_seq_length, hp.doc_stride, hp.max_query_length) == (128, 48, 16)
    glue_only = adopt_manifest_shapes(load_hparams(None), {"max_seq_length": 128})
    assert (glue_only.doc_stride, glue_only.max_query_length) == (128, 64)
