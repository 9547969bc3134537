"""run_finetuning.py end to end on the real GLUE data (../shared/data/glue) with a tiny model.

Every run uses a 1-layer, 32-wide ConvBERT (via --hparams model_hparam_overrides), sequences of
32 tokens and a few steps, so the whole file takes well under two minutes on 2 CPU cores. One
layer: a driver's time here is tracing the steps, which grows with the layers (a 3-task run
14.4 -> 11.8 s CPU from 2 layers to 1), and what these tests check does not depend on the count;
several layers (their names, layer-wise rates, both cores' agreement) are checked in
tests/finetune/test_jax_finetune.py, tests/training/test_tasks_both_cores.py and tests/model/.
"""
import csv
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, hf_reference_dir, shared_path, tensorboard_series
from tests.zygote import script_python

TINY_MODEL = {"hidden_size": 32, "embedding_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64, "num_groups": 1}
TINY_HPARAMS = {"model_hparam_overrides": TINY_MODEL, "train_batch_size": 8,
                "eval_batch_size": 64, "max_train_examples": 64, "max_eval_examples": 96,
                "log_every_steps": 1}
TIMEOUT = 600


def run_cli(args, check=True):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "run_finetuning.py"), *map(str, args)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    if check and proc.returncode != 0:
        raise AssertionError(f"run_finetuning failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                             f"\n{proc.stderr[-3000:]}")
    return proc


def base_args(model_dir, glue_dir, vocab, hparams=None, **extra):
    args = ["--data_dir", glue_dir, "--vocab_file", vocab, "--model_dir", model_dir,
            "--hparams", json.dumps(hparams or TINY_HPARAMS), "--max_seq_length", 32,
            "--max_train_steps", 3]
    for key, value in extra.items():
        args += [f"--{key}", value]
    return args


def read_dev_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["index", "prediction", "label"]
    return rows[1:]


def check_metrics_match_tsv(results, task, suffix=""):
    """The metrics JSON equals the metrics recomputed from the predictions TSV."""
    from finetune.glue.metrics import compute_metrics
    from finetune.glue.tasks import get_task
    rows = read_dev_tsv(results / f"{task}_dev_predictions{suffix}.tsv")
    record = json.loads((results / f"{task}_dev_metrics{suffix}.json").read_text())
    assert record["num_examples"] == len(rows) > 0
    spec = get_task(task)
    if spec.is_regression:
        preds = np.array([float(r[1]) for r in rows])
        labels = np.array([float(r[2]) for r in rows])
        tol = 0.05  # the TSV keeps 6 decimals of near-constant random-model scores
    else:
        preds = np.array([r[1] for r in rows])
        labels = np.array([r[2] for r in rows])
        assert set(preds) <= set(spec.label_list) and set(labels) <= set(spec.label_list)
        tol = 1e-9
    recomputed = compute_metrics(task, preds, labels)
    assert set(recomputed) == set(record["metrics"])
    for name, value in recomputed.items():
        assert abs(value - record["metrics"][name]) <= tol, (task, name)
    return rows, record


@pytest.fixture(scope="module")
def glue_dir():
    return shared_path("data", "glue")


@pytest.fixture(scope="module")
def vocab():
    return shared_path("data", "vocab", "bert-uncased-vocab.txt")


# ------------------------------------------------------------------------ random init + predict
@pytest.fixture(scope="module")
def mixed_glue_dir(tmp_path_factory, glue_dir):
    """Real SST-2 / CoLA / STS-B (links to ../shared) plus tiny synthetic MNLI (+ AX) and QQP,
    which ../shared lacks, so MNLI's matched/mismatched/AX paths run too."""
    from tests.finetune.test_glue_readers import make_mnli, make_qqp
    root = tmp_path_factory.mktemp("glue_mixed")
    for name in ("SST-2", "CoLA", "STS-B"):
        (root / name).symlink_to(glue_dir / name, target_is_directory=True)
    make_mnli(root)
    make_qqp(root)
    return root


@pytest.fixture(scope="module")
def random_run(tmp_path_factory, mixed_glue_dir, vocab):
    model_dir = tmp_path_factory.mktemp("ft_random")
    proc = run_cli(base_args(model_dir, mixed_glue_dir, vocab, task_names="sst,cola,sts,mnli,qqp")
                   + ["--do_predict"])
    return model_dir, proc


def test_random_weights_are_warned(random_run):
    _, proc = random_run
    assert "WARNING: no --init_checkpoint" in proc.stderr
    assert "RANDOM weights" in proc.stderr


@pytest.mark.parametrize("task", ["sst", "cola", "sts"])
def test_dev_files_consistent(random_run, glue_dir, task):  # the real data
    from finetune.glue.readers import read_examples
    model_dir, _ = random_run
    results = model_dir / "results"
    rows, record = check_metrics_match_tsv(results, task)
    # The TSV's index column holds the dev file's ids, in order (first max_eval_examples).
    dev_ids = [e.guid for e in read_examples(glue_dir, task, "dev")][:len(rows)]
    assert [r[0] for r in rows] == dev_ids
    assert record["trial"] is None
    assert (model_dir / "tensorboard" / task).is_dir()
    assert any(p.name.startswith("events.out.tfevents") for p in (model_dir / "tensorboard"
                                                                 / task).iterdir())


def test_tensorboard_scalars(random_run):
    import tensorflow as tf
    model_dir, _ = random_run
    tags = {}
    for path in sorted((model_dir / "tensorboard" / "sst").glob("events.out.tfevents*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags[value.tag] = (event.step, value.metadata.plugin_data.plugin_name)
    assert tags["train/loss"] == (3, "scalars")
    assert {"train/learning_rate", "train/grad_norm", "dev_sst/accuracy"} <= set(tags)


def test_progress_lines_and_table(random_run):
    _, proc = random_run
    assert "sst: step 3/3 (100.0%) loss" in proc.stdout
    assert "ETA" in proc.stdout
    # Several GLUE tasks: the paper-style dev table is printed at the end.
    assert "CoLA" in proc.stdout and "Avg" in proc.stdout


def test_leaderboard_files_validated(random_run, mixed_glue_dir):
    from finetune.glue.leaderboard import SUBMISSION_FILES, validate_submission
    from finetune.glue.readers import read_examples
    model_dir, _ = random_run
    board = model_dir / "results" / "leaderboard"
    names = {"SST-2.tsv", "CoLA.tsv", "STS-B.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv",
             "QQP.tsv"}
    rows = validate_submission(board, mixed_glue_dir, require_all=False)
    assert set(rows) == names
    for name in names:
        task, split = SUBMISSION_FILES[name[:-4]]
        test_ids = [e.guid for e in read_examples(mixed_glue_dir, task, split)]
        lines = (board / name).read_text().splitlines()
        assert lines[0] == "index\tprediction"
        assert [line.split("\t")[0] for line in lines[1:]] == test_ids
    with zipfile.ZipFile(board / "glue_submission.zip") as zf:
        assert sorted(zf.namelist()) == sorted(names)
    # The zip validates too (the server reads the zip).
    assert validate_submission(board / "glue_submission.zip", mixed_glue_dir, require_all=False)


def test_mnli_matched_and_mismatched_dev(random_run):
    model_dir, _ = random_run
    results = model_dir / "results"
    check_metrics_match_tsv(results, "mnli-m")
    rows, _ = check_metrics_match_tsv(results, "mnli-mm")
    assert len(rows) == 4   # the synthetic dev_mismatched
    check_metrics_match_tsv(results, "qqp")


def test_print_glue_table(random_run):
    model_dir, _ = random_run
    proc = run_cli(["--print_glue_table", "--model_dir", model_dir])
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].split()[:2] == ["CoLA", "SST"]
    cola = json.loads((model_dir / "results" / "cola_dev_metrics.json").read_text())
    assert lines[-1].split()[0] == f"{cola['metrics']['mcc']:.1f}"


# ------------------------------------------------------------------------ checkpoints
# A tiny HF config with an E->H projection and grouped FFN layers (transformers writes it).
HF_TINY_CONFIG = {"vocab_size": 30522, "hidden_size": 32, "embedding_size": 16,
                  "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                  "head_ratio": 2, "conv_kernel_size": 9, "num_groups": 2,
                  "max_position_embeddings": 128, "pad_token_id": 0}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """* "hf": a Hugging Face ConvBERT dir written by transformers itself
      (../shared/tools/hf_reference.py gen, with reference outputs);
    * "pretrain": a pre-training-style model_dir: our native export under discriminator/ plus
      the hparams.json a pre-training run writes (recording max_seq_length 32)."""
    import keras
    from model import ConvBertConfig, ConvBertModel
    root = tmp_path_factory.mktemp("ckpts")
    hf_dir = hf_reference_dir(HF_TINY_CONFIG, root, heads="")
    keras.utils.set_random_seed(7)
    model = ConvBertModel(ConvBertConfig.from_size("small", **TINY_MODEL))
    pretrain_dir = root / "pretrain_model_dir"
    model.save_pretrained(pretrain_dir / "discriminator")
    (pretrain_dir / "hparams.json").write_text(json.dumps({"max_seq_length": 32}))
    weights = {name: np.asarray(v) for name, v in model.weight_map().items()}
    return {"hf": hf_dir, "pretrain": pretrain_dir, "weights": weights}


def test_encoder_source_loads_hf_dir(checkpoints):
    """The encoder the driver builds from the HF dir reproduces transformers' own outputs."""
    from finetune import encoder_source
    from finetune.hparams import FinetuneHParams
    source = encoder_source.EncoderSource(str(checkpoints["hf"]), FinetuneHParams())
    assert source.format == "hf"
    assert (source.config.embedding_size, source.config.num_groups) == (16, 2)
    encoder = source.build()
    inputs = np.load(checkpoints["hf"] / "inputs.npz")
    expected = np.load(checkpoints["hf"] / "outputs.npz")["model.last_hidden_state"]
    out = encoder({"input_ids": inputs["input_ids"].astype(np.int32),
                   "input_mask": inputs["attention_mask"].astype(np.int32),
                   "segment_ids": inputs["token_type_ids"].astype(np.int32)}, training=False)
    np.testing.assert_allclose(np.asarray(out), expected, atol=2e-4, rtol=0)


def test_encoder_source_loads_pretraining_dir(checkpoints):
    from finetune import encoder_source
    from finetune.hparams import FinetuneHParams
    source = encoder_source.EncoderSource(str(checkpoints["pretrain"]), FinetuneHParams())
    assert source.format == "keras"
    encoder = source.build()
    for name, variable in encoder.weight_map().items():
        np.testing.assert_array_equal(np.asarray(variable), checkpoints["weights"][name],
                                      err_msg=name)


def test_trained_length_recorded_in_pretraining_dir(checkpoints):
    from finetune import encoder_source
    from finetune.hparams import FinetuneHParams
    source = encoder_source.EncoderSource(str(checkpoints["pretrain"]), FinetuneHParams())
    trained, where = source.trained_max_seq_length()
    assert trained == 32 and where.endswith("hparams.json")


def test_finetune_from_hf_checkpoint(tmp_path, checkpoints, glue_dir, vocab):
    hparams = {k: v for k, v in TINY_HPARAMS.items() if k != "model_hparam_overrides"}
    proc = run_cli(base_args(tmp_path, glue_dir, vocab, hparams, task_names="mrpc",
                             init_checkpoint=checkpoints["hf"]))
    assert "encoder: hf checkpoint" in proc.stdout and "(2 layers, hidden 32)" in proc.stdout
    assert "RANDOM" not in proc.stderr
    assert "mrpc: 128 training examples (both sentence orders)" in proc.stdout
    check_metrics_match_tsv(tmp_path / "results", "mrpc")


def test_finetune_from_pretraining_dir_with_trials(tmp_path, checkpoints, glue_dir, vocab):
    hparams = {k: v for k, v in TINY_HPARAMS.items() if k != "model_hparam_overrides"}
    args = base_args(tmp_path, glue_dir, vocab, hparams, task_names="rte",
                     init_checkpoint=checkpoints["pretrain"], num_trials=2)
    args[args.index("--max_seq_length") + 1] = 48  # longer than the recorded pre-training 32
    proc = run_cli(args)
    assert "encoder: keras checkpoint" in proc.stdout
    assert "never trained" in proc.stderr and "hparams.json" in proc.stderr
    results = tmp_path / "results"
    trial_metrics = []
    for trial in (1, 2):
        _, record = check_metrics_match_tsv(results, "rte", f"_trial{trial}")
        assert record["trial"] == trial
        trial_metrics.append(record["metrics"]["accuracy"])
    assert not (results / "rte_dev_metrics.json").exists()
    summary = json.loads((results / "rte_dev_summary.json").read_text())["summary"]["accuracy"]
    assert summary["n"] == 2
    assert summary["median"] == pytest.approx(float(np.median(trial_metrics)))
    assert summary["mean"] == pytest.approx(float(np.mean(trial_metrics)))
    assert summary["std"] == pytest.approx(float(np.std(trial_metrics, ddof=1)))
    assert "median of 2" in proc.stdout


# ------------------------------------------------------------------------ bad input
def _assert_one_line_error(proc, *needles):
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert str(needle) in last, (needle, last)


def test_error_missing_bucket_init_checkpoint_not_written_locally(tmp_path, glue_dir, vocab):
    """Every path may be a bucket (base/fileio.py; see test_ram_filesystem.py). A missing one is
    one line and nothing is written, locally or elsewhere (ram:// is in-process: no network)."""
    proc = run_cli(["--data_dir", glue_dir, "--vocab_file", vocab, "--task_names", "rte",
                    "--model_dir", tmp_path / "out", "--init_checkpoint", "ram://nope/ckpt"],
                   check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: ram://nope/ckpt: --init_checkpoint not found")
    assert "Traceback" not in proc.stderr
    assert not (REPO_ROOT / "ram:").exists() and not (tmp_path / "out").exists()


def test_error_missing_task_directory(tmp_path, vocab):
    (tmp_path / "glue").mkdir()
    proc = run_cli(["--data_dir", tmp_path / "glue", "--task_names", "cola", "--vocab_file",
                    vocab, "--model_dir", tmp_path / "out"], check=False)
    _assert_one_line_error(proc, tmp_path / "glue" / "CoLA")


# A GLUE row with the wrong number of columns, or a label outside the task's list: one line
# naming file:line, exit 1, nothing written - cases glue_wrong_columns and glue_unknown_label of
# tests/test_bad_inputs.py (the same reader for train.tsv and dev.tsv).


def test_error_unknown_task_name(tmp_path, glue_dir, vocab):
    proc = run_cli(["--data_dir", glue_dir, "--task_names", "sst,nosuchtask", "--vocab_file",
                    vocab, "--model_dir", tmp_path / "out"], check=False)
    _assert_one_line_error(proc, "nosuchtask")


def test_error_unknown_hparam(tmp_path, glue_dir, vocab):
    proc = run_cli(["--data_dir", glue_dir, "--task_names", "sst", "--vocab_file", vocab,
                    "--model_dir", tmp_path / "out", "--hparams", '{"learning_rat": 1e-4}'],
                   check=False)
    _assert_one_line_error(proc, "learning_rat")


def test_error_bad_checkpoint(tmp_path, glue_dir, vocab):
    proc = run_cli(["--data_dir", glue_dir, "--task_names", "sst", "--vocab_file", vocab,
                    "--model_dir", tmp_path / "out", "--init_checkpoint", tmp_path / "nope"],
                   check=False)
    _assert_one_line_error(proc, tmp_path / "nope")


# ------------------------------------------------------------------------ hparams (in process)
def test_hparams_defaults_per_size_and_task():
    from finetune.hparams import FinetuneHParams
    hp = FinetuneHParams()
    assert hp.for_task("cola").learning_rate == 3e-4
    assert FinetuneHParams(model_size="medium-small").for_task("sst").learning_rate == 3e-4
    assert FinetuneHParams(model_size="base").for_task("sst").learning_rate == 1e-4
    assert hp.for_task("cola").num_train_epochs == 3
    assert hp.for_task("rte").num_train_epochs == 10
    assert hp.for_task("sts").num_train_epochs == 10
    assert hp.for_task("squad").num_train_epochs == 2
    assert hp.for_task("squad").max_seq_length == 512
    assert hp.for_task("mrpc").max_seq_length == 128
    assert (hp.layerwise_lr_decay, hp.weight_decay_rate, hp.warmup_proportion,
            hp.train_batch_size) == (0.8, 0.01, 0.1, 32)


def test_hparams_overrides(tmp_path):
    from finetune.hparams import HParamsError, load_hparams
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"model_size": "base", "learning_rate": 2e-5, "num_trials": 3}))
    hp = load_hparams(str(path), learning_rate=5e-5)   # explicit flags beat --hparams
    assert (hp.model_size, hp.learning_rate, hp.num_trials) == ("base", 5e-5, 3)
    with pytest.raises(HParamsError, match="unknown hparam"):
        load_hparams('{"nope": 1}')
    with pytest.raises(HParamsError, match="integer"):
        load_hparams('{"train_batch_size": "big"}')
    with pytest.raises(HParamsError, match="model_size"):
        load_hparams('{"model_size": "huge"}')
    with pytest.raises(HParamsError, match="invalid JSON"):
        load_hparams('{"model_size": }')


