"""SQuAD v1.1 and v2.0 fine-tuning through run_finetuning.py with a tiny model, and --precision
(fp32, bf16, mixed_float16) on SQuAD 2.0 and SST-2.

Only the official dev sets are available (../shared/data/squad), so each is split by article:
the first two articles are the training file, the next two the evaluation file, laid out as
`<data_dir>/squad/{train,dev}-v{1.1,2.0}.json` (the driver's default file names).
"""
import json
import math
import re

import pytest

from tests.conftest import shared_path
from tests.finetune.test_run_finetuning import TINY_MODEL, run_cli

QA_HPARAMS = {"model_hparam_overrides": TINY_MODEL, "train_batch_size": 8,
              "predict_batch_size": 32, "max_train_examples": 48, "max_eval_examples": 40,
              "doc_stride": 32, "max_query_length": 16, "beam_size": 5, "qa_hidden_size": 32,
              "n_best_size": 5, "log_every_steps": 1}


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_data")
    (root / "squad").mkdir()
    for version in ("1.1", "2.0"):
        data = json.loads(shared_path("data", "squad", f"dev-v{version}.json").read_text())
        train = dict(data, data=data["data"][:2])
        dev = dict(data, data=data["data"][2:4])
        (root / "squad" / f"train-v{version}.json").write_text(json.dumps(train))
        (root / "squad" / f"dev-v{version}.json").write_text(json.dumps(dev))
    return root


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory):
    """A tiny pre-training-style model_dir (native export under discriminator/) that records its
    pre-training max_seq_length (32) next to the export."""
    import keras
    from model import ConvBertConfig, ConvBertModel
    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("squad_pretrain")
    ConvBertModel(ConvBertConfig.from_size("small", **TINY_MODEL)).save_pretrained(
        root / "discriminator")
    (root / "hparams.json").write_text(json.dumps({"max_seq_length": 32}))
    return root


