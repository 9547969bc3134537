"""finetune.qa.squad_eval against an independent reference written from the published definitions.

The reference below is written from the definitions in ../shared/data/PROVENANCE.md ("SQuAD
evaluation scripts") and ../shared/reference/evaluation-and-dynabert.md §3d, deliberately with a
different structure (regex punctuation class, numpy sweep) from the module under test.
"""
import json
import random
import re
import string
import subprocess
import sys

import numpy as np
import pytest

from finetune.qa import squad_eval
from tests.conftest import REPO_ROOT, shared_path


# ------------------------------------------------------------------------------------------------
# Independent reference
# ------------------------------------------------------------------------------------------------
_PUNCT_RE = re.compile("[" + re.escape(string.punctuation) + "]")


def ref_norm(text):
    text = _PUNCT_RE.sub("", text.lower())
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def ref_f1_tokens(pred_toks, gold_toks):
    common = 0
    remaining = list(gold_toks)
    for t in pred_toks:
        if t in remaining:
            remaining.remove(t)
            common += 1
    if common == 0:
        return 0.0
    p, r = common / len(pred_toks), common / len(gold_toks)
    return 2 * p * r / (p + r)


def ref_v1(data, preds):
    em = f1 = n = 0
    for art in data:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                n += 1
                if qa["id"] not in preds:
                    continue
                pred = preds[qa["id"]]
                golds = [a["text"] for a in qa["answers"]]
                em += max(float(ref_norm(pred) == ref_norm(g)) for g in golds)
                f1 += max(ref_f1_tokens(ref_norm(pred).split(), ref_norm(g).split())
                          for g in golds)
    return {"exact_match": 100 * em / n, "f1": 100 * f1 / n}


def ref_v2(data, preds, na_probs=None, thresh=1.0):
    rows = []  # (qid, has_ans, raw_em, raw_f1)
    for art in data:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                if qa["id"] not in preds:
                    continue
                golds = [a["text"] for a in qa["answers"] if ref_norm(a["text"])] or [""]
                pred = preds[qa["id"]]
                ems, f1s = [], []
                for g in golds:
                    gt, pt = ref_norm(g).split(), ref_norm(pred).split()
                    ems.append(float(ref_norm(g) == ref_norm(pred)))
                    if not gt or not pt:
                        f1s.append(float(gt == pt))
                    else:
                        f1s.append(ref_f1_tokens(pt, gt))
                rows.append((qa["id"], bool(qa["answers"]), max(ems), max(f1s)))
    probs = na_probs if na_probs is not None else {r[0]: 0.0 for r in rows}

    def thresholded(r, raw):
        return float(not r[1]) if probs[r[0]] > thresh else raw

    out = {}
    em = np.array([thresholded(r, r[2]) for r in rows])
    f1 = np.array([thresholded(r, r[3]) for r in rows])
    has = np.array([r[1] for r in rows])
    out["exact"], out["f1"], out["total"] = 100 * em.mean(), 100 * f1.mean(), len(rows)
    for name, sel in (("HasAns", has), ("NoAns", ~has)):
        if sel.any():
            out[name + "_exact"] = 100 * em[sel].mean()
            out[name + "_f1"] = 100 * f1[sel].mean()
            out[name + "_total"] = int(sel.sum())
    if na_probs is not None:
        by_id = {r[0]: r for r in rows}
        order = [q for q in sorted(na_probs, key=lambda q: na_probs[q]) if q in by_id]
        for key, col in (("exact", 2), ("f1", 3)):
            diffs = []
            for q in order:
                r = by_id[q]
                diffs.append(r[col] if r[1] else (-1.0 if preds[q] else 0.0))
            start = float(sum(1 for r in rows if not r[1]))
            curve = start + np.cumsum(diffs)
            if len(curve) and curve.max() > start:
                i = int(np.argmax(curve))  # first maximum
                best, best_t = curve[i], na_probs[order[i]]
            else:
                best, best_t = start, 0.0
            out["best_" + key] = 100 * best / len(rows)
            out["best_" + key + "_thresh"] = best_t
    return out


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------
def _load(name):
    with open(shared_path("data", "squad", name), encoding="utf-8") as f:
        return json.load(f)


def _qas(data):
    for art in data["data"]:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                yield par, qa


