"""The packing rule on hand-made token streams, with scripted random draws."""
import random

import numpy as np
import pytest

from data.example_packer import ExamplePacker

CLS, SEP = 101, 102
MAX_LENGTH = 12


class ScriptedRandom:
    """random() returns scripted values (then `default`); randint returns `randint_value`."""

    def __init__(self, values=(), default=0.9, randint_value=None):
        self.values = list(values)
        self.default = default
        self.randint_value = randint_value
        self.randint_calls = []

    def random(self):
        return self.values.pop(0) if self.values else self.default

    def randint(self, low, high):
        self.randint_calls.append((low, high))
        return self.randint_value


def lines(*sentences):
    """Flat ids and row lengths for lines; a None sentence is a blank line."""
    flat = [t for s in sentences if s for t in s]
    codes = [-1 if s is None else len(s) for s in sentences]
    return np.array(flat, np.int32), np.array(codes, np.int64)


def pack(rng, *documents, max_length=MAX_LENGTH):
    packer = ExamplePacker(max_length, CLS, SEP, rng)
    for document in documents:
        packer.add_lines(*lines(*document))
    packer.finish_document()
    packed = packer.take_examples()
    return packed.input_ids.tolist(), packed.input_mask().tolist(), packed.segment_ids().tolist()


def test_short_document_two_segments_and_long_document_truncated():
    # Document 1: two sentences (5 tokens < target 12), ended by a blank line. First-segment
    # target (12-3)//2 = 4: [1,2,3] starts A; [4,5] would make A 5 >= 4 and the coin (0.9)
    # says no, so it becomes B.
    # Document 2: one 20-token sentence (> max_seq_length): reaches the target, goes to A and
    # is cut to max_length - 2 = 10 tokens; no B.
    ids, masks, segments = pack(ScriptedRandom(), [[1, 2, 3], [4, 5], None, list(range(10, 30))])
    assert ids == [[CLS, 1, 2, 3, SEP, 4, 5, SEP, 0, 0, 0, 0],
                   [CLS] + list(range(10, 20)) + [SEP]]
    assert masks == [[1] * 8 + [0] * 4, [1] * 12]
    assert segments == [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0], [0] * 12]


def test_coin_flip_moves_overflowing_sentence_to_first_segment():
    # Draws: 0.5 (not single-segment), 0.3 (< 0.5: [4,5] joins A although it overflows).
    # Then [6] cannot join A (A is 5 >= 4) -> B.
    ids, masks, segments = pack(ScriptedRandom([0.5, 0.3]), [[1, 2, 3], [4, 5], [6]])
    assert ids == [[CLS, 1, 2, 3, 4, 5, SEP, 6, SEP, 0, 0, 0]]
    assert segments == [[0] * 7 + [1, 1] + [0] * 3]


def test_single_segment_example():
    # First draw 0.05 < 0.1: single segment, every sentence goes to A.
    ids, _, segments = pack(ScriptedRandom([0.05]), [[1, 2, 3], [4, 5], [6]])
    assert ids == [[CLS, 1, 2, 3, 4, 5, 6, SEP, 0, 0, 0, 0]]
    assert segments == [[0] * 12]


def test_second_segment_trimmed_to_fit():
    # A = [1..4] (4 tokens, first sentence always joins A), B = 9 tokens -> cut to 12-4-3 = 5.
    ids, masks, segments = pack(ScriptedRandom(), [[1, 2, 3, 4], list(range(20, 29))])
    assert ids == [[CLS, 1, 2, 3, 4, SEP, 20, 21, 22, 23, 24, SEP]]
    assert masks == [[1] * 12]
    assert segments == [[0] * 6 + [1] * 6]


def test_short_target_after_example():
    # Example 1 (draws 0.9 segment, then 0.01 < 0.05): next target = randint(5, 12) -> 6.
    # Example 2 then closes as soon as it holds 6 tokens: [7,8,9] [10,11,12].
    rng = ScriptedRandom([0.9, 0.01], randint_value=6)
    ids, _, _ = pack(rng, [list(range(1, 13)), [7, 8, 9], [10, 11, 12], [13]])
    assert rng.randint_calls == [(5, MAX_LENGTH)]
    # target 6 -> first-segment target (6-3)//2 = 1: [7,8,9] is A, [10,11,12] B.
    assert ids[1] == [CLS, 7, 8, 9, SEP, 10, 11, 12, SEP, 0, 0, 0]
    assert ids[2] == [CLS, 13, SEP] + [0] * 9  # the file end closes the last example


def test_blank_lines_and_empty_lines_change_nothing_when_no_tokens_pending():
    with_blanks = pack(ScriptedRandom(), [None, None, [1, 2], [], None, None, [3]])
    assert with_blanks[0] == [[CLS, 1, 2, SEP] + [0] * 8, [CLS, 3, SEP] + [0] * 9]


def test_same_seed_same_examples_and_different_seed_differs():
    rng_lines = [list(range(i, i + 7 + i % 5)) for i in range(200)]
    a = pack(random.Random(1), rng_lines)
    b = pack(random.Random(1), rng_lines)
    c = pack(random.Random(2), rng_lines)
    assert a == b
    assert a != c


def test_rejects_tiny_max_length():
    with pytest.raises(ValueError, match="at least 8"):
        ExamplePacker(7, CLS, SEP, random.Random(0))