# --precision in fine-tuning (the training core's policy, as in pre-training): SQuAD 2.0 (and
# 1.1 and SST-2) from the same tiny checkpoint in fp32, bf16 and mixed_float16 (dynamic loss
# scaling); the fp32 run is the SQuAD run the other tests read. The encoder's dropout is off, so
# SQuAD's first loss (same weights, same batch, a head without dropout) differs from fp32 only by
# the precision. The bound is a rounding budget, not a fitted value: bf16 keeps 8 significant
# bits (2^-8 = 0.4% relative per rounding), float16 11 bits; a few roundings in series through
# the 1-layer encoder, the head and the softmax give 2% for bf16 and 0.5% for float16. SST-2's
# head keeps ELECTRA's dropout of 0.1, whose random mask is drawn in the compute dtype, so SST-2
# is checked for running and writing its outputs, not for equal losses.
TOLERANCE = {"bf16": 0.02, "mixed_float16": 0.005}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
STEP = re.compile(r"^(\w+): step (\d+)/\d+ \([\d.]+%\) loss ([\d.]+)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, squad_dir, pretrain_dir):
    """{precision: (model_dir, {(task, step): loss}, process)}: SQuAD 2.0 and SST-2 (fp32: and
    SQuAD 1.1) from the small checkpoint, fine-tuned at 64 tokens for 3 steps."""
    (squad_dir / "SST-2").symlink_to(shared_path("data", "glue", "SST-2"),
                                     target_is_directory=True)
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    hparams = {k: v for k, v in QA_HPARAMS.items() if k != "model_hparam_overrides"}
    hparams["model_hparam_overrides"] = NO_DROPOUT
    out = {}
    for precision in ("fp32", "bf16", "mixed_float16"):
        model_dir = tmp_path_factory.mktemp(f"ft_{precision}")
        tasks = "squad,squadv1,sst" if precision == "fp32" else "squad,sst"
        proc = run_cli(["--data_dir", squad_dir, "--task_names", tasks, "--vocab_file", vocab,
                        "--model_dir", model_dir, "--hparams", json.dumps(hparams),
                        "--init_checkpoint", pretrain_dir, "--max_seq_length", 64,
                        "--max_train_steps", 3, "--precision", precision])
        losses = {}
        for line in proc.stdout.splitlines():
            match = STEP.match(line)
            if match:
                losses[(match.group(1), int(match.group(2)))] = float(match.group(3))
        out[precision] = (model_dir, losses, proc)
    return out


@pytest.fixture(scope="module")
def squad_run(runs):
    """Both SQuAD versions from the small checkpoint, fine-tuned at 64 tokens (fp32)."""
    model_dir, _, proc = runs["fp32"]
    return model_dir, proc


def _eval_questions(squad_dir, version, n):
    data = json.loads((squad_dir / "squad" / f"dev-v{version}.json").read_text())
    qids = [qa["id"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
    return data, qids[:n]


@pytest.mark.parametrize("task,version", [("squadv1", "1.1"), ("squad", "2.0")])
def test_squad_files_and_metrics(squad_run, squad_dir, task, version):
    from finetune.qa import squad_eval
    model_dir, proc = squad_run
    results = model_dir / "results"
    predictions = json.loads((results / f"{task}_predictions.json").read_text())
    nbest = json.loads((results / f"{task}_nbest_predictions.json").read_text())
    record = json.loads((results / f"{task}_metrics.json").read_text())
    data, qids = _eval_questions(squad_dir, version, QA_HPARAMS["max_eval_examples"])
    assert list(predictions) == qids
    assert set(nbest) == set(qids)
    assert all(1 <= len(v) <= QA_HPARAMS["n_best_size"] for v in nbest.values())
    assert all(predictions[q] == nbest[q][0]["text"] or version == "2.0" for q in qids)
    assert record["version"] == version and record["num_questions"] == len(qids)
    assert record["train_steps"] == 3
    # The metrics JSON is what the official evaluation gives for the written files.
    subset = [dict(a, paragraphs=[dict(p, qas=[qa for qa in p["qas"] if qa["id"] in qids])
                                  for p in a["paragraphs"]]) for a in data["data"]]
    if version == "1.1":
        assert not (results / f"{task}_null_odds.json").exists()
        expected = squad_eval.evaluate_v1(subset, predictions, log=lambda m: None)
        assert record["metrics"] == pytest.approx(expected)
    else:
        null_odds = json.loads((results / f"{task}_null_odds.json").read_text())
        assert set(null_odds) == set(qids)
        assert (results / f"{task}_leaderboard_predictions.json").exists()
        expected = squad_eval.evaluate_v2(subset, predictions, null_odds, -2.75,
                                          log=lambda m: None)
        for key in ("exact", "f1", "total", "HasAns_total", "NoAns_total", "best_f1"):
            assert record["metrics"][key] == pytest.approx(expected[key]), key
    assert f"{task}: step 3/3 (100.0%)" in proc.stdout
    assert (model_dir / "tensorboard" / task).is_dir()


def test_squad_warns_about_untrained_positions(squad_run):
    """The checkpoint recorded max_seq_length 32 and SQuAD runs at 64: a clear warning."""
    _, proc = squad_run
    assert "encoder: keras checkpoint" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "never trained" in line]
    assert [w.split(":")[1].strip() for w in warnings] == ["squad", "squadv1", "sst"]  # per task
    assert "at most 32 tokens" in warnings[0] and "hparams.json" in warnings[0]


def test_squad_missing_file_is_one_line_error(tmp_path):
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    missing = tmp_path / "nowhere" / "train-v1.1.json"
    proc = run_cli(["--task_names", "squadv1", "--vocab_file", vocab, "--model_dir",
                    tmp_path / "out", "--train_file", missing, "--predict_file", missing],
                   check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and str(missing) in last
    assert "Traceback" not in proc.stderr


def test_default_squad_files(tmp_path):
    from finetune.squad_task import default_files
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev-v2.0.json").write_text("{}")
    assert default_files("squad", str(tmp_path)) == (
        str(tmp_path / "squad" / "train-v2.0.json"), str(tmp_path / "squad" / "dev-v2.0.json"))
    assert default_files("squadv1", str(tmp_path))[1].endswith("dev-v1.1.json")


@pytest.mark.parametrize("precision", ["bf16", "mixed_float16"])
def test_first_squad_loss_agrees_with_fp32(runs, precision):
    _, reference, _ = runs["fp32"]
    _, losses, _ = runs[precision]
    steps = {(t, s) for t in ("sst", "squad") for s in (1, 2, 3)}
    assert set(losses) == steps and steps <= set(reference)
    assert all(0 < v < 100 for v in losses.values()), losses
    value = reference[("squad", 1)]
    assert abs(losses[("squad", 1)] - value) <= TOLERANCE[precision] * value, (losses, reference)


@pytest.mark.parametrize("precision", ["bf16", "mixed_float16"])
def test_outputs_written_and_finite(runs, precision):
    model_dir, _, _ = runs[precision]
    results = model_dir / "results"
    sst = json.loads((results / "sst_dev_metrics.json").read_text())["metrics"]
    squad = json.loads((results / "squad_metrics.json").read_text())["metrics"]
    assert 0.0 <= sst["accuracy"] <= 100.0
    assert all(math.isfinite(v) for v in squad.values() if isinstance(v, float))
    assert json.loads((model_dir / "finetune_hparams.json").read_text())["hparams"][
        "precision"] == precision


def test_unknown_precision_is_one_line(tmp_path):
    proc = run_cli(["--data_dir", tmp_path, "--task_names", "sst", "--model_dir", tmp_path / "o",
                    "--precision", "fp8"], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "fp8" in proc.stderr
