"""QA head outputs -> answer texts, n-best lists and null odds (SQuAD v1.1 / v2.0).

`results` is a mapping of numpy arrays whose first axis is aligned with the features (row i of
every array belongs to feature i of `SquadFeatures`). Two output layouts are understood:

* plain head: `start_logits` [N, L] and `end_logits` [N, L]; the `n_best_size` best starts and
  the `n_best_size` best ends of each window are combined;
* ELECTRA joint head (`qa_head.ElectraQAHead` at inference): `start_top_index` [N, K],
  `start_top_log_probs` [N, K], `end_top_index` [N, K, K], `end_top_log_probs` [N, K, K]: each of
  the K beam starts comes with its own K best ends.

Optionally `answerable_logit` [N] (ELECTRA's answerability classifier; higher = more likely *no*
answer, the label is `is_impossible`).

Candidate spans are kept when start and end are context tokens of the window, the start token has
its maximum context in this window, start <= end and the span has at most `max_answer_length`
tokens; the text is the original context between the start token's first and the end token's last
character. Candidates of all windows of a question are ranked by start + end score, duplicates
(same text) are removed and the top `n_best_size` form the n-best list.

SQuAD 2.0 (ELECTRA convention): the prediction is always the best *non-null* span; the null odds
of a question are the minimum over its windows of the answerability logit (with the classifier),
or of `start_logits[0] + end_logits[0]` minus the best non-null span score (without it). The
official evaluation then predicts "" where odds > threshold (`--na_prob_file null_odds.json
--na_prob_thresh -2.75`); the leaderboard-style file applies that threshold itself.
"""
import collections
import json
import os
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from base import fileio
from finetune.qa.squad_data import SquadExample, SquadFeatures

DEFAULT_N_BEST_SIZE = 20
DEFAULT_MAX_ANSWER_LENGTH = 30
DEFAULT_NULL_THRESHOLD = -2.75
_JOINT_KEYS = ("start_top_index", "start_top_log_probs", "end_top_index", "end_top_log_probs")


def _softmax(scores):
    if not scores:
        return []
    x = np.asarray(scores, np.float64)
    e = np.exp(x - x.max())
    return list(e / e.sum())


def _feature_candidates(results, i: int, joint: bool, n_best_size: int):
    """(starts, ends, start_scores, end_scores) 1-D arrays of all candidate pairs of feature i."""
    if joint:
        s_idx = np.asarray(results["start_top_index"][i]).astype(np.int64)          # [K]
        s_sc = np.asarray(results["start_top_log_probs"][i], np.float64)           # [K]
        e_idx = np.asarray(results["end_top_index"][i]).astype(np.int64)            # [K, K]
        e_sc = np.asarray(results["end_top_log_probs"][i], np.float64)             # [K, K]
        if e_idx.ndim == 1:  # one beam entry
            e_idx, e_sc = e_idx[None], e_sc[None]
        starts = np.repeat(s_idx[:, None], e_idx.shape[1], axis=1).reshape(-1)
        start_scores = np.repeat(s_sc[:, None], e_idx.shape[1], axis=1).reshape(-1)
        return starts, e_idx.reshape(-1), start_scores, e_sc.reshape(-1)
    start_logits = np.asarray(results["start_logits"][i], np.float64)
    end_logits = np.asarray(results["end_logits"][i], np.float64)
    # Best indexes, ties broken by position (as a stable sort on -logit does).
    s_best = np.argsort(-start_logits, kind="stable")[:n_best_size]
    e_best = np.argsort(-end_logits, kind="stable")[:n_best_size]
    starts = np.repeat(s_best, len(e_best))
    ends = np.tile(e_best, len(s_best))
    return starts, ends, start_logits[starts], end_logits[ends]


