"""ELECTRA's pre-training example packing (with its 2020-03 segment fix), on token-id arrays.

Sentences (lines) accumulate until they hold `target_length` tokens, or a blank line ends the
document; the accumulated sentences become one example `[CLS] A [SEP] B [SEP]`:

* 10% of examples are single-segment (first-segment target 100000), otherwise the first segment
  aims for (target_length - 3) // 2 tokens;
* a sentence goes to A while A is empty, while it fits under A's target, or - only while B is
  still empty and A is under its target - with probability 1/2; otherwise it goes to B.
  (The official ConvBERT builder tests `first_segment or ...`, so almost every example ends up
  single-segment; ELECTRA fixed that in commit 1ed0852. We use the fixed rule.)
* A is cut to max_length - 2 tokens and B to max_length - len(A) - 3;
* after each example, 5% of the time the next target is randint(5, max_length).

Random draws happen in exactly ELECTRA's order with a `random.Random`, so one seed gives one
output. The per-line work is a few integer operations; token ids are only touched by numpy.
"""
import random

import numpy as np

SINGLE_SEGMENT_PROBABILITY = 0.1
SHORT_TARGET_PROBABILITY = 0.05
SINGLE_SEGMENT_TARGET = 100000


class PackedExamples:
    """Examples as arrays: input_ids [n, max_length] plus the lengths of segments A and B."""

    def __init__(self, input_ids, first_lengths, second_lengths):
        self.input_ids = input_ids
        self.first_lengths = first_lengths
        self.second_lengths = second_lengths

    def __len__(self):
        return len(self.input_ids)

    @property
    def num_real_tokens(self):
        """Per example: [CLS] + A + [SEP] (+ B + [SEP] when B is non-empty)."""
        second = np.where(self.second_lengths > 0, self.second_lengths + 1, 0)
        return self.first_lengths + 2 + second

    def input_mask(self):
        positions = np.arange(self.input_ids.shape[1])
        return (positions[None, :] < self.num_real_tokens[:, None]).astype(np.int64)

    def segment_ids(self):
        positions = np.arange(self.input_ids.shape[1])
        second_start = (self.first_lengths + 2)[:, None]
        return ((positions[None, :] >= second_start)
                & (positions[None, :] < self.num_real_tokens[:, None])).astype(np.int64)


class ExamplePacker:
    """Packs a stream of tokenized lines into examples; call `finish_document` at each file end."""

    def __init__(self, max_length, cls_id, sep_id, rng):
        if max_length < 8:
            raise ValueError(f"max_seq_length must be at least 8, got {max_length}")
        self._max_length = max_length
        self._cls_id = cls_id
        self._sep_id = sep_id
        self._rng = rng if rng is not None else random.Random()
        self._target_length = max_length
        self._sentences = []        # id arrays of the example being accumulated
        self._sentence_lengths = []
        self._current_length = 0
        self._rows = []             # finished examples: (first ids, second ids)

    def add_lines(self, flat_ids, row_lengths):
        """Adds tokenized lines: `row_lengths[i]` ids of `flat_ids` per line, -1 for a blank line.

        A blank line ends the current example (a document boundary) when it has any tokens.
        """
        offset = 0
        sentences, lengths = self._sentences, self._sentence_lengths
        for length in row_lengths.tolist():
            if length < 0:
                if self._current_length:
                    self._create_example()
                    sentences, lengths = self._sentences, self._sentence_lengths
                continue
            if length == 0:  # a line with no tokens changes nothing (as in ELECTRA)
                continue
            sentences.append(flat_ids[offset:offset + length])
            lengths.append(length)
            offset += length
            self._current_length += length
            if self._current_length >= self._target_length:
                self._create_example()
                sentences, lengths = self._sentences, self._sentence_lengths

    def finish_document(self):
        """End of a file: ELECTRA closes the pending example here."""
        if self._current_length:
            self._create_example()

    def _create_example(self):
        rng = self._rng
        if rng.random() < SINGLE_SEGMENT_PROBABILITY:
            first_target = SINGLE_SEGMENT_TARGET
        else:
            first_target = (self._target_length - 3) // 2  # room for [CLS] and two [SEP]
        first, second = [], []
        first_length = second_length = 0
        for sentence, length in zip(self._sentences, self._sentence_lengths):
            if (first_length == 0
                    or first_length + length < first_target
                    or (second_length == 0 and first_length < first_target
                        and rng.random() < 0.5)):
                first.append(sentence)
                first_length += length
            else:
                second.append(sentence)
                second_length += length
        first_ids = np.concatenate(first)[:self._max_length - 2]
        second_ids = (np.concatenate(second)[:max(0, self._max_length - len(first_ids) - 3)]
                      if second else first_ids[:0])
        self._rows.append((first_ids, second_ids))

        self._sentences, self._sentence_lengths, self._current_length = [], [], 0
        if rng.random() < SHORT_TARGET_PROBABILITY:
            self._target_length = rng.randint(5, self._max_length)
        else:
            self._target_length = self._max_length

    def take_examples(self):
        """The examples finished so far (removed from the packer) as `PackedExamples`."""
        rows, self._rows = self._rows, []
        count = len(rows)
        input_ids = np.zeros([count, self._max_length], np.int64)
        first_lengths = np.zeros([count], np.int64)
        second_lengths = np.zeros([count], np.int64)
        cls_id, sep_id = self._cls_id, self._sep_id
        for i, (first_ids, second_ids) in enumerate(rows):
            row = input_ids[i]
            a, b = len(first_ids), len(second_ids)
            row[0] = cls_id
            row[1:1 + a] = first_ids
            row[1 + a] = sep_id
            if b:
                row[2 + a:2 + a + b] = second_ids
                row[2 + a + b] = sep_id
            first_lengths[i], second_lengths[i] = a, b
        return PackedExamples(input_ids, first_lengths, second_lengths)