def test_glue_scripts_exist_and_use_paper_hparams():
    """Each task script runs run_finetuning.py with its task and the paper's epochs / lr."""
    scripts = REPO_ROOT / "scripts" / "glue"
    for task in ("cola", "sst", "mrpc", "sts", "qqp", "mnli", "qnli", "rte", "wnli"):
        for size, lr in (("small", "3e-4"), ("base", "1e-4")):
            env = dict(os.environ, PYTHON="echo", MODEL_SIZE=size)
            out = subprocess.run(["bash", str(scripts / f"{task}.sh"), "--do_predict"], env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
            assert out[0] == "run_finetuning.py" and out[-1] == "--do_predict"
            flags_ = dict(zip(out[1:-1:2], out[2:-1:2]))
            assert flags_["--task_names"] == task and flags_["--learning_rate"] == lr
            assert flags_["--num_train_epochs"] == ("10" if task in ("rte", "sts") else "3")
            assert (flags_["--train_batch_size"], flags_["--max_seq_length"]) == ("32", "128")
    assert "print_glue_table" in (scripts / "run_all.sh").read_text()
    for name in ("squad_v1.sh", "squad_v2.sh"):
        assert "run_finetuning.py" in (REPO_ROOT / "scripts" / name).read_text()


def test_squad_scripts_pass_the_recipe():
    """scripts/squad_v{1,2}.sh (sharing scripts/squad_common.sh): task, per-size lr, 2 epochs,
    batch 32, length 512, optional checkpoint, and extra flags passed through last."""
    for name, task in (("squad_v1.sh", "squadv1"), ("squad_v2.sh", "squad")):
        for size, lr in (("small", "3e-4"), ("base", "1e-4")):
            env = dict(os.environ, PYTHON="echo", MODEL_SIZE=size, INIT_CHECKPOINT="ckpt")
            env.pop("LR", None)
            out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / name), "--do_predict"],
                                 env=env, capture_output=True, text=True, check=True).stdout.split()
            assert out[0] == "run_finetuning.py" and out[-1] == "--do_predict"
            flags_ = dict(zip(out[1:-1:2], out[2:-1:2]))
            assert flags_["--task_names"] == task and flags_["--learning_rate"] == lr
            assert (flags_["--num_train_epochs"], flags_["--train_batch_size"],
                    flags_["--max_seq_length"]) == ("2", "32", "512")
            assert flags_["--init_checkpoint"] == "ckpt"
            assert flags_["--model_dir"] == f"out/{task}_{size}"