def compute_predictions(examples: Sequence[SquadExample], features: SquadFeatures,
                        results: Mapping[str, np.ndarray], *, version_2_with_negative: bool,
                        n_best_size: int = DEFAULT_N_BEST_SIZE,
                        max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH,
                        use_answerable_classifier: Optional[bool] = None
                        ) -> Tuple[Dict[str, str], Dict[str, list], Dict[str, float]]:
    """Returns (predictions {qid: text}, nbest {qid: [entries]}, null_odds {qid: float}).

    null_odds is empty for SQuAD v1.1. Examples without any feature are skipped.
    """
    results = {k: np.asarray(v) for k, v in results.items()}  # also accepts backend tensors
    joint = all(k in results for k in _JOINT_KEYS)
    if not joint and not ("start_logits" in results and "end_logits" in results):
        raise ValueError("results need start_logits/end_logits or the joint-beam outputs "
                         f"{_JOINT_KEYS}; got {sorted(results)}")
    if use_answerable_classifier is None:
        use_answerable_classifier = "answerable_logit" in results
    if use_answerable_classifier and "answerable_logit" not in results:
        raise ValueError("use_answerable_classifier=True but results have no answerable_logit")
    if (version_2_with_negative and not use_answerable_classifier
            and not ("start_logits" in results and "end_logits" in results)):
        raise ValueError("SQuAD 2.0 null scores need answerable_logit or start/end logits")
    n = len(features)
    for k, v in results.items():
        if len(v) != n:
            raise ValueError(f"results[{k!r}] has {len(v)} rows for {n} features")

    L = features.max_seq_length
    by_example = collections.defaultdict(list)
    for i, e in enumerate(features.example_index):
        by_example[int(e)].append(i)

    predictions = collections.OrderedDict()
    all_nbest = collections.OrderedDict()
    null_odds = collections.OrderedDict()
    for ex_index, ex in enumerate(examples):
        feat_ids = by_example.get(ex_index)
        if not feat_ids:
            continue
        cand = []  # per window: (start_scores, end_scores, feature, starts, ends)
        score_null = None
        for i in feat_ids:
            if version_2_with_negative:
                if use_answerable_classifier:
                    null = float(results["answerable_logit"][i])
                else:
                    null = float(results["start_logits"][i][0]) + float(results["end_logits"][i][0])
                score_null = null if score_null is None else min(score_null, null)
            starts, ends, s_sc, e_sc = _feature_candidates(results, i, joint, n_best_size)
            in_range = (starts > 0) & (starts < L) & (ends >= 0) & (ends < L)
            starts_c, ends_c = np.clip(starts, 0, L - 1), np.clip(ends, 0, L - 1)
            cs, ce = features.token_char_start[i], features.token_char_end[i]
            ok = (in_range & (cs[starts_c] >= 0) & (ce[ends_c] >= 0)
                  & features.token_is_max_context[i][starts_c]
                  & (ends >= starts) & (ends - starts + 1 <= max_answer_length))
            cand.append((s_sc[ok], e_sc[ok], np.full(int(ok.sum()), i), starts[ok], ends[ok]))
        s_all, e_all, f_all, st_all, en_all = (np.concatenate(c) for c in zip(*cand))
        # Best first; a stable sort keeps window / beam order on ties (as BERT/ELECTRA's sort).
        order = np.argsort(-(s_all + e_all), kind="stable")

        seen = set()
        nbest = []
        context = ex.context_text
        for k in order:
            if len(nbest) >= n_best_size:
                break
            i, s, e = int(f_all[k]), int(st_all[k]), int(en_all[k])
            c0 = int(features.token_char_start[i, s])
            c1 = int(features.token_char_end[i, e])
            # A SentencePiece span may begin or end at a lone "▁" piece: trim the spaces.
            while c0 < c1 and context[c0].isspace():
                c0 += 1
            while c1 > c0 and context[c1 - 1].isspace():
                c1 -= 1
            text = context[c0:c1]
            if not text or text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": float(s_all[k]),
                          "end_logit": float(e_all[k]), "start_char": c0, "end_char": c1})
        if not nbest:  # no valid span at all (rare): a nonce answer, as BERT/ELECTRA do
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0,
                          "start_char": -1, "end_char": -1})
        probs = _softmax([x["start_logit"] + x["end_logit"] for x in nbest])
        nbest_json = []
        for entry, p in zip(nbest, probs):
            nbest_json.append({"text": entry["text"], "probability": float(p),
                               "start_logit": entry["start_logit"],
                               "end_logit": entry["end_logit"],
                               "start_char": entry["start_char"], "end_char": entry["end_char"]})
        all_nbest[ex.qas_id] = nbest_json
        if not version_2_with_negative:
            predictions[ex.qas_id] = nbest_json[0]["text"]
            continue
        best_non_null = next((x for x in nbest_json if x["text"]), nbest_json[0])
        predictions[ex.qas_id] = best_non_null["text"]
        if use_answerable_classifier:
            null_odds[ex.qas_id] = float(score_null)
        else:
            null_odds[ex.qas_id] = float(score_null - best_non_null["start_logit"]
                                         - best_non_null["end_logit"])
    return predictions, all_nbest, null_odds


