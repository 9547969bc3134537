"""SQuAD reader and sliding-window features (finetune.qa.squad_data)."""
import json
import logging
import re

import numpy as np
import pytest

from finetune.qa import squad_data
from finetune.qa.squad_eval import SquadFormatError, normalize_answer
from tests.conftest import shared_path


class FakeTokenizer:
    """Words / single punctuation marks, lower-cased, with character offsets (the toolkit
    tokenizer's interface, without TensorFlow)."""

    pad_id, cls_id, sep_id = 0, 1, 2

    def __init__(self):
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}

    def _id(self, tok):
        return self.vocab.setdefault(tok, len(self.vocab))

    def tokenize_with_offsets(self, texts):
        out = []
        for t in texts:
            ms = list(re.finditer(r"\w+|[^\w\s]", t))
            out.append(([self._id(m.group().lower()) for m in ms], [m.start() for m in ms],
                        [m.end() for m in ms]))
        return out

    def tokenize(self, texts):
        return [ids for ids, _, _ in self.tokenize_with_offsets(texts)]

    def convert_ids_to_tokens(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return [inv[i] for i in ids]


def _squad(paragraphs, version="v2.0"):
    return {"version": version, "data": [{"title": "T", "paragraphs": paragraphs}]}


def _long_paragraph(n_words=60):
    words = [f"w{i}" for i in range(n_words)]
    context = " ".join(words) + "."
    qas = []
    for i, (s, e) in enumerate([(0, 0), (3, 5), (20, 22), (37, 41), (n_words - 2, n_words - 1)]):
        text = " ".join(words[s:e + 1])
        qas.append({"id": f"q{i}", "question": f"where is {words[s]} ?",
                    "answers": [{"text": text, "answer_start": context.index(text)}],
                    "is_impossible": False})
    qas.append({"id": "imp", "question": "none ?", "answers": [], "is_impossible": True,
                "plausible_answers": [{"text": "w1", "answer_start": 3}]})
    return {"context": context, "qas": qas}


# ------------------------------------------------------------------------------------------------
# Reader
# ------------------------------------------------------------------------------------------------
def test_reader_basic_fields():
    data = _squad([_long_paragraph()])
    stats = squad_data.ReadStats()
    ex = squad_data.read_squad_examples(data, is_training=True, stats=stats)
    assert [e.qas_id for e in ex] == ["q0", "q1", "q2", "q3", "q4", "imp"]
    assert ex[1].answer_text == "w3 w4 w5"
    assert ex[1].context_text[ex[1].answer_char_start:ex[1].answer_char_end] == "w3 w4 w5"
    assert ex[-1].is_impossible and ex[-1].answer_char_start == -1
    assert stats.num_examples == 6 and stats.num_impossible == 1 and stats.num_skipped == 0


def test_reader_multiple_answers_and_mismatch_warns_and_counts(caplog):
    context = "Paris is the capital of France. Paris is big."
    qas = [
        # first answer's answer_start is off by 3 (text occurs elsewhere): warned, recovered
        {"id": "a", "question": "q", "answers": [{"text": "Paris", "answer_start": 3},
                                                 {"text": "Paris", "answer_start": 0}]},
        # text not in the context at all: warned; kept for eval, dropped for training
        {"id": "b", "question": "q", "answers": [{"text": "London", "answer_start": 5}]},
        # answer_start out of range but text present: recovered
        {"id": "c", "question": "q", "answers": [{"text": "France", "answer_start": 999}]},
    ]
    data = _squad([{"context": context, "qas": qas}], "1.1")
    for training in (False, True):
        stats = squad_data.ReadStats()
        with caplog.at_level(logging.WARNING, logger="finetune.qa.squad_data"):
            caplog.clear()
            ex = squad_data.read_squad_examples(data, is_training=training, stats=stats)
        assert stats.num_answer_mismatch == 3 and stats.num_recovered == 2
        assert "answer_start 3 does not match" in caplog.text
        assert "London" in caplog.text
        ids = [e.qas_id for e in ex]
        if training:
            assert ids == ["a", "c"] and stats.num_skipped == 1
        else:
            assert ids == ["a", "b", "c"] and stats.num_skipped == 0
        a = ex[0]
        assert len(a.answers) == 2
        assert (a.answer_char_start, a.answer_char_end) == (0, 5)   # nearest occurrence
        c = [e for e in ex if e.qas_id == "c"][0]
        assert context[c.answer_char_start:c.answer_char_end] == "France"


@pytest.mark.parametrize("payload,needle", [
    ({"version": "1.1"}, "no top-level 'data'"),
    ([1, 2], "no top-level 'data'"),
    (_squad([{"context": "c", "qas": [{"question": "q", "answers": []}]}]), "has no 'id'"),
    (_squad([{"qas": [{"id": "x", "question": "q", "answers": []}]}]), "no 'context'"),
])
def test_reader_bad_input_one_line_error(tmp_path, payload, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(SquadFormatError) as e:
        squad_data.read_squad_examples(str(path), is_training=False)
    msg = str(e.value)
    assert needle in msg and str(path) in msg and "\n" not in msg


def test_split_by_article():
    data = {"version": "1.1", "data": [{"title": str(i), "paragraphs": []} for i in range(10)]}
    train, ev = squad_data.split_squad_json(data, eval_fraction=0.3, seed=1)
    assert len(ev["data"]) == 3 and len(train["data"]) == 7
    assert {a["title"] for a in train["data"]}.isdisjoint({a["title"] for a in ev["data"]})
    assert train["version"] == "1.1"


# ------------------------------------------------------------------------------------------------
# Windows (fake tokenizer: exact expectations)
# ------------------------------------------------------------------------------------------------
def _brute_max_context(spans, pos):
    best, best_i = None, None
    for i, (s, n) in enumerate(spans):
        if s <= pos <= s + n - 1:
            score = min(pos - s, s + n - 1 - pos) + 0.01 * n
            if best is None or score > best:
                best, best_i = score, i
    return best_i


@pytest.mark.parametrize("max_seq_length,doc_stride", [(24, 5), (30, 16), (80, 10), (17, 3)])
def test_windows_layout_positions_and_max_context(max_seq_length, doc_stride):
    tok = FakeTokenizer()
    ex = squad_data.read_squad_examples(_squad([_long_paragraph()]), is_training=True)
    f = squad_data.convert_examples_to_features(ex, tok, max_seq_length=max_seq_length,
                                                doc_stride=doc_stride, max_query_length=3,
                                                is_training=True)
    L = max_seq_length
    assert f.input_ids.shape == (len(f), L) and f.input_ids.dtype == np.int32
    for arr in (f.input_mask, f.segment_ids, f.token_char_start, f.token_char_end,
                f.token_is_max_context):
        assert arr.shape == (len(f), L)
    ctx_ids, ctx_starts, ctx_ends = tok.tokenize_with_offsets([ex[0].context_text])[0]
    n_ctx = len(ctx_ids)
    for e_index, e in enumerate(ex):
        rows = np.nonzero(f.example_index == e_index)[0]
        assert list(f.doc_span_index[rows]) == list(range(len(rows)))
        q = tok.tokenize([e.question_text])[0][:3]
        budget = L - len(q) - 3
        spans, covered_max = [], np.zeros(n_ctx, int)
        for r in rows:
            ids, mask, seg = f.input_ids[r], f.input_mask[r], f.segment_ids[r]
            n_real = int(mask.sum())
            assert mask[:n_real].all() and not mask[n_real:].any()
            assert (ids[n_real:] == tok.pad_id).all() and not seg[n_real:].any()
            assert ids[0] == tok.cls_id and list(ids[1:1 + len(q)]) == q
            assert ids[1 + len(q)] == tok.sep_id and ids[n_real - 1] == tok.sep_id
            doc_off = len(q) + 2
            length = n_real - doc_off - 1
            assert 0 < length <= budget
            assert not seg[:doc_off].any() and seg[doc_off:n_real].all()
            cs = f.token_char_start[r]
            start_tok = int(np.nonzero(np.asarray(ctx_starts) == cs[doc_off])[0][0])
            spans.append((start_tok, length))
            assert list(ids[doc_off:doc_off + length]) == ctx_ids[start_tok:start_tok + length]
            assert (cs[:doc_off] == -1).all() and (cs[doc_off + length:] == -1).all()
            assert list(f.token_char_end[r, doc_off:doc_off + length]) == \
                ctx_ends[start_tok:start_tok + length]
            # gold positions
            if e.is_impossible:
                assert f.start_positions[r] == f.end_positions[r] == 0 == f.answer_in_window[r]
                assert f.is_impossible[r] == 1
            else:
                assert f.is_impossible[r] == 0
                s, t = f.start_positions[r], f.end_positions[r]
                if f.answer_in_window[r]:
                    assert doc_off <= s <= t < doc_off + length
                    assert e.context_text[cs[s]:f.token_char_end[r, t]] == e.answer_text
                else:
                    assert s == t == 0
                    a0 = np.nonzero(np.asarray(ctx_ends) > e.answer_char_start)[0][0]
                    a1 = np.nonzero(np.asarray(ctx_starts) < e.answer_char_end)[0][-1]
                    assert a0 < start_tok or a1 >= start_tok + length
        # windows: start at 0, stride min(length, doc_stride), cover everything
        assert spans[0][0] == 0 and spans[-1][0] + spans[-1][1] == n_ctx
        for (s0, n0), (s1, _) in zip(spans, spans[1:]):
            assert s1 == s0 + min(n0, doc_stride)
        # the answer is in at least one window when it fits
        if not e.is_impossible and e.answer_char_end - e.answer_char_start < budget:
            assert f.answer_in_window[rows].any()
        # max context: exactly one window per token, the brute-force one
        for w, r in enumerate(rows):
            s0, n0 = spans[w]
            doc_off = len(q) + 2
            for p in range(n0):
                is_max = bool(f.token_is_max_context[r, doc_off + p])
                assert is_max == (_brute_max_context(spans, s0 + p) == w)
                covered_max[s0 + p] += is_max
        assert (covered_max == 1).all()


def test_model_inputs_and_select():
    tok = FakeTokenizer()
    ex = squad_data.read_squad_examples(_squad([_long_paragraph()]), is_training=True)
    f = squad_data.convert_examples_to_features(ex, tok, max_seq_length=24, doc_stride=8,
                                                max_query_length=4, is_training=True)
    inputs = f.model_inputs()
    assert set(inputs) == {"input_ids", "input_mask", "segment_ids", "start_positions",
                           "end_positions", "is_impossible"}
    sub = f.select(f.example_index == 2)
    assert len(sub) == int((f.example_index == 2).sum()) and sub.max_seq_length == 24


def test_too_small_sequence_raises():
    tok = FakeTokenizer()
    ex = squad_data.read_squad_examples(_squad([_long_paragraph()]), is_training=False)
    with pytest.raises(ValueError, match="no room"):
        squad_data.convert_examples_to_features(ex, tok, max_seq_length=6, max_query_length=64)


# ------------------------------------------------------------------------------------------------
# Round trip over the real dev sets with the toolkit tokenizer
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_tokenizer():
    tokenization = pytest.importorskip("data.tokenization")
    return tokenization.Tokenizer(str(shared_path("data", "vocab", "bert-uncased-vocab.txt")),
                                  do_lower_case=True)


@pytest.mark.parametrize("name", ["dev-v1.1.json", "dev-v2.0.json"])
def test_dev_set_gold_spans_round_trip(bert_tokenizer, name):
    """For every answerable question whose answer fits a window, the gold token span maps back
    to the gold text. The only exceptions allowed are answers that start or end *inside* a
    wordpiece (e.g. gold "Japan" in "Japanese"), which no token span can express; for those the
    mapped text must contain the gold text."""
    stats = squad_data.ReadStats()
    examples = squad_data.read_squad_examples(str(shared_path("data", "squad", name)),
                                              is_training=False, stats=stats)
    assert stats.num_answer_mismatch == 0
    features = squad_data.convert_examples_to_features(examples, bert_tokenizer,
                                                       max_seq_length=384, doc_stride=128,
                                                       max_query_length=64)
    assert features.input_ids.shape[1] == 384
    # each example has >= 1 window; ids start with [CLS] and every row has exactly 2 [SEP]
    assert set(np.unique(features.example_index)) == set(range(len(examples)))
    assert (features.input_ids[:, 0] == bert_tokenizer.cls_id).all()
    assert ((features.input_ids == bert_tokenizer.sep_id).sum(1) == 2).all()

    in_window = np.nonzero(features.answer_in_window)[0]
    seen, mismatched = set(), 0
    for i in in_window:
        ex = examples[features.example_index[i]]
        s, e = int(features.start_positions[i]), int(features.end_positions[i])
        text = squad_data.feature_span_text(features, examples, i, s, e)
        seen.add(ex.qas_id)
        if text == ex.answer_text:
            continue
        if normalize_answer(text) == normalize_answer(ex.answer_text):
            continue  # equal modulo the official normalisation
        cs = features.token_char_start[i]
        ce = features.token_char_end[i]
        inside_piece = (ex.answer_char_start not in set(cs.tolist())
                        or ex.answer_char_end not in set(ce.tolist()))
        assert inside_piece and ex.answer_text in text, (ex.qas_id, text, ex.answer_text)
        mismatched += 1
    answerable = [e for e in examples if not e.is_impossible]
    assert len(seen) == len(answerable)  # every answer fits some window at 384/128
    assert mismatched <= 0.005 * len(in_window)
    # unanswerable questions: all windows point at [CLS]
    imp = features.is_impossible.astype(bool)
    assert (features.start_positions[imp] == 0).all() and (features.end_positions[imp] == 0).all()
    assert imp.sum() == 0 if name == "dev-v1.1.json" else imp.any()


def test_sentencepiece_gold_spans_round_trip(tmp_path):
    """SQuAD's answer-span mapping with SentencePiece pieces: a piece such as "▁world" covers the
    space before its word, yet every gold token span maps back to exactly the gold text."""
    pytest.importorskip("sentencepiece")
    from data.tokenization import SentencePieceTokenizer
    from data.vocab import build_vocab
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    book = shared_path("data", "corpus", "gutenberg-en", "a-study-in-scarlet-pg244.txt")
    with open(book, encoding="utf-8") as f:
        (corpus / "book.txt").write_text("".join(f.readlines()[:3000]), encoding="utf-8")
    model = build_vocab([str(corpus)], str(tmp_path / "sp.model"), "sentencepiece", 2000,
                        log=lambda message: None)
    tokenizer = SentencePieceTokenizer(model)
    examples = squad_data.read_squad_examples(str(shared_path("data", "squad", "dev-v1.1.json")),
                                              is_training=False)[:1000]
    features = squad_data.convert_examples_to_features(examples, tokenizer, max_seq_length=384,
                                                       doc_stride=128, max_query_length=64)
    assert (features.input_ids[:, 0] == tokenizer.cls_id).all()
    in_window = np.nonzero(features.answer_in_window)[0]
    assert len({features.example_index[i] for i in in_window}) == len(examples)
    exact = 0
    for i in in_window:
        ex = examples[features.example_index[i]]
        text = squad_data.feature_span_text(features, examples, i, int(features.start_positions[i]),
                                            int(features.end_positions[i]))
        assert ex.answer_text in text, (ex.qas_id, text, ex.answer_text)
        exact += text == ex.answer_text
    assert exact >= 0.99 * len(in_window)
