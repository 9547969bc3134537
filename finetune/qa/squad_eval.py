"""SQuAD v1.1 and v2.0 evaluation, exactly as the official scripts define it.

This module re-implements the metrics of the official evaluation scripts (`evaluate-v1.1.py` and
`evaluate-v2.0.py` from the SQuAD site, copied with small changes by ELECTRA/ConvBERT as
`finetune/qa/squad_official_eval_v1.py` / `squad_official_eval.py`). It is written from their
published definitions, not copied; see docs/SQUAD.md.

Shared normalisation: lower-case -> drop every `string.punctuation` character -> replace the whole
words a/an/the by a space -> collapse whitespace. EM is equality of normalised strings, F1 is the
token-bag overlap F1 of the normalised strings; both are maxed over the gold answers.

v1.1: F1 is 0 when there is no overlap (also when both sides are empty); a question without a
prediction scores 0 and stays in the denominator.

v2.0: gold answers that normalise to "" are dropped and a question without (remaining) gold
answers has the single gold answer ""; F1 is 1 when both token lists are empty and 0 when only one
is; a question without a prediction is skipped (not in the denominator). With an na-prob file, a
question whose no-answer probability/score is `> na_prob_thresh` is scored as a no-answer
prediction; `best_exact`/`best_f1` sweep the threshold over the na-prob values.

Two places where the official v2.0 script crashes (KeyError) and this module does not:
* predictions missing for some questions together with the HasAns/NoAns split: the split totals
  are taken over the questions that were scored, and the `best_*` sweep starts from the number of
  *scored* unanswerable questions (with complete predictions this is identical to the official
  script);
* an na-prob file without an entry for a predicted question: a clear error.

Command line (prints the same JSON as the official scripts):

    python -m finetune.qa.squad_eval --version 2.0 --data_file dev-v2.0.json \
        --pred_file predictions.json [--na_prob_file null_odds.json] [--na_prob_thresh 1.0]
"""
import argparse
import collections
import json
import os
import re
import string
import sys
from typing import Dict, Iterable, List, Mapping, Optional, Sequence


_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


class SquadFormatError(ValueError):
    """A SQuAD data / prediction / na-prob file that cannot be evaluated (one-line message)."""


