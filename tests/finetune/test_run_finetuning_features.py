"""run_finetuning.py --features_dir: GLUE fine-tuning from `python -m finetune.features` files, on
Keras-on-JAX in a process where `import tensorflow` fails, against the TensorFlow run from the
GLUE TSVs (../shared/data/glue, skipped when absent).

One features directory (MRPC + STS-B, 32 tokens, 64 training examples, train/dev/test) is shared
by the module. The JAX run and the TensorFlow run (--data_dir) of the same tiny model and hparams
run side by side, predicting the first 96 dev examples of each task and the whole test sets; both
must write the same results files and TensorBoard tags. That JAX run has TensorFlow importable
and must not import it (tests/conftest.py TENSORFLOW_WATCH), and runs on 2 virtual CPU devices
(--num_cpu_devices=2: DataParallel, issue #50 item 2; the losses of 2 devices against one are
compared in tests/finetune/test_jax_finetune.py); the other JAX runs have
tensorflow and tensorflow_text made unimportable. The bad-input cases stop before any
model work (a few seconds each).
"""
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, TENSORFLOW_WATCH, shared_path

# One layer, as tests/finetune/test_run_finetuning.py (its docstring says why).
TINY_MODEL = {"hidden_size": 32, "embedding_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "num_groups": 1}
HPARAMS = {"model_hparam_overrides": TINY_MODEL, "train_batch_size": 8, "eval_batch_size": 64,
           "max_train_examples": 64, "max_eval_examples": 96, "log_every_steps": 1}
MAX_EVAL = HPARAMS["max_eval_examples"]   # dev rows predicted: one full batch and a padded one
MAX_LEN = 32
TASKS = ("mrpc", "sts")   # a classification and a regression task
TIMEOUT = 600

# The driver with tensorflow unimportable (as scripts/gpu_run.sh runs the JAX path); after it,
# no tensorflow module may have been loaded behind the None entries.
NO_TF_DRIVER = r"""
import os, runpy, sys
sys.modules["tensorflow"] = None          # any `import tensorflow` now raises ImportError
sys.modules["tensorflow_text"] = None
sys.argv = [sys.argv[1]] + sys.argv[2:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    loaded = [m for m, v in sys.modules.items()
              if m.split(".")[0] in ("tensorflow", "tensorflow_text") and v is not None]
    if loaded:
        print(f"error: tensorflow modules loaded: {loaded[:5]}", file=sys.stderr, flush=True)
        os._exit(3)
"""


def env(backend):
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3",
                KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")


def start_driver(args, backend, program=NO_TF_DRIVER):
    """run_finetuning.py in a subprocess (started, not waited for); on JAX run by `program`."""
    if backend == "jax":
        command = [sys.executable, "-c", program, str(REPO_ROOT / "run_finetuning.py")]
    else:
        command = [sys.executable, str(REPO_ROOT / "run_finetuning.py")]
    return subprocess.Popen(command + [str(a) for a in args], cwd=REPO_ROOT, env=env(backend),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_driver(args, backend="jax"):
    return finish(start_driver(args, backend))


def explain(proc):
    return f"rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def error_lines(proc):
    """stderr without TensorFlow's / absl's start-up chatter."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and not line.startswith(("I0000", "W0000", "WARNING: All log"))]


def common_args(model_dir, **extra):
    args = ["--model_dir", model_dir, "--hparams", json.dumps(HPARAMS),
            "--max_seq_length", MAX_LEN, "--max_train_steps", 3]
    for key, value in extra.items():
        args += [f"--{key}", value]
    return args


@pytest.fixture(scope="module")
def glue_dir():
    return shared_path("data", "glue")


@pytest.fixture(scope="module")
def vocab():
    return shared_path("data", "vocab", "bert-uncased-vocab.txt")


@pytest.fixture(scope="module")
def features(tmp_path_factory, glue_dir, vocab):
    """MRPC + STS-B train (first 64, both sentence orders), dev and test features."""
    pytest.importorskip("jax")
    out = tmp_path_factory.mktemp("features") / "glue32"
    proc = subprocess.run(
        [sys.executable, "-m", "finetune.features", f"--task_names={','.join(TASKS)}",
         f"--data_dir={glue_dir}", f"--vocab_file={vocab}", f"--max_seq_length={MAX_LEN}",
         "--max_train_examples=64", "--splits=train,dev,test", f"--output_dir={out}"],
        cwd=REPO_ROOT, env=env("tensorflow"), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, explain(proc)
    return out


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory, features, glue_dir, vocab):
    """{backend: (model_dir, process)}: the same tasks, hparams and 2 trials with --do_predict,
    from the features on JAX (without --vocab_file and --data_dir; 2 CPU devices; TensorFlow
    importable, exit status 3 had it been imported) and from the TSVs on TensorFlow, side by
    side."""
    root = tmp_path_factory.mktemp("runs")
    procs = {
        "tensorflow": start_driver(common_args(
            root / "tf", data_dir=glue_dir, vocab_file=vocab, task_names=",".join(TASKS),
            num_trials=2) + ["--do_predict"], "tensorflow"),
        "jax": start_driver(common_args(
            root / "jax", features_dir=features, task_names=",".join(TASKS), num_trials=2,
            num_cpu_devices=2) + ["--do_predict"], "jax", program=TENSORFLOW_WATCH),
    }
    return {backend: (root / ("tf" if backend == "tensorflow" else "jax"), finish(proc))
            for backend, proc in procs.items()}


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def files_under(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_jax_run_writes_what_the_tensorflow_run_writes(both_runs, glue_dir):
    from finetune.glue.readers import read_examples
    for backend, (_, proc) in both_runs.items():
        assert proc.returncode == 0, f"{backend}: {explain(proc)}"
        assert "WARNING: no --init_checkpoint" in proc.stderr and "RANDOM weights" in proc.stderr
        assert "GLUE dev (median over trials" in proc.stdout      # the table, several tasks
    (tf_dir, _), (jax_dir, jax_proc) = both_runs["tensorflow"], both_runs["jax"]
    assert "JAX" in jax_proc.stdout   # the JAX trainer's progress lines
    assert "JAX: 2 cpu device(s) (DataParallel)" in jax_proc.stdout
    assert "JAX compilation cache: " in jax_proc.stdout     # training/compile_cache.py
    results = files_under(tf_dir / "results")
    assert results == files_under(jax_dir / "results")
    for task in TASKS:   # trial suffixes and the summary (--num_trials 2)
        assert {f"{task}_dev_predictions_trial1.tsv", f"{task}_dev_metrics_trial2.json",
                f"{task}_dev_summary.json"} <= set(results)
    for model_dir in (tf_dir, jax_dir):
        record = json.loads((model_dir / "finetune_hparams.json").read_text())
        assert record["tasks"] == list(TASKS)
        assert record["hparams"]["max_seq_length"] == MAX_LEN

    for task in TASKS:
        dev_ids = [e.guid for e in read_examples(glue_dir, task, "dev")][:MAX_EVAL]
        assert len(dev_ids) == MAX_EVAL
        for trial in (1, 2):
            records = [json.loads((d / "results" / f"{task}_dev_metrics_trial{trial}.json")
                                  .read_text()) for d in (tf_dir, jax_dir)]
            assert set(records[0]["metrics"]) == set(records[1]["metrics"]) != set()
            for record in records:
                assert record["num_examples"] == len(dev_ids)
                assert all(math.isfinite(v) for v in record["metrics"].values())
            for d in (tf_dir, jax_dir):   # one row per dev example, in the dev file's order
                rows = read_tsv(d / "results" / f"{task}_dev_predictions_trial{trial}.tsv")
                assert rows[0] == ["index", "prediction", "label"]
                assert [r[0] for r in rows[1:]] == dev_ids
        summaries = [json.loads((d / "results" / f"{task}_dev_summary.json").read_text())
                     for d in (tf_dir, jax_dir)]
        assert set(summaries[0]["summary"]) == set(summaries[1]["summary"])


def tensorboard_scalars(log_dir):
    """{run directory: {tag: [steps]}} of the event files under `log_dir`, read by TensorBoard's
    own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    runs = {}
    for run in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        reader = EventAccumulator(str(run), size_guidance={"tensors": 0})
        reader.Reload()
        runs[run.name] = {tag: [e.step for e in reader.Tensors(tag)]
                          for tag in reader.Tags()["tensors"]}
        assert {reader.SummaryMetadata(t).plugin_data.plugin_name
                for t in runs[run.name]} == {"scalars"}
    return runs


def test_jax_run_never_imports_tensorflow_and_writes_tensorflows_scalars(both_runs):
    """Issue #50: TensorFlow importable, never imported; per trial the TensorBoard tags and steps
    of the TensorFlow run (train/ every step, dev_<task>/ at the last step), written without
    TensorFlow."""
    pytest.importorskip("tensorboard")
    (tf_dir, _), (jax_dir, jax_proc) = both_runs["tensorflow"], both_runs["jax"]
    assert jax_proc.returncode == 0 and "tensorflow was imported" not in jax_proc.stderr
    jax_runs = tensorboard_scalars(jax_dir / "tensorboard")
    assert jax_runs == tensorboard_scalars(tf_dir / "tensorboard")
    assert sorted(jax_runs) == [f"{t}_trial{k}" for t in TASKS for k in (1, 2)]
    assert jax_runs["mrpc_trial1"]["train/loss"] == [1, 2, 3]
    assert {"train/learning_rate", "train/grad_norm", "train/sequences_per_second",
            "dev_mrpc/accuracy"} <= set(jax_runs["mrpc_trial1"])
    assert jax_runs["sts_trial2"]["dev_sts/spearman"] == [3]


def test_jax_leaderboard_files(both_runs, glue_dir):
    from finetune.glue.leaderboard import validate_submission
    (tf_dir, _), (jax_dir, jax_proc) = both_runs["tensorflow"], both_runs["jax"]
    assert jax_proc.returncode == 0, explain(jax_proc)
    boards = [d / "results" / "leaderboard" for d in (tf_dir, jax_dir)]
    names = []
    for board in boards:
        with zipfile.ZipFile(board / "glue_submission.zip") as zf:
            names.append(sorted(zf.namelist()))
    assert names[0] == names[1] == ["MRPC.tsv", "STS-B.tsv"]
    # Without --data_dir the JAX run could not check them: they pass against the test sets.
    assert validate_submission(boards[1] / "glue_submission.zip", glue_dir,
                               require_all=False) == \
        validate_submission(boards[0] / "glue_submission.zip", glue_dir, require_all=False)
    assert "not checked (no --data_dir)" in jax_proc.stdout


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, vocab):
    """A tiny encoder saved natively, for Hugging Face and as a TF1 checkpoint, each with the
    shared vocab.txt beside it (the features are checked against that)."""
    pytest.importorskip("jax")
    from model import ConvBertConfig, ConvBertModel
    from model.checkpoints import save_pretrained
    root = tmp_path_factory.mktemp("checkpoints")
    config = ConvBertConfig(vocab_size=30522, max_position_embeddings=64, **TINY_MODEL)
    model = ConvBertModel(config)
    ones = np.ones((1, 8), np.int32)
    model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    out = {}
    for fmt in ("keras", "hf", "tf1"):
        directory = root / fmt
        save_pretrained(model, directory, format=fmt)
        shutil.copy(vocab, directory / "vocab.txt")
        out[fmt] = directory
    return out


@pytest.mark.parametrize("backend,fmt", [("jax", "keras"), ("jax", "hf"), ("jax", "tf1"),
                                         ("tensorflow", "keras")])
def test_checkpoint_without_training(backend, fmt, checkpoints, features, tmp_path):
    """Native, Hugging Face and TF1 checkpoints on JAX (no TensorFlow); --features_dir on the
    TensorFlow backend too. --do_train=false: the dev set is predicted as loaded. No
    --max_seq_length: the run takes the manifest's (32; the default 128 would be refused)."""
    model_dir = tmp_path / "out"
    hparams = {"eval_batch_size": 64, "max_eval_examples": 40}
    proc = run_driver(["--features_dir", features, "--task_names", "mrpc", "--model_dir",
                       model_dir, "--init_checkpoint", checkpoints[fmt],
                       "--hparams", json.dumps(hparams), "--do_train=false"], backend)
    assert proc.returncode == 0, explain(proc)
    assert f"encoder: {fmt} checkpoint" in proc.stdout
    assert "RANDOM" not in proc.stderr
    assert files_under(model_dir / "results") == ["mrpc_dev_metrics.json",
                                                  "mrpc_dev_predictions.tsv"]
    assert len(read_tsv(model_dir / "results" / "mrpc_dev_predictions.tsv")) == 41
    record = json.loads((model_dir / "finetune_hparams.json").read_text())
    assert record["vocab_file"] == str(checkpoints[fmt] / "vocab.txt")
    assert record["hparams"]["max_seq_length"] == MAX_LEN


BAD_INPUTS = {   # name: (extra flags, what the one error line says)
    "another max_seq_length": (["--max_seq_length", 64],
                               "manifest.json: features were made with max_seq_length 32, "
                               "this run asks for 64"),
    "another vocabulary": (["--vocab_file", "{other_vocab}"],
                           "manifest.json: features were made with another vocabulary"),
    "another casing": (["--hparams", json.dumps({**HPARAMS, "do_lower_case": False})],
                       "manifest.json: features were made with do_lower_case true, this run "
                       "asks for false"),
    "task not in the manifest": (["--task_names", "mrpc,rte"],
                                 "manifest.json: no features for rte train; the manifest has: "),
    "squad not in the manifest": (["--task_names", "squad"],
                                  "manifest.json: no features for squad train; the manifest "
                                  "has: "),
    "mixed_float16": (["--precision", "mixed_float16"],
                      "precision mixed_float16 (loss scaling) is TensorFlow-only"),
    "batch the devices do not divide": (["--num_cpu_devices", 2, "--train_batch_size", 3],
                                        "train_batch_size 3 is not divisible by the 2 devices"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_before_any_output(case, features, checkpoints, tmp_path):
    extra, expected = BAD_INPUTS[case]
    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n", encoding="utf-8")
    extra = [str(a).replace("{other_vocab}", str(other_vocab))
             .replace("{tf1}", str(checkpoints["tf1"])) for a in extra]
    model_dir = tmp_path / "out"
    args = common_args(model_dir, features_dir=features, task_names="mrpc,sts")
    proc = run_driver(args + extra)   # absl: the later flag wins
    assert proc.returncode == 1, explain(proc)
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("error: "), explain(proc)
    assert expected in lines[0]
    if "manifest" in expected:
        assert str(features / "manifest.json") in lines[0]
    assert not (model_dir / "results").exists()
    assert not (model_dir / "finetune_hparams.json").exists()


def test_jax_without_features_dir_says_so(glue_dir, vocab, tmp_path):
    proc = run_driver(common_args(tmp_path / "out", data_dir=glue_dir, vocab_file=vocab,
                                  task_names="mrpc"))
    assert proc.returncode == 1, explain(proc)
    lines = error_lines(proc)
    assert len(lines) == 1 and "needs the TensorFlow Keras backend" in lines[0]
    assert "--features_dir" in lines[0]
    assert not (tmp_path / "out").exists()
