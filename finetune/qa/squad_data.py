"""SQuAD v1.1 / v2.0 reader and sliding-window features.

Reader: `read_squad_examples(path, is_training)` -> list of `SquadExample` (one per question).
Features: `convert_examples_to_features(examples, tokenizer, ...)` -> `SquadFeatures`, a bundle of
numpy arrays with one row per window ("feature"):

    [CLS] question [SEP] context-window [SEP] [PAD] ...

The context is tokenized once per paragraph with the toolkit tokenizer (`data.tokenization`), whose
`tokenize_with_offsets` gives every wordpiece's character span in the *original* context, so the
mapping token -> characters is exact (no whitespace-word bookkeeping as in BERT/ELECTRA): an answer
span [char_start, char_end) maps to the first/last token that overlaps it, and a predicted token
span (s, e) maps back to `context[token_char_start[s]:token_char_end[e]]`.

Windows follow BERT/ELECTRA: `max_tokens_for_doc = max_seq_length - len(question) - 3`, windows
advance by `min(length, doc_stride)`, and each context token is "max context" in the window where
`min(left, right context) + 0.01 * window length` is largest (the first such window on ties).
Start/end positions are 0 (= [CLS]) for unanswerable questions and for windows that do not contain
the whole answer.
"""
import dataclasses
import json
import logging
import os
import random
from typing import Dict, List, Optional, Sequence

import numpy as np

from base import fileio
from finetune.qa.squad_eval import SquadFormatError, validate_dataset

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SquadExample:
    """One question with its paragraph."""
    qas_id: str
    question_text: str
    context_text: str
    answers: List[dict]                 # all gold answers [{"text", "answer_start"}], may be []
    is_impossible: bool = False
    answer_text: Optional[str] = None   # the answer used for positions (first aligned answer)
    answer_char_start: int = -1         # [start, end) in context_text; -1 when none
    answer_char_end: int = -1
    title: str = ""
    context_index: int = 0              # paragraph number in the file (shared by its questions)


@dataclasses.dataclass
class ReadStats:
    """Counters filled by `read_squad_examples` (ELECTRA's "example failures")."""
    num_questions: int = 0
    num_examples: int = 0
    num_impossible: int = 0
    num_answer_mismatch: int = 0   # answers whose answer_start does not point at their text
    num_recovered: int = 0         # ... of which the text was found elsewhere in the context
    num_skipped: int = 0           # training questions dropped (answer not recoverable)


