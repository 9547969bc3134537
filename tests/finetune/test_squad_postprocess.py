"""Post-processing: head outputs -> answers (finetune.qa.postprocess), scored with squad_eval."""
import json
import os

import numpy as np
import pytest

from finetune.qa import postprocess, squad_data, squad_eval
from tests.conftest import shared_path
from tests.finetune.test_squad_data import FakeTokenizer, _long_paragraph, _squad


def _synthetic_plain(features, high=10.0):
    """Logits that point at the gold span where the window holds it, else at [CLS]."""
    n, L = features.input_ids.shape
    start = np.zeros([n, L], np.float32)
    end = np.zeros([n, L], np.float32)
    rows = np.arange(n)
    start[rows, features.start_positions] = high
    end[rows, features.end_positions] = high
    return {"start_logits": start, "end_logits": end}


def _log_softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def _to_joint(plain, k=20):
    """ELECTRA joint-beam layout from plain logits (every beam start gets the same ends)."""
    s_lp, e_lp = _log_softmax(plain["start_logits"]), _log_softmax(plain["end_logits"])
    s_idx = np.argsort(-s_lp, axis=1, kind="stable")[:, :k]
    e_idx = np.argsort(-e_lp, axis=1, kind="stable")[:, :k]
    n = len(s_idx)
    return {"start_top_index": s_idx.astype(np.int32),
            "start_top_log_probs": np.take_along_axis(s_lp, s_idx, 1),
            "end_top_index": np.repeat(e_idx[:, None, :], k, axis=1).astype(np.int32),
            "end_top_log_probs": np.repeat(np.take_along_axis(e_lp, e_idx, 1)[:, None, :], k,
                                           axis=1),
            "_n": n}


def _small(is_training=False, max_seq_length=20, doc_stride=4):
    data = _squad([_long_paragraph()])
    ex = squad_data.read_squad_examples(data, is_training=is_training)
    f = squad_data.convert_examples_to_features(ex, FakeTokenizer(), max_seq_length=max_seq_length,
                                                doc_stride=doc_stride, max_query_length=4)
    return data, ex, f


# ------------------------------------------------------------------------------------------------
# Small synthetic cases (fake tokenizer, many windows per question)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["plain", "joint"])
def test_gold_logits_give_gold_text_v1(tmp_path, layout):
    data, ex, f = _small()
    assert f.doc_span_index.max() >= 3  # really sliding
    results = _synthetic_plain(f)
    if layout == "joint":
        results = {k: v for k, v in _to_joint(results, k=5).items() if k != "_n"}
    paths = postprocess.write_predictions(ex, f, results, str(tmp_path),
                                          version_2_with_negative=False)
    preds = json.loads(open(paths["predictions"]).read())
    answerable = [e for e in ex if not e.is_impossible]
    for e in answerable:
        assert preds[e.qas_id] == e.answer_text
    nbest = json.loads(open(paths["nbest"]).read())
    for e in answerable:
        entries = nbest[e.qas_id]
        assert entries[0]["text"] == e.answer_text
        assert 1 <= len(entries) <= 20
        assert len({x["text"] for x in entries}) == len(entries)    # de-duplicated
        probs = [x["probability"] for x in entries]
        assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0)
        first = entries[0]
        assert e.context_text[first["start_char"]:first["end_char"]] == e.answer_text
    sub = {"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": ex[0].context_text, "qas": [q for q in data["data"][0]["paragraphs"][0]["qas"]
                                                if q["answers"]]}]}]}
    assert squad_eval.evaluate_v1(sub["data"], preds) == {"exact_match": 100.0, "f1": 100.0}
    assert not os.path.exists(os.path.join(tmp_path, "null_odds.json"))
    assert sorted(os.listdir(tmp_path)) == ["nbest_predictions.json", "predictions.json"]