# ------------------------------------------------------------------------ trainer (in process)
def test_trainer_trials_reset_weights_head_and_optimizer():
    """Trial k > 1 reuses the traced step: encoder back to the checkpoint, a new head, a zeroed
    optimizer (step 0), and training still moves the weights; the LR follows the schedule."""
    import keras
    from finetune.classification_head import ClassificationHead
    from finetune.hparams import FinetuneHParams
    from model import ConvBertConfig, ConvBertModel
    from finetune import glue_task
    from finetune.trainer import Trainer

    keras.utils.set_random_seed(3)
    encoder = ConvBertModel(ConvBertConfig.from_size("small", vocab_size=100, **TINY_MODEL))
    head = ClassificationHead(2, name="head")
    head.build((None, None, 32))
    hp = FinetuneHParams(train_batch_size=4, log_every_steps=100).for_task("sst")
    forward, loss = glue_task.glue_model_fns("sst")
    lines = []
    trainer = Trainer(encoder, head, forward, loss, hp, "sst", log=lines.append)
    rng = np.random.default_rng(0)
    features = {"input_ids": rng.integers(5, 100, (16, 12)).astype(np.int32),
                "input_mask": np.ones((16, 12), np.int32),
                "segment_ids": np.zeros((16, 12), np.int32),
                "label_ids": rng.integers(0, 2, 16).astype(np.int32)}
    snapshot = {n: np.asarray(v).copy() for n, v in encoder.weight_map().items()}
    trainer.start(None, seed=3)   # trial 1: the model as built
    trainer.train(features, hp, seed=0, total_steps=4)
    assert int(trainer.optimizer.iterations.numpy()) == 4
    # Layer-wise LR: the head gets the full rate, embeddings decay^(L+2) (L layers).
    assert trainer.optimizer.lr_multiplier(head.dense.kernel) == pytest.approx(1.0)
    word = encoder.weight_map()["electra/embeddings/word_embeddings"]
    assert trainer.optimizer.lr_multiplier(word) == pytest.approx(
        0.8 ** (TINY_MODEL["num_hidden_layers"] + 2))
    moved = np.asarray(encoder.weight_map()["electra/encoder/layer_0/attention/self/query/kernel"])
    assert not np.allclose(moved, snapshot["electra/encoder/layer_0/attention/self/query/kernel"])
    head_before = np.asarray(head.dense.kernel).copy()
    step = trainer._train_step
    trainer.start(snapshot, seed=4)
    for name, variable in encoder.weight_map().items():
        np.testing.assert_array_equal(np.asarray(variable), snapshot[name])
    assert int(trainer.optimizer.iterations.numpy()) == 0
    assert not np.allclose(np.asarray(head.dense.kernel), head_before)
    np.testing.assert_array_equal(np.asarray(head.dense.bias), 0.0)
    result = trainer.train(features, hp, seed=1, total_steps=4)
    assert trainer._train_step is step   # not traced again
    assert int(trainer.optimizer.iterations.numpy()) == 4 and np.isfinite(result["final_loss"])
    out = trainer.predict(features, batch_size=6)   # 16 rows: last batch padded
    assert out["logits"].shape == (16, 2)


