"""SQuAD v1.1 and v2.0 fine-tuning through run_finetuning.py with a tiny model.

Only the official dev sets are available (../shared/data/squad), so each is split by article:
the first two articles are the training file, the next two the evaluation file, laid out as
`<data_dir>/squad/{train,dev}-v{1.1,2.0}.json` (the driver's default file names).
"""
import json

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


@pytest.fixture(scope="module")
def squad_run(tmp_path_factory, squad_dir, pretrain_dir):
    """Both SQuAD versions from the small checkpoint, fine-tuned at 64 tokens."""
    model_dir = tmp_path_factory.mktemp("ft_squad")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    hparams = {k: v for k, v in QA_HPARAMS.items() if k != "model_hparam_overrides"}
    proc = run_cli(["--data_dir", squad_dir, "--task_names", "squad,squadv1", "--vocab_file",
                    vocab, "--model_dir", model_dir, "--hparams", json.dumps(hparams),
                    "--init_checkpoint", pretrain_dir, "--max_seq_length", 64,
                    "--max_train_steps", 3])
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
    assert len(warnings) == 2  # one per task
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