def _perturb(rng, context, qa):
    """A varied prediction: gold, trimmed, extended, re-cased, other answer, empty, garbage."""
    golds = [a["text"] for a in qa["answers"]] or [a["text"] for a in qa.get(
        "plausible_answers", [])] or ["nothing"]
    g = rng.choice(golds)
    words = g.split()
    kind = rng.randrange(9)
    if kind == 0:
        return g
    if kind == 1:
        return " ".join(words[1:])
    if kind == 2:
        return " ".join(words[:-1])
    if kind == 3:
        return "The " + g.upper() + "!!"
    if kind == 4:
        return g + " " + " ".join(context.split()[:rng.randrange(1, 4)])
    if kind == 5:
        return ""
    if kind == 6:
        return "a an the , ."
    if kind == 7:
        return " ".join(rng.sample(context.split(), min(3, len(context.split()))))
    return g.replace(" ", "  ") + " " + g.split()[0] if g.split() else g


def _assert_same(got, want):
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-9), k


# ------------------------------------------------------------------------------------------------
# Unit checks of the definitions
# ------------------------------------------------------------------------------------------------
def test_normalisation_examples():
    assert squad_eval.normalize_answer("The  Cat's, an apple!") == "cats apple"
    assert squad_eval.normalize_answer("theatre") == "theatre"  # whole words only
    assert squad_eval.normalize_answer("A") == ""
    assert squad_eval.f1_v1("", "") == 0                     # v1.1: no overlap -> 0
    assert squad_eval.compute_f1("", "") == 1                # v2.0: both empty -> 1
    assert squad_eval.compute_f1("the", "") == 1             # normalises to empty
    assert squad_eval.compute_f1("cat", "") == 0
    assert squad_eval.compute_f1("x b c", "b c d") == pytest.approx(2 / 3)
    assert squad_eval.compute_f1("a b c", "b c d") == pytest.approx(0.8)  # "a" is dropped
    assert squad_eval.compute_f1("a a", "a") == 1            # both normalise to ""


# ------------------------------------------------------------------------------------------------
# Real dev sets
# ------------------------------------------------------------------------------------------------
def test_v11_gold_is_100():
    data = _load("dev-v1.1.json")
    preds = {qa["id"]: qa["answers"][0]["text"] for _, qa in _qas(data)}
    got = squad_eval.evaluate_v1(data["data"], preds)
    assert got == {"exact_match": 100.0, "f1": 100.0}
    assert len(preds) == 10570


def test_v11_perturbed_and_missing_match_reference():
    data = _load("dev-v1.1.json")
    rng = random.Random(1)
    preds = {}
    for par, qa in _qas(data):
        if rng.random() < 0.02:
            continue  # missing: scores 0, stays in the denominator
        preds[qa["id"]] = _perturb(rng, par["context"], qa)
    got = squad_eval.evaluate_v1(data["data"], preds, log=lambda m: None)
    _assert_same(got, ref_v1(data["data"], preds))
    assert 0 < got["exact_match"] < got["f1"] < 100


def test_v11_empty_answers_score_zero():
    data = _load("dev-v1.1.json")
    preds = {qa["id"]: "" for _, qa in _qas(data)}
    got = squad_eval.evaluate_v1(data["data"], preds)
    _assert_same(got, ref_v1(data["data"], preds))
    # v1.1 quirk: "" equals the few gold answers that normalise to "" (EM) but F1 is always 0
    assert got["f1"] == 0.0 and 0 < got["exact_match"] < 0.1


def test_v20_gold_is_100_with_and_without_na_probs():
    data = _load("dev-v2.0.json")
    preds = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "")
             for _, qa in _qas(data)}
    got = squad_eval.evaluate_v2(data["data"], preds)
    assert got["exact"] == got["f1"] == 100.0
    assert got["total"] == 11873
    assert got["HasAns_total"] == 5928 and got["NoAns_total"] == 5945
    assert "best_exact" not in got
    na = {qa["id"]: (0.0 if qa["answers"] else 1.0) for _, qa in _qas(data)}
    got = squad_eval.evaluate_v2(data["data"], preds, na, 0.5)
    assert got["exact"] == got["f1"] == got["best_exact"] == got["best_f1"] == 100.0


def test_v20_empty_answers():
    data = _load("dev-v2.0.json")
    preds = {qa["id"]: "" for _, qa in _qas(data)}
    got = squad_eval.evaluate_v2(data["data"], preds)
    _assert_same(got, ref_v2(data["data"], preds))
    assert got["NoAns_exact"] == 100.0 and got["HasAns_exact"] == 0.0
    assert got["exact"] == pytest.approx(100 * 5945 / 11873)


@pytest.mark.parametrize("seed,thresh", [(2, 1.0), (3, 0.5), (4, -2.75)])
def test_v20_perturbed_with_na_probs_match_reference(seed, thresh):
    data = _load("dev-v2.0.json")
    rng = random.Random(seed)
    preds, na = {}, {}
    for par, qa in _qas(data):
        preds[qa["id"]] = _perturb(rng, par["context"], qa)
        if thresh < 0:   # logit-style null odds (ELECTRA), with ties
            na[qa["id"]] = round(rng.gauss(-2.0 if qa["answers"] else 0.0, 2.0), 1)
        else:            # probabilities, with ties
            na[qa["id"]] = round(rng.random(), 2)
    got = squad_eval.evaluate_v2(data["data"], preds, na, thresh)
    want = ref_v2(data["data"], preds, na, thresh)
    _assert_same(got, want)