def test_run_all_leaves_one_submission_zip(tmp_path, glue_dir, vocab):
    """`TASKS="rte wnli" scripts/glue/run_all.sh --do_predict`: each task is its own
    run_finetuning.py call, yet one zip holds both tasks' files with the test sets' row counts,
    and the last step names the server files still missing."""
    model_dir = tmp_path / "out"
    # Two seeds a task, not the script's nine: the test predictions still come from the better.
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3",
               TASKS="rte wnli", MODEL_DIR=str(model_dir), DATA_DIR=str(glue_dir),
               VOCAB_FILE=str(vocab), NUM_TRIALS="2")
    env["PYTHON"] = script_python(env)     # the script's Python runs fork the tests' zygote
    hparams = dict(TINY_HPARAMS, max_eval_examples=16)
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "glue" / "run_all.sh"), "--do_predict",
         "--max_train_steps", "1", "--max_seq_length", "32", "--hparams", json.dumps(hparams)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: invalid GLUE submission") and "missing CoLA.tsv" in last
    board = model_dir / "results" / "leaderboard"
    with zipfile.ZipFile(board / "glue_submission.zip") as zf:
        rows = {name: len(zf.read(name).decode().splitlines()) - 1 for name in zf.namelist()}
    assert rows == {"RTE.tsv": 3000, "WNLI.tsv": 146}
    assert "RTE.tsv (3000 rows), WNLI.tsv (146 rows)" in proc.stdout
    # Partial submissions are allowed on request; WNLI may be the majority class instead.
    ok = run_cli(["--glue_submission", "--model_dir", model_dir, "--data_dir", glue_dir,
                  "--allow_partial", "--wnli_majority"])
    assert "RTE.tsv (3000 rows), WNLI.tsv (146 rows)" in ok.stdout
    assert {line.split("\t")[1] for line in (board / "WNLI.tsv").read_text().splitlines()[1:]
            } == {"0"}
    missing = run_cli(["--glue_submission", "--data_dir", glue_dir], check=False)
    assert missing.returncode == 1 and "needs --data_dir and --model_dir" in missing.stderr