def _load(input_file):
    if isinstance(input_file, dict):
        return input_file, "<json>"
    path = os.fspath(input_file)
    try:   # tf.io.gfile: local, gs://, ram://, ...
        return json.loads(fileio.read_text(path)), path
    except FileNotFoundError:
        raise SquadFormatError(f"{path}: SQuAD data file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadFormatError(f"{path}: SQuAD data file is not valid JSON ({e})") from None


def _find_nearest(context: str, text: str, near: int) -> int:
    """Start of the occurrence of `text` in `context` closest to `near` (case-insensitive
    fallback); -1 if absent."""
    for hay, needle in ((context, text), (context.lower(), text.lower())):
        best, pos = -1, hay.find(needle)
        while pos != -1:
            if best == -1 or abs(pos - near) < abs(best - near):
                best = pos
            pos = hay.find(needle, pos + 1)
        if best != -1:
            return best
    return -1


def read_squad_examples(input_file, is_training: bool, *, stats: Optional[ReadStats] = None,
                        max_warnings: int = 20) -> List[SquadExample]:
    """Reads a SQuAD v1.1 or v2.0 JSON file (path or already-parsed dict).

    Every question becomes an example carrying all its gold answers. The first answer whose
    `answer_start` points at its text gives the character span used for start/end positions. An
    answer whose `answer_start` does not match its text is logged as a warning and counted in
    `stats.num_answer_mismatch`; for the position answer the text is then searched in the
    context (nearest occurrence), and, in training mode, a question whose answer cannot be found
    is dropped (`stats.num_skipped`) instead of crashing. Evaluation mode keeps every question.

    Raises SquadFormatError (one line, naming the file) for a JSON without `data`, a question
    without `id`, or a paragraph without `context` / question without `question`.
    """
    stats = stats if stats is not None else ReadStats()
    data, path = _load(input_file)
    articles = validate_dataset(data, path)
    examples = []
    n_warned = 0

    def warn(msg):
        nonlocal n_warned
        n_warned += 1
        if n_warned <= max_warnings:
            logger.warning("%s: %s", path, msg)

    context_index = -1
    for article in articles:
        title = article.get("title", "")
        for paragraph in article["paragraphs"]:
            context_index += 1
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise SquadFormatError(
                    f"{path}: a paragraph of article {title!r} has no 'context' string")
            for qa in paragraph["qas"]:
                stats.num_questions += 1
                qid = qa["id"]
                question = qa.get("question")
                if not isinstance(question, str):
                    raise SquadFormatError(f"{path}: question {qid!r} has no 'question' text")
                answers = list(qa.get("answers") or [])
                is_impossible = bool(qa.get("is_impossible", False))
                ex = SquadExample(qas_id=qid, question_text=question, context_text=context,
                                  answers=answers, is_impossible=is_impossible, title=title,
                                  context_index=context_index)
                if is_impossible:
                    stats.num_impossible += 1
                else:
                    span = None
                    for ans in answers:
                        text, start = ans.get("text"), ans.get("answer_start")
                        if not isinstance(text, str) or not text:
                            warn(f"question {qid!r}: answer without text {ans!r}")
                            stats.num_answer_mismatch += 1
                            continue
                        if (isinstance(start, int) and 0 <= start
                                and context[start:start + len(text)] == text):
                            if span is None:
                                span = (text, start)
                            continue
                        stats.num_answer_mismatch += 1
                        found = _find_nearest(context, text, start if isinstance(start, int)
                                              else 0)
                        warn(f"question {qid!r}: answer_start {start!r} does not match answer "
                             f"text {text!r}" + (f" (found at {found})" if found >= 0 else
                                                 " (text not in context)"))
                        if found >= 0:
                            stats.num_recovered += 1
                            if span is None:
                                span = (text, found)
                    if span is not None:
                        ex.answer_text = span[0]
                        ex.answer_char_start = span[1]
                        ex.answer_char_end = span[1] + len(span[0])
                    elif is_training:
                        warn(f"question {qid!r}: no usable answer, skipped")
                        stats.num_skipped += 1
                        continue
                examples.append(ex)
    stats.num_examples = len(examples)
    if n_warned:
        logger.warning("%s: %d answer problem(s); %d answer_start mismatch(es), %d recovered, "
                       "%d question(s) skipped", path, n_warned, stats.num_answer_mismatch,
                       stats.num_recovered, stats.num_skipped)
    return examples


def split_squad_json(dataset_json: dict, eval_fraction: float = 0.5, seed: int = 0):
    """Splits a SQuAD JSON by article into (train_json, eval_json) dicts.

    Only the dev sets are available here; this makes a leakage-free train/eval split of them
    (whole articles go to one side).
    """
    articles = list(validate_dataset(dataset_json))
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, int(round(len(articles) * eval_fraction))) if articles else 0
    eval_ids = set(order[:n_eval])
    base = {k: v for k, v in dataset_json.items() if k != "data"}
    train = dict(base, data=[a for i, a in enumerate(articles) if i not in eval_ids])
    ev = dict(base, data=[a for i, a in enumerate(articles) if i in eval_ids])
    return train, ev


# ------------------------------------------------------------------------------------------------
# Features
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadFeatures:
    """One row per window. Model inputs plus the metadata post-processing needs."""
    input_ids: np.ndarray             # [N, L] int32
    input_mask: np.ndarray            # [N, L] int32, 1 for real tokens
    segment_ids: np.ndarray           # [N, L] int32, 1 for the context window and its [SEP]
    start_positions: np.ndarray       # [N] int32, 0 (= [CLS]) when no answer in the window
    end_positions: np.ndarray         # [N] int32
    is_impossible: np.ndarray         # [N] int32, the *question* is unanswerable (ELECTRA label)
    answer_in_window: np.ndarray      # [N] int32, 1 when the gold span lies in this window
    example_index: np.ndarray         # [N] int32, index into the examples list
    doc_span_index: np.ndarray        # [N] int32, window number within the example
    token_char_start: np.ndarray      # [N, L] int32, context char start of each token, -1 if none
    token_char_end: np.ndarray        # [N, L] int32, exclusive char end, -1 if none
    token_is_max_context: np.ndarray  # [N, L] bool

    def __len__(self):
        return int(self.input_ids.shape[0])

    @property
    def max_seq_length(self) -> int:
        return int(self.input_ids.shape[1])

    def model_inputs(self, with_labels: bool = True) -> Dict[str, np.ndarray]:
        """The arrays a model / `qa_loss` consumes (e.g. for tf.data `from_tensor_slices`)."""
        out = {"input_ids": self.input_ids, "input_mask": self.input_mask,
               "segment_ids": self.segment_ids}
        if with_labels:
            out.update(start_positions=self.start_positions, end_positions=self.end_positions,
                       is_impossible=self.is_impossible)
        return out

    def select(self, index) -> "SquadFeatures":
        """Rows `index` (slice, mask or index array) as a new SquadFeatures."""
        return SquadFeatures(**{f.name: np.array(getattr(self, f.name)[index])
                                for f in dataclasses.fields(self)})