def test_v2_answerable_classifier_null_odds_and_leaderboard(tmp_path):
    data, ex, f = _small()
    results = _synthetic_plain(f)
    # ELECTRA classifier: high = no answer. Answer windows say "answerable" (-6), others +4.
    results["answerable_logit"] = np.where(f.answer_in_window == 1, -6.0, 4.0).astype(np.float32)
    paths = postprocess.write_predictions(ex, f, results, str(tmp_path),
                                          version_2_with_negative=True, prefix="dev_")
    assert set(paths) == {"predictions", "nbest", "null_odds", "leaderboard"}
    assert all(os.path.basename(p).startswith("dev_") for p in paths.values())
    preds = json.load(open(paths["predictions"]))
    odds = json.load(open(paths["null_odds"]))
    board = json.load(open(paths["leaderboard"]))
    for e in ex:
        assert preds[e.qas_id] != ""                  # always the best non-null span
        if e.is_impossible:
            assert odds[e.qas_id] == 4.0 and board[e.qas_id] == ""
        else:
            assert odds[e.qas_id] == -6.0             # min over windows
            assert preds[e.qas_id] == board[e.qas_id] == e.answer_text
    # na-prob evaluation at -2.75 == leaderboard file evaluation
    with_na = squad_eval.evaluate_v2(data["data"], preds, odds, -2.75)
    board_eval = squad_eval.evaluate_v2(data["data"], board)
    assert with_na["exact"] == board_eval["exact"] == 100.0
    assert with_na["f1"] == board_eval["f1"] == 100.0
    assert with_na["best_exact"] == 100.0


def test_v2_plain_head_null_score_difference():
    data, ex, f = _small(max_seq_length=60, doc_stride=30)
    results = _synthetic_plain(f, high=3.0)
    preds, nbest, odds = postprocess.compute_predictions(
        ex, f, results, version_2_with_negative=True)
    for e_index, e in enumerate(ex):
        rows = np.nonzero(f.example_index == e_index)[0]
        null = min(results["start_logits"][r, 0] + results["end_logits"][r, 0] for r in rows)
        best = nbest[e.qas_id][0]
        assert odds[e.qas_id] == pytest.approx(null - best["start_logit"] - best["end_logit"])
        if not e.is_impossible:
            assert odds[e.qas_id] == pytest.approx(null - 6.0) and preds[e.qas_id] == e.answer_text


def test_filters_max_context_length_and_order():
    data, ex, f = _small(max_seq_length=20, doc_stride=4)
    e_index = 3  # answer w37..w41 (5 tokens)
    e = ex[e_index]
    rows = np.nonzero(f.example_index == e_index)[0]
    n, L = f.input_ids.shape
    start = np.full([n, L], -5.0, np.float32)
    end = np.full([n, L], -5.0, np.float32)
    # In every window, point the *start* at the gold start token, wherever it is present.
    for r in rows:
        cs = f.token_char_start[r]
        hit = np.nonzero(cs == e.answer_char_start)[0]
        if hit.size:
            start[r, hit[0]] = 9.0 + r  # later windows score higher ...
            end[r, hit[0] + 4 if hit[0] + 4 < L else hit[0]] = 9.0
    preds, nbest, _ = postprocess.compute_predictions(
        ex, f, {"start_logits": start, "end_logits": end}, version_2_with_negative=False)
    # ... but only the max-context window of the start token may provide the answer
    chosen = [r for r in rows if f.token_is_max_context[r][np.nonzero(
        f.token_char_start[r] == e.answer_char_start)[0]].any()]
    assert len(chosen) == 1
    assert nbest[e.qas_id][0]["start_logit"] == 9.0 + chosen[0]
    # max_answer_length: a 5-token answer is dropped at max_answer_length=4
    preds4, _, _ = postprocess.compute_predictions(
        ex, f, {"start_logits": start, "end_logits": end}, version_2_with_negative=False,
        max_answer_length=4)
    assert preds4[e.qas_id] != e.answer_text
    # no valid span at all -> ELECTRA's nonce "empty"
    junk = {"start_logits": np.zeros([n, L]), "end_logits": np.zeros([n, L])}
    f_no_ctx = f.select(slice(None))
    f_no_ctx.token_char_start[:] = -1
    preds0, nbest0, _ = postprocess.compute_predictions(ex, f_no_ctx, junk,
                                                        version_2_with_negative=False)
    assert set(preds0.values()) == {"empty"}