def test_mirrored_strategy_matches_one_device(tmp_path, glue_dir, vocab):
    """--distribution=mirrored over 2 logical CPUs: the same dev predictions as one device
    (evaluation split over replicas and gathered back in order), and training runs on it."""
    runs = {}
    for name, extra in (("one", []), ("mirrored", ["--distribution", "mirrored",
                                                    "--num_cpu_devices", "2"])):
        model_dir = tmp_path / name
        run_cli(base_args(model_dir, glue_dir, vocab, task_names="sst") + [
            "--nodo_train", "--seed", 3] + extra)
        runs[name] = read_dev_tsv(model_dir / "results" / "sst_dev_predictions.tsv")
    assert len(runs["one"]) == TINY_HPARAMS["max_eval_examples"]
    assert runs["mirrored"] == runs["one"]
    trained = run_cli(base_args(tmp_path / "train", glue_dir, vocab, task_names="sst") + [
        "--distribution", "mirrored", "--num_cpu_devices", "2"])
    assert "sst: step 3/3" in trained.stdout
    assert len(read_dev_tsv(tmp_path / "train" / "results" / "sst_dev_predictions.tsv")) == 96
    bad = run_cli(base_args(tmp_path / "bad", glue_dir, vocab, task_names="sst") + [
        "--tpu", "grpc://127.0.0.1:1"], check=False)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1].startswith(
        "error: cannot reach TPU grpc://127.0.0.1:1: ")