def apply_null_threshold(predictions: Mapping[str, str], null_odds: Mapping[str, float],
                         null_threshold: float = DEFAULT_NULL_THRESHOLD) -> Dict[str, str]:
    """Leaderboard-style predictions: "" where null odds > threshold."""
    return collections.OrderedDict(
        (qid, "" if null_odds.get(qid, -np.inf) > null_threshold else text)
        for qid, text in predictions.items())


def write_json_atomic(obj, path: str) -> None:
    """Writes JSON to `path` (local, gs://, ram://, ...) via a temporary file in the same
    directory + rename (base/fileio.py)."""
    text = json.dumps(obj, ensure_ascii=False)  # no indent: keeps the fast C encoder
    fileio.write_atomic(path, text.encode("utf-8"))


def write_predictions(examples: Sequence[SquadExample], features: SquadFeatures,
                      results: Mapping[str, np.ndarray], output_dir: str, *,
                      version_2_with_negative: bool, n_best_size: int = DEFAULT_N_BEST_SIZE,
                      max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH,
                      null_threshold: float = DEFAULT_NULL_THRESHOLD,
                      write_leaderboard: bool = True,
                      use_answerable_classifier: Optional[bool] = None,
                      prefix: str = "") -> Dict[str, str]:
    """Computes the predictions and writes them (each file atomically) to `output_dir`:

    * `{prefix}predictions.json`        {qid: text}; v2.0: the best non-null span;
    * `{prefix}nbest_predictions.json`  {qid: [{text, probability, start_logit, end_logit,
                                         start_char, end_char}, ...]};
    * v2.0 only: `{prefix}null_odds.json` {qid: null odds} (evaluate with `--na_prob_file` and
      `--na_prob_thresh null_threshold`) and, with `write_leaderboard`,
      `{prefix}leaderboard_predictions.json` with "" where null odds > `null_threshold`.

    Returns {"predictions": path, "nbest": path, ["null_odds": path, "leaderboard": path]}.
    """
    preds, nbest, null_odds = compute_predictions(
        examples, features, results, version_2_with_negative=version_2_with_negative,
        n_best_size=n_best_size, max_answer_length=max_answer_length,
        use_answerable_classifier=use_answerable_classifier)
    paths = {"predictions": os.path.join(output_dir, prefix + "predictions.json"),
             "nbest": os.path.join(output_dir, prefix + "nbest_predictions.json")}
    write_json_atomic(preds, paths["predictions"])
    write_json_atomic(nbest, paths["nbest"])
    if version_2_with_negative:
        paths["null_odds"] = os.path.join(output_dir, prefix + "null_odds.json")
        write_json_atomic(null_odds, paths["null_odds"])
        if write_leaderboard:
            paths["leaderboard"] = os.path.join(output_dir,
                                                prefix + "leaderboard_predictions.json")
            write_json_atomic(apply_null_threshold(preds, null_odds, null_threshold),
                              paths["leaderboard"])
    return paths