def test_bad_results_rejected():
    _, ex, f = _small()
    with pytest.raises(ValueError, match="start_logits"):
        postprocess.compute_predictions(ex, f, {"foo": np.zeros(len(f))},
                                        version_2_with_negative=False)
    with pytest.raises(ValueError, match="rows"):
        postprocess.compute_predictions(ex, f, {"start_logits": np.zeros([1, 20]),
                                                "end_logits": np.zeros([1, 20])},
                                        version_2_with_negative=False)


# ------------------------------------------------------------------------------------------------
# Real dev sets: synthetic gold logits -> EM 100 through the written files
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_tokenizer():
    tokenization = pytest.importorskip("data.tokenization")
    return tokenization.Tokenizer(str(shared_path("data", "vocab", "bert-uncased-vocab.txt")))


def _representable(examples, features):
    """qids whose first gold answer is exactly a token span (not inside a wordpiece) of at
    most max_answer_length (30) tokens."""
    ok = set()
    for i in np.nonzero(features.answer_in_window)[0]:
        ex = examples[features.example_index[i]]
        if features.end_positions[i] - features.start_positions[i] + 1 > 30:
            continue
        text = squad_data.feature_span_text(features, examples, i, features.start_positions[i],
                                            features.end_positions[i])
        if text == ex.answer_text:
            ok.add(ex.qas_id)
    return ok


@pytest.mark.parametrize("name,layout", [("dev-v1.1.json", "plain"), ("dev-v2.0.json", "joint")])
def test_dev_set_synthetic_logits_em_100(tmp_path, bert_tokenizer, name, layout):
    path = shared_path("data", "squad", name)
    v2 = "v2.0" in name
    examples = squad_data.read_squad_examples(str(path), is_training=False)
    features = squad_data.convert_examples_to_features(examples, bert_tokenizer,
                                                       max_seq_length=384, doc_stride=128)
    results = _synthetic_plain(features)
    if layout == "joint":
        results = {k: v for k, v in _to_joint(results).items() if k != "_n"}
    if v2:
        results["answerable_logit"] = np.where(features.answer_in_window == 1, -5.0, 5.0)
    paths = postprocess.write_predictions(examples, features, results, str(tmp_path),
                                          version_2_with_negative=v2)
    keep = _representable(examples, features)
    answerable = {e.qas_id for e in examples if not e.is_impossible}
    assert len(answerable - keep) <= 0.01 * len(answerable)
    data = json.load(open(path))
    for art in data["data"]:
        for par in art["paragraphs"]:
            par["qas"] = [q for q in par["qas"] if q["id"] in keep or not q["answers"]]
    sub_file = tmp_path / "subset.json"
    sub_file.write_text(json.dumps(data))
    if not v2:
        got = squad_eval.evaluate_files("1.1", str(sub_file), paths["predictions"])
        assert got == {"exact_match": 100.0, "f1": 100.0}
        full = squad_eval.evaluate_files("1.1", str(path), paths["predictions"])
        assert full["exact_match"] > 99.5
        return
    got = squad_eval.evaluate_files("2.0", str(sub_file), paths["predictions"],
                                    paths["null_odds"], -2.75)
    assert got["exact"] == got["f1"] == 100.0
    assert got["NoAns_total"] == 5945
    board = squad_eval.evaluate_files("2.0", str(sub_file), paths["leaderboard"])
    assert board["exact"] == board["f1"] == 100.0