def test_steps_per_loop_trains_the_same(random_run, tmp_path, glue_dir, vocab):
    """--steps_per_loop 3: the 3 steps run in one compiled call, with the same losses (to float
    rounding) and dev predictions as one call per step: random_run's SST-2 (the first of its
    tasks, the same hparams and default seed; its 3 per-step TensorBoard losses averaged against
    the one loss of the 3-step window here)."""
    reference, _ = random_run
    hparams = dict(TINY_HPARAMS, log_every_steps=3)
    model_dir = tmp_path / "k3"
    proc = run_cli(base_args(model_dir, glue_dir, vocab, hparams=hparams, task_names="sst")
                   + ["--steps_per_loop", 3])
    line = [s for s in proc.stdout.splitlines() if "sst: step 3/3" in s][0]
    assert "first call" in line and "next line" not in line   # 3 steps in the first call
    one_call_each = tensorboard_series(reference / "tensorboard" / "sst")
    assert sorted(one_call_each) == [1, 2, 3]
    loop = tensorboard_series(model_dir / "tensorboard" / "sst")
    assert sorted(loop) == [3]
    assert abs(float(line.split(" loss ")[1].split()[0]) - loop[3]) <= 1e-4
    assert abs(np.mean(list(one_call_each.values())) - loop[3]) <= 1e-4
    assert read_dev_tsv(model_dir / "results" / "sst_dev_predictions.tsv") == read_dev_tsv(
        reference / "results" / "sst_dev_predictions.tsv")
