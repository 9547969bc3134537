"""GLUE metrics: equal to scikit-learn / scipy on the real dev sets, the F1 that ELECTRA gets
wrong, and the GLUE score rules."""
import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from finetune.glue.metrics import compute_metrics, glue_score, to_label_ids
from finetune.glue.readers import read_examples
from finetune.glue.tasks import get_task
from tests.conftest import shared_path


def dev_labels(task):
    return [e.label for e in read_examples(shared_path("data", "glue"), task, "dev")]


@pytest.mark.parametrize("task", ["cola", "sst", "mrpc", "rte", "wnli", "qnli"])
def test_classification_metrics_match_sklearn_on_real_dev(task):
    labels = dev_labels(task)
    label_list = get_task(task).label_list
    gold = np.array([label_list.index(label) for label in labels])
    rng = np.random.default_rng(1234)
    # Random predictions that agree with the gold label ~70% of the time, so the metrics are
    # far from their trivial values.
    pred = np.where(rng.random(len(gold)) < 0.7, gold, rng.integers(0, len(label_list), len(gold)))
    got = compute_metrics(task, pred, labels)
    expected = {"accuracy": 100 * skm.accuracy_score(gold, pred)}
    if task == "cola":
        expected = {"mcc": 100 * skm.matthews_corrcoef(gold, pred)}
    if task == "mrpc":
        expected["f1"] = 100 * skm.f1_score(gold, pred, pos_label=1)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == pytest.approx(expected[name], abs=1e-9)
    assert 0 < got[next(iter(got))] < 100
    # Label strings and logits give the same result as label ids.
    strings = [label_list[i] for i in pred]
    logits = np.eye(len(label_list))[pred] + rng.normal(0, 0.01, (len(pred), len(label_list)))
    assert compute_metrics(task, strings, labels) == got
    assert compute_metrics(task, logits, gold) == got


def test_sts_metrics_match_scipy_on_real_dev():
    labels = np.array(dev_labels("sts"))
    rng = np.random.default_rng(7)
    pred = labels + rng.normal(0, 1.0, len(labels))
    got = compute_metrics("sts-b", pred, labels)
    assert got["pearson"] == pytest.approx(100 * stats.pearsonr(pred, labels)[0], abs=1e-9)
    assert got["spearman"] == pytest.approx(100 * stats.spearmanr(pred, labels)[0], abs=1e-9)
    assert 50 < got["pearson"] < 95
    assert compute_metrics("sts", pred[:, None], labels) == got      # [N, 1] head output


def test_f1_is_not_electras_precision():
    # precision 1, recall 1/3 -> F1 0.5. ELECTRA's F1Scorer counts gold positives on the
    # predictions, so it would report precision (100) here.
    labels = [1, 1, 1, 0]
    preds = [1, 0, 0, 0]
    got = compute_metrics("mrpc", preds, labels)
    assert got["f1"] == pytest.approx(50.0)
    assert got["accuracy"] == pytest.approx(50.0)
    # Positive class is "1", not the majority class: all-0 predictions have F1 0.
    assert compute_metrics("qqp", [0, 0, 0, 0], labels)["f1"] == 0.0


def test_mcc_by_hand():
    # tp=2 tn=1 fp=1 fn=0: mcc = (2*1 - 1*0) / sqrt(3*2*2*1) = 2/sqrt(12)
    got = compute_metrics("cola", [1, 1, 1, 0], ["1", "1", "0", "0"])
    assert got["mcc"] == pytest.approx(100 * 2 / np.sqrt(12))


def test_mnli_label_strings_and_errors():
    labels = ["entailment", "neutral", "contradiction", "neutral"]
    assert to_label_ids(labels, "mnli").tolist() == [1, 2, 0, 2]
    preds = ["entailment", "neutral", "neutral", "contradiction"]   # first two right
    assert compute_metrics("mnli-mm", preds, labels) == {"accuracy": 50.0}
    with pytest.raises(ValueError, match="unknown label 'maybe'"):
        compute_metrics("mnli-m", ["maybe"] * 4, labels)
    with pytest.raises(ValueError, match="3 predictions for 4 labels"):
        compute_metrics("mnli", labels[:3], labels)
    with pytest.raises(ValueError, match=r"label ids must be in \[0, 3\)"):
        compute_metrics("mnli", [0, 1, 2, 3], labels)


# BERT-large's row on the GLUE leaderboard (test): score 80.5.
BERT_LARGE = {
    "cola": {"mcc": 60.5}, "sst": {"accuracy": 94.9},
    "mrpc": {"f1": 89.3, "accuracy": 85.4}, "sts": {"pearson": 87.6, "spearman": 86.5},
    "qqp": {"f1": 72.1, "accuracy": 89.3}, "mnli-m": {"accuracy": 86.7},
    "mnli-mm": {"accuracy": 85.9}, "qnli": {"accuracy": 92.7}, "rte": {"accuracy": 70.1},
    "wnli": {"accuracy": 65.1}, "ax": {"mcc": 39.6},
}


def test_glue_score_matches_leaderboard():
    assert round(glue_score(BERT_LARGE), 1) == 80.5
    # AX is ignored; MNLI counts once (mean of matched and mismatched).
    without_ax = {k: v for k, v in BERT_LARGE.items() if k != "ax"}
    assert glue_score(without_ax) == glue_score(BERT_LARGE)
    two = {"mnli-m": {"accuracy": 80.0}, "mnli-mm": {"accuracy": 90.0}, "rte": {"accuracy": 70.0}}
    assert glue_score(two) == pytest.approx((85.0 + 70.0) / 2)


def test_glue_score_paper_style():
    # One metric per task: MCC, Spearman, accuracy (MRPC/QQP too), MNLI matched only.
    results = {k: v for k, v in BERT_LARGE.items() if k not in ("wnli", "ax")}
    expected = np.mean([60.5, 94.9, 85.4, 86.5, 89.3, 86.7, 92.7, 70.1])
    assert glue_score(results, style="paper") == pytest.approx(expected)
    with pytest.raises(ValueError, match="style"):
        glue_score(results, style="superglue")