# ------------------------------------------------------------------------------------------------
# Normalisation and per-answer metrics
# ------------------------------------------------------------------------------------------------
def normalize_answer(s: str) -> str:
    """Lower-case, remove punctuation, remove the articles a/an/the, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def get_tokens(s: str) -> List[str]:
    """The normalised answer split on whitespace ([] for an empty string)."""
    if not s:
        return []
    return normalize_answer(s).split()


def exact_match_v1(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def _overlap_f1(pred_toks, gold_toks) -> float:
    """Token F1 of two token bags (as both official scripts compute it): 0 without overlap."""
    num_same = sum((collections.Counter(pred_toks) & collections.Counter(gold_toks)).values())
    if num_same == 0:
        return 0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_v1(prediction: str, ground_truth: str) -> float:
    """v1.1 token F1: 0 whenever the bags do not overlap (including two empty answers)."""
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def compute_exact(a_gold: str, a_pred: str) -> int:
    """v2.0 exact match (0/1)."""
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """v2.0 token F1: 1 if both answers are empty, 0 if exactly one is."""
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    if not gold_toks or not pred_toks:
        return int(gold_toks == pred_toks)
    return _overlap_f1(pred_toks, gold_toks)


# ------------------------------------------------------------------------------------------------
# Loading and validation
# ------------------------------------------------------------------------------------------------
def _read_text(path) -> str:
    """A URL (gs://, ram://, ...) through tf.io.gfile; a local file with open(). This module is
    also the stand-alone official evaluator: on local files it must not load TensorFlow (seconds
    of start-up, and C++ log lines on stderr that would break its one-line errors)."""
    if "://" in str(path):
        from base import fileio   # loads TensorFlow for a URL: URLs only
        return fileio.read_text(path)
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write_text(path, text: str) -> None:
    """Atomic write (temporary name beside `path`, then rename); URLs through tf.io.gfile."""
    if "://" in str(path):
        from base import fileio
        fileio.write_atomic(path, text)
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _load_json(path: str, what: str):
    try:
        return json.loads(_read_text(path))
    except FileNotFoundError:
        raise SquadFormatError(f"{path}: {what} file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadFormatError(f"{path}: {what} file is not valid JSON ({e})") from None


def validate_dataset(dataset_json, path: str = "<data>") -> List[dict]:
    """Checks the SQuAD structure and returns its `data` list; raises SquadFormatError."""
    if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
        raise SquadFormatError(f"{path}: not a SQuAD file: no top-level 'data' list")
    for a_i, article in enumerate(dataset_json["data"]):
        title = article.get("title", f"#{a_i}") if isinstance(article, dict) else f"#{a_i}"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadFormatError(f"{path}: article {title!r} has no 'paragraphs' list")
        for p_i, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise SquadFormatError(
                    f"{path}: paragraph {p_i} of article {title!r} has no 'qas' list")
            for q_i, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict) or "id" not in qa:
                    raise SquadFormatError(
                        f"{path}: question {q_i} of paragraph {p_i} in article {title!r} "
                        f"has no 'id'")
                if not isinstance(qa.get("answers", []), list):
                    raise SquadFormatError(
                        f"{path}: question {qa['id']!r} has a non-list 'answers'")
    return dataset_json["data"]


def load_dataset(path: str) -> List[dict]:
    """Reads a SQuAD JSON file and returns its validated `data` list."""
    return validate_dataset(_load_json(path, "SQuAD data"), path)


def load_predictions(path: str, what: str = "prediction") -> dict:
    preds = _load_json(path, what)
    if not isinstance(preds, dict):
        raise SquadFormatError(f"{path}: {what} file must be a JSON object {{question id: value}}")
    return preds


def _iter_qas(dataset: Iterable[dict]):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa


# ------------------------------------------------------------------------------------------------
# v1.1
# ------------------------------------------------------------------------------------------------
def evaluate_v1(dataset: Sequence[dict], predictions: Mapping[str, str],
                log=None) -> Dict[str, float]:
    """Official v1.1 metric: {'exact_match', 'f1'} over *all* questions (missing ones score 0)."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    exact = f1 = 0.0
    total = 0
    for qa in _iter_qas(dataset):
        total += 1
        if qa["id"] not in predictions:
            log(f"Unanswered question {qa['id']} will receive score 0.")
            continue
        golds = [a["text"] for a in qa["answers"]]
        if not golds:
            raise SquadFormatError(
                f"question {qa['id']!r} has no gold answers: SQuAD v1.1 evaluation needs "
                f"answers for every question (use --version 2.0 for SQuAD 2.0 data)")
        pred = predictions[qa["id"]]
        exact += max(exact_match_v1(pred, g) for g in golds)
        f1 += max(f1_v1(pred, g) for g in golds)
    if total == 0:
        raise SquadFormatError("the data file contains no questions")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# ------------------------------------------------------------------------------------------------
# v2.0
# ------------------------------------------------------------------------------------------------
def make_qid_to_has_ans(dataset: Sequence[dict]) -> Dict[str, bool]:
    return {qa["id"]: bool(qa["answers"]) for qa in _iter_qas(dataset)}


def get_raw_scores(dataset: Sequence[dict], preds: Mapping[str, str], log=None):
    """Per-question EM and F1 (v2.0 rules) for the questions that have a prediction."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    exact_scores, f1_scores = {}, {}
    for qa in _iter_qas(dataset):
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
        if not golds:
            golds = [""]
        if qid not in preds:
            log(f"Missing prediction for {qid}")
            continue
        pred = preds[qid]
        exact_scores[qid] = max(compute_exact(g, pred) for g in golds)
        f1_scores[qid] = max(compute_f1(g, pred) for g in golds)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    new_scores = {}
    for qid, s in scores.items():
        if na_probs[qid] > na_prob_thresh:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if qid_list is None:
        qid_list = list(exact_scores)
    total = len(qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
        ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
        ("total", total),
    ])


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """Sweeps the no-answer threshold over the sorted na-prob values (official `best_*`).

    Starts from "everything predicted as no-answer" (= number of unanswerable questions) and moves
    the threshold up one question at a time; ties in the na-prob values are processed in the
    na-prob file's order (a stable sort, as in the official script).
    """
    num_no_ans = sum(1 for k in scores if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset: Sequence[dict], preds: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None, na_prob_thresh: float = 1.0,
                log=None) -> "collections.OrderedDict[str, float]":
    """Official v2.0 metric dict: exact, f1, total, HasAns_*, NoAns_* (+ best_* with na_probs)."""
    have_na_file = na_probs is not None
    if na_probs is None:
        na_probs = {k: 0.0 for k in preds}
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    exact_raw, f1_raw = get_raw_scores(dataset, preds, log=log)
    if not exact_raw:
        raise SquadFormatError("no question of the data file has a prediction")
    for qid in exact_raw:
        if qid not in na_probs:
            raise SquadFormatError(f"the na-prob file has no entry for question {qid!r}")
        try:
            float(na_probs[qid])
        except (TypeError, ValueError):
            raise SquadFormatError(
                f"na-prob value for question {qid!r} is not a number: {na_probs[qid]!r}") from None
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out = make_eval_dict(exact_thresh, f1_thresh)
    has_ans = [k for k, v in qid_to_has_ans.items() if v and k in exact_raw]
    no_ans = [k for k, v in qid_to_has_ans.items() if not v and k in exact_raw]
    if has_ans:
        for k, v in make_eval_dict(exact_thresh, f1_thresh, has_ans).items():
            out["HasAns_" + k] = v
    if no_ans:
        for k, v in make_eval_dict(exact_thresh, f1_thresh, no_ans).items():
            out["NoAns_" + k] = v
    if have_na_file:
        out["best_exact"], out["best_exact_thresh"] = find_best_thresh(
            preds, exact_raw, na_probs, qid_to_has_ans)
        out["best_f1"], out["best_f1_thresh"] = find_best_thresh(
            preds, f1_raw, na_probs, qid_to_has_ans)
    return out


# ------------------------------------------------------------------------------------------------
# Files / CLI
# ------------------------------------------------------------------------------------------------
def evaluate_files(version: str, data_file: str, pred_file: str,
                   na_prob_file: Optional[str] = None, na_prob_thresh: float = 1.0,
                   log=None) -> dict:
    """Loads the files and returns the official metric dict for `version` ('1.1' or '2.0')."""
    version = str(version).lstrip("v")
    dataset_json = _load_json(data_file, "SQuAD data")
    dataset = validate_dataset(dataset_json, data_file)
    preds = load_predictions(pred_file)
    for qid, value in preds.items():
        if not isinstance(value, str):
            raise SquadFormatError(
                f"{pred_file}: prediction for {qid!r} is not a string ({type(value).__name__})")
    if version == "1.1":
        if str(dataset_json.get("version")) != "1.1":
            (log or (lambda m: print(m, file=sys.stderr)))(
                f"Evaluation expects v-1.1, but got dataset with v-{dataset_json.get('version')}")
        if na_prob_file:
            raise SquadFormatError("--na_prob_file is only meaningful for --version 2.0")
        try:
            return evaluate_v1(dataset, preds, log=log)
        except SquadFormatError as e:
            raise SquadFormatError(f"{data_file}: {e}") from None
    if version == "2.0":
        na_probs = load_predictions(na_prob_file, "na-prob") if na_prob_file else None
        for qid, value in (na_probs or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SquadFormatError(
                    f"{na_prob_file}: na-prob value for {qid!r} is not a number: {value!r}")
        try:
            return evaluate_v2(dataset, preds, na_probs, na_prob_thresh, log=log)
        except SquadFormatError as e:
            where = na_prob_file if na_probs is not None and "na-prob" in str(e) else pred_file
            raise SquadFormatError(f"{where}: {e}") from None
    raise SquadFormatError(f"unknown SQuAD version {version!r} (expected 1.1 or 2.0)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Official SQuAD v1.1 / v2.0 evaluation (EM / F1).")
    parser.add_argument("--version", required=True, choices=["1.1", "2.0", "v1.1", "v2.0"])
    parser.add_argument("--data_file", required=True, help="SQuAD dataset JSON")
    parser.add_argument("--pred_file", required=True, help="predictions JSON {qid: answer text}")
    parser.add_argument("--na_prob_file", default=None,
                        help="v2.0: JSON {qid: no-answer probability or score}")
    parser.add_argument("--na_prob_thresh", type=float, default=1.0,
                        help='v2.0: predict "" when the na-prob value exceeds this (default 1.0)')
    parser.add_argument("--out_file", default=None, help="also write the metrics JSON here")
    args = parser.parse_args(argv)
    try:
        result = evaluate_files(args.version, args.data_file, args.pred_file,
                                args.na_prob_file, args.na_prob_thresh)
    except SquadFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2) if args.version.lstrip("v") == "2.0" else json.dumps(result)
    print(text)
    if args.out_file:
        _write_text(args.out_file, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
