"""GLUE metrics from scikit-learn / scipy, reported x100 as in the ELECTRA and ConvBERT papers.

  CoLA: Matthews corr ("mcc")       STS-B: Pearson and Spearman corr
  MRPC, QQP: accuracy and F1        SST-2, MNLI-m/mm, QNLI, RTE, WNLI: accuracy
  AX: R3 = 3-class Matthews corr (only computable with the labelled diagnostic set)

F1 is the standard binary F1 with positive class "1" (paraphrase / duplicate). ELECTRA's and
ConvBERT's `F1Scorer` counts gold positives on the *prediction*, so their "F1" is precision;
we do not reproduce that bug.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from finetune.glue.tasks import GLUE_TASK_NAMES, get_task, normalize_task_name


def to_label_ids(values, task_name: str) -> np.ndarray:
    """Label ids from label ids, label strings ("entailment", "1") or logits [N, num_labels]."""
    task = get_task(task_name)
    array = np.asarray(values)
    if array.ndim == 2:                      # logits / probabilities
        return np.argmax(array, axis=-1).astype(np.int64)
    if array.ndim != 1:
        raise ValueError(f"{task.name}: expected a 1-D array of labels or 2-D logits, "
                         f"got shape {array.shape}")
    if array.dtype.kind in "US" or array.dtype == object:
        index = {label: i for i, label in enumerate(task.label_list)}
        try:
            return np.array([index[str(v)] for v in array.tolist()], dtype=np.int64)
        except KeyError as e:
            raise ValueError(f"{task.name}: unknown label {e.args[0]!r} "
                             f"(expected one of {', '.join(task.label_list)})") from None
    if array.dtype.kind == "f" and not np.all(array == np.round(array)):
        raise ValueError(f"{task.name}: got non-integer class predictions; pass ids or logits")
    ids = array.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= task.num_labels):
        raise ValueError(f"{task.name}: label ids must be in [0, {task.num_labels})")
    return ids


def to_scores(values) -> np.ndarray:
    """Regression outputs as a 1-D float array ([N] or [N, 1] accepted)."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"expected 1-D regression outputs, got shape {array.shape}")
    return array


def compute_metrics(task_name: str, predictions, labels) -> dict[str, float]:
    """{metric: value x 100} for one task; `task_name` may also be 'mnli-m' / 'mnli-mm'."""
    task = get_task(task_name)
    if len(predictions) != len(labels):
        raise ValueError(f"{task.name}: {len(predictions)} predictions for {len(labels)} labels")
    if len(labels) == 0:
        raise ValueError(f"{task.name}: no examples to score")
    if task.is_regression:
        preds, golds = to_scores(predictions), to_scores(labels)
        return {"pearson": 100.0 * float(stats.pearsonr(preds, golds)[0]),
                "spearman": 100.0 * float(stats.spearmanr(preds, golds)[0])}
    preds, golds = to_label_ids(predictions, task.name), to_label_ids(labels, task.name)
    results = {}
    for name in task.metric_names:
        if name == "accuracy":
            results[name] = 100.0 * float(skm.accuracy_score(golds, preds))
        elif name == "f1":
            positive = task.label_list.index("1")
            results[name] = 100.0 * float(skm.f1_score(golds, preds, pos_label=positive,
                                                       average="binary", zero_division=0.0))
        elif name == "mcc":
            results[name] = 100.0 * float(skm.matthews_corrcoef(golds, preds))
    return results


# One headline metric per task, as the ELECTRA / ConvBERT dev tables report them.
PAPER_METRIC = {"cola": "mcc", "sts": "spearman"}


def task_score(task_key: str, metrics: dict[str, float], style: str = "glue") -> float:
    """A task's single number: the mean of its metrics ("glue") or its paper metric ("paper")."""
    if style == "glue":
        return float(np.mean(list(metrics.values())))
    if style == "paper":
        return float(metrics[PAPER_METRIC.get(normalize_task_name(task_key), "accuracy")])
    raise ValueError(f"unknown GLUE score style {style!r}; use 'glue' or 'paper'")


def glue_score(results: dict[str, dict[str, float]], style: str = "glue") -> float:
    """Average over the tasks present in `results` ({task key: compute_metrics(...) dict}).

    style="glue" (the leaderboard's rule): two-metric tasks (MRPC, QQP, STS-B) are averaged
    first, MNLI counts once as the mean of 'mnli-m' and 'mnli-mm', and AX is excluded. With
    BERT-large's leaderboard row this gives its published 80.5.
    style="paper" (ELECTRA/ConvBERT dev tables): one metric per task -- MCC for CoLA, Spearman
    for STS-B, accuracy otherwise (MRPC/QQP included) -- and MNLI is the matched set, the only
    one ELECTRA evaluates. Leave WNLI out of `results` to match those papers' averages.
    """
    per_task: dict[str, list[float]] = {}
    for key, metrics in results.items():
        name = normalize_task_name(key)
        if name not in GLUE_TASK_NAMES:      # AX is diagnostic only
            continue
        if style == "paper" and key.lower() in ("mnli-mm", "mnli_mismatched"):
            continue
        per_task.setdefault(name, []).append(task_score(key, metrics, style))
    if not per_task:
        raise ValueError("no GLUE task results to average")
    return float(np.mean([np.mean(scores) for scores in per_task.values()]))