def _batched(items, size):
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _doc_spans(n_tokens: int, max_tokens_for_doc: int, doc_stride: int):
    spans = []
    start = 0
    while start < n_tokens:
        length = min(n_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == n_tokens:
            break
        start += min(length, doc_stride)
    if not spans:  # empty context: one window with no context tokens
        spans.append((0, 0))
    return spans


def _max_context_span(spans, n_tokens: int) -> np.ndarray:
    """For each context token, the index of its max-context window (first best on ties)."""
    if n_tokens == 0:
        return np.zeros([0], np.int64)
    pos = np.arange(n_tokens)
    scores = np.full([len(spans), n_tokens], -np.inf)
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        inside = (pos >= start) & (pos <= end)
        score = np.minimum(pos - start, end - pos) + 0.01 * length
        scores[i, inside] = score[inside]
    return np.argmax(scores, axis=0)  # argmax returns the first maximum


def _strip_special(ids, tokenizer):
    ids = list(ids)
    if ids and ids[0] == tokenizer.cls_id:
        ids = ids[1:]
    if ids and ids[-1] == tokenizer.sep_id:
        ids = ids[:-1]
    return ids


def tokenize_contexts(tokenizer, contexts: Sequence[str], batch_size: int = 256):
    """[(ids, char_starts, char_ends)] as int arrays, one per context.

    A token's span starts at its first non-space character: a SentencePiece piece such as
    "▁world" covers the space before the word, which an answer's text must not begin with."""
    out = []
    for batch in _batched(list(contexts), batch_size):
        for text, (ids, starts, ends) in zip(batch, tokenizer.tokenize_with_offsets(list(batch))):
            ids = np.asarray(ids, np.int32).reshape(-1)
            starts = np.asarray(starts, np.int32).reshape(-1)
            ends = np.asarray(ends, np.int32).reshape(-1)
            for k in np.nonzero(starts < ends)[0]:
                while starts[k] < ends[k] - 1 and text[starts[k]].isspace():
                    starts[k] += 1
            out.append((ids, starts, ends))
    return out


def answer_token_span(char_starts: np.ndarray, char_ends: np.ndarray, answer_start: int,
                      answer_end: int):
    """(first, last) token index overlapping characters [answer_start, answer_end), or None."""
    hit = np.nonzero((char_ends > answer_start) & (char_starts < answer_end))[0]
    if hit.size == 0:
        return None
    return int(hit[0]), int(hit[-1])


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer,
                                 max_seq_length: int = 512, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool = False,
                                 batch_size: int = 256) -> SquadFeatures:
    """Sliding-window features for `examples` (see the module docstring).

    `tokenizer` is a `data.tokenization.Tokenizer` (or anything with `tokenize(texts)`,
    `tokenize_with_offsets(texts)`, `cls_id`, `sep_id`, `pad_id`). Each distinct paragraph is
    tokenized once; questions and paragraphs are tokenized in batches of `batch_size`.

    Gold start/end positions are filled for every example that has an aligned answer (so an
    evaluation loss can be computed too); in training mode an answerable example without an
    aligned answer, or whose answer covers no token, is dropped with a warning.
    """
    if max_seq_length < 4:
        raise ValueError(f"max_seq_length={max_seq_length} is too small")
    if doc_stride <= 0:
        raise ValueError("doc_stride must be positive")
    examples = list(examples)

    # Tokenize each distinct paragraph once, and all questions, in batches.
    context_ids: Dict[str, int] = {}
    for ex in examples:
        context_ids.setdefault(ex.context_text, len(context_ids))
    contexts = tokenize_contexts(tokenizer, list(context_ids), batch_size)
    questions = []
    for batch in _batched([ex.question_text for ex in examples], batch_size):
        questions.extend(tokenizer.tokenize(list(batch)))

    cls_id, sep_id, pad_id = int(tokenizer.cls_id), int(tokenizer.sep_id), int(tokenizer.pad_id)
    L = max_seq_length
    rows = {k: [] for k in ("input_ids", "segment_ids", "input_mask", "char_start", "char_end",
                            "max_ctx")}
    scalars = {k: [] for k in ("start", "end", "impossible", "in_window", "example", "span")}
    n_dropped = 0

    for ex_index, ex in enumerate(examples):
        q_ids = _strip_special(questions[ex_index], tokenizer)[:max_query_length]
        c_ids, c_starts, c_ends = contexts[context_ids[ex.context_text]]
        n_ctx = len(c_ids)
        max_tokens_for_doc = L - len(q_ids) - 3
        if max_tokens_for_doc <= 0:
            raise ValueError(f"max_seq_length={L} leaves no room for the context after a "
                             f"{len(q_ids)}-token question (max_query_length={max_query_length})")

        tok_span = None
        if not ex.is_impossible and ex.answer_char_start >= 0:
            tok_span = answer_token_span(c_starts, c_ends, ex.answer_char_start,
                                         ex.answer_char_end)
        if is_training and not ex.is_impossible and tok_span is None:
            logger.warning("question %r: answer covers no context token; dropped", ex.qas_id)
            n_dropped += 1
            continue

        spans = _doc_spans(n_ctx, max_tokens_for_doc, doc_stride)
        best_span = _max_context_span(spans, n_ctx)
        prefix = [cls_id] + list(q_ids) + [sep_id]
        doc_offset = len(prefix)
        for span_index, (start, length) in enumerate(spans):
            ids = np.full([L], pad_id, np.int32)
            seg = np.zeros([L], np.int32)
            mask = np.zeros([L], np.int32)
            cs = np.full([L], -1, np.int32)
            ce = np.full([L], -1, np.int32)
            mc = np.zeros([L], bool)
            n = doc_offset + length + 1
            ids[:doc_offset] = prefix
            ids[doc_offset:doc_offset + length] = c_ids[start:start + length]
            ids[doc_offset + length] = sep_id
            seg[doc_offset:n] = 1
            mask[:n] = 1
            cs[doc_offset:doc_offset + length] = c_starts[start:start + length]
            ce[doc_offset:doc_offset + length] = c_ends[start:start + length]
            mc[doc_offset:doc_offset + length] = best_span[start:start + length] == span_index
            s_pos = e_pos = 0
            in_window = 0
            if tok_span is not None and start <= tok_span[0] and tok_span[1] < start + length:
                s_pos = tok_span[0] - start + doc_offset
                e_pos = tok_span[1] - start + doc_offset
                in_window = 1
            for k, v in (("input_ids", ids), ("segment_ids", seg), ("input_mask", mask),
                         ("char_start", cs), ("char_end", ce), ("max_ctx", mc)):
                rows[k].append(v)
            for k, v in (("start", s_pos), ("end", e_pos), ("impossible", int(ex.is_impossible)),
                         ("in_window", in_window), ("example", ex_index),
                         ("span", span_index)):
                scalars[k].append(v)

    if n_dropped:
        logger.warning("%d training question(s) dropped: answer covers no token", n_dropped)

    def stack(k, dtype):
        return np.stack(rows[k]).astype(dtype) if rows[k] else np.zeros([0, L], dtype)

    def vec(k):
        return np.asarray(scalars[k], np.int32).reshape(-1)

    return SquadFeatures(
        input_ids=stack("input_ids", np.int32), input_mask=stack("input_mask", np.int32),
        segment_ids=stack("segment_ids", np.int32), start_positions=vec("start"),
        end_positions=vec("end"), is_impossible=vec("impossible"),
        answer_in_window=vec("in_window"), example_index=vec("example"),
        doc_span_index=vec("span"), token_char_start=stack("char_start", np.int32),
        token_char_end=stack("char_end", np.int32), token_is_max_context=stack("max_ctx", bool))


def feature_span_text(features: SquadFeatures, examples: Sequence[SquadExample], i: int,
                      start: int, end: int) -> str:
    """The original context characters covered by tokens start..end of feature `i`."""
    ex = examples[int(features.example_index[i])]
    return ex.context_text[int(features.token_char_start[i, start]):
                           int(features.token_char_end[i, end])]