def test_v20_perturbed_without_na_probs_and_missing_predictions():
    data = _load("dev-v2.0.json")
    rng = random.Random(5)
    preds = {qa["id"]: _perturb(rng, par["context"], qa) for par, qa in _qas(data)
             if rng.random() > 0.03}
    got = squad_eval.evaluate_v2(data["data"], preds, log=lambda m: None)
    _assert_same(got, ref_v2(data["data"], preds))
    assert got["total"] == len(preds) < 11873   # missing predictions are skipped


# ------------------------------------------------------------------------------------------------
# Command line and bad input
# ------------------------------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "finetune.qa.squad_eval", *map(str, args)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_cli_v11_and_v20(tmp_path):
    v1, v2 = shared_path("data", "squad", "dev-v1.1.json"), shared_path("data", "squad",
                                                                        "dev-v2.0.json")
    d1, d2 = _load("dev-v1.1.json"), _load("dev-v2.0.json")
    p1 = tmp_path / "p1.json"
    p1.write_text(json.dumps({qa["id"]: qa["answers"][0]["text"] for _, qa in _qas(d1)}))
    r = _cli("--version", "1.1", "--data_file", v1, "--pred_file", p1)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"exact_match": 100.0, "f1": 100.0}

    rng = random.Random(7)
    preds = {qa["id"]: _perturb(rng, par["context"], qa) for par, qa in _qas(d2)}
    na = {q: rng.random() for q in preds}
    p2, n2 = tmp_path / "p2.json", tmp_path / "na.json"
    p2.write_text(json.dumps(preds))
    n2.write_text(json.dumps(na))
    out_file = tmp_path / "eval.json"
    r = _cli("--version", "2.0", "--data_file", v2, "--pred_file", p2, "--na_prob_file", n2,
             "--na_prob_thresh", "0.7", "--out_file", out_file)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert list(got)[:3] == ["exact", "f1", "total"]
    _assert_same(got, ref_v2(d2["data"], preds, na, 0.7))
    assert json.loads(out_file.read_text()) == got


def _bad(tmp_path, obj):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return p


@pytest.mark.parametrize("payload,needle", [
    ({"version": "1.1", "articles": []}, "no top-level 'data'"),
    ({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [
        {"question": "q?", "answers": [{"text": "c", "answer_start": 0}]}]}]}]}, "has no 'id'"),
    ("{not json", "not valid JSON"),
])
def test_bad_data_file_one_line_error(tmp_path, payload, needle):
    bad = _bad(tmp_path, payload)
    preds = tmp_path / "p.json"
    preds.write_text("{}")
    with pytest.raises(squad_eval.SquadFormatError, match=re.escape(needle)) as e:
        squad_eval.evaluate_files("2.0", str(bad), str(preds))
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    for version in ("1.1", "2.0"):
        r = _cli("--version", version, "--data_file", bad, "--pred_file", preds)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0] and needle in lines[0], r.stderr
        assert r.stdout == ""


def test_bad_prediction_and_na_files(tmp_path):
    data = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "a cat", "qas": [
        {"id": "q1", "question": "?", "answers": [{"text": "cat", "answer_start": 2}]},
        {"id": "q2", "question": "?", "answers": []}]}]}]}
    dfile = _bad(tmp_path, data)
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps(["cat"]))
    with pytest.raises(squad_eval.SquadFormatError, match="JSON object"):
        squad_eval.evaluate_files("2.0", str(dfile), str(preds))
    preds.write_text(json.dumps({"q1": "cat", "q2": ""}))
    na = tmp_path / "na.json"
    na.write_text(json.dumps({"q1": 0.1}))
    with pytest.raises(squad_eval.SquadFormatError, match="q2"):
        squad_eval.evaluate_files("2.0", str(dfile), str(preds), str(na))
    na.write_text(json.dumps({"q1": 0.1, "q2": 0.9}))
    got = squad_eval.evaluate_files("2.0", str(dfile), str(preds), str(na), 0.5)
    assert got["exact"] == 100.0 and got["best_exact"] == 100.0
    # v1.1 on data with unanswerable questions: a clear error instead of max() of nothing
    with pytest.raises(squad_eval.SquadFormatError, match="no gold answers"):
        squad_eval.evaluate_files("1.1", str(dfile), str(preds), log=lambda m: None)
