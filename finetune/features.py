"""GLUE examples -> fixed-length classification features, in ELECTRA's input format.

Each example becomes `[CLS] a [SEP] b [SEP]` (or `[CLS] a [SEP]` for single sentences), with
segment id 0 up to the first [SEP] and 1 after it. A pair is truncated longest-first to
max_seq_length - 3 tokens (a single sentence to max_seq_length - 2), then *always* padded to
max_seq_length: ConvBERT's span-based convolution sees the padding positions, so outputs (and
parity with the reference implementations) depend on the fixed length.

Tokenization goes through the toolkit tokenizer (`data.tokenization.Tokenizer`): any object with
`.tokenize(list_of_texts) -> list[list[int]]` and `.cls_id`, `.sep_id`, `.pad_id` works.
"""
from __future__ import annotations

import numpy as np

from finetune.glue.readers import InputExample, add_swapped_pairs
from finetune.glue.tasks import get_task

# Re-exported: MRPC/STS-B train on both sentence orders when ELECTRA's double_unordered is on.
double_unordered = add_swapped_pairs

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "label_ids")


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Pop tokens off the end of the longer sequence until the pair fits (in place).

    Same rule as BERT/ELECTRA's `_truncate_seq_pair`: on a tie, `tokens_b` loses a token.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def pack_example(ids_a, ids_b, max_seq_length: int, cls_id: int, sep_id: int, pad_id: int):
    """(input_ids, input_mask, segment_ids), each a list of exactly max_seq_length ints."""
    ids_a = list(ids_a)
    ids_b = list(ids_b) if ids_b is not None else []   # an empty b packs as a single (ELECTRA)
    if ids_b:
        if max_seq_length < 4:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a pair")
        truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
    else:
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a sentence")
        ids_a = ids_a[:max_seq_length - 2]
    input_ids = [cls_id] + ids_a + [sep_id]
    segment_ids = [0] * len(input_ids)
    if ids_b:
        input_ids += ids_b + [sep_id]
        segment_ids += [1] * (len(ids_b) + 1)
    input_mask = [1] * len(input_ids)
    padding = max_seq_length - len(input_ids)
    return (input_ids + [pad_id] * padding, input_mask + [0] * padding,
            segment_ids + [0] * padding)


def label_id(task_name: str, label):
    """Class index of a label string, the float score for STS-B; 0 for unlabeled (test) rows."""
    task = get_task(task_name)
    if task.is_regression:
        # Raw 0..5 score; ELECTRA's regression head trains on label / max_value (task.max_value).
        return 0.0 if label is None else float(label)
    if label is None:
        return 0
    return task.label_list.index(str(label))


def convert_examples_to_features(examples: list[InputExample], task_name: str, tokenizer,
                                 max_seq_length: int) -> dict[str, np.ndarray]:
    """{"input_ids", "input_mask", "segment_ids": int32 [N, max_seq_length],
    "label_ids": int32 [N] (float32 [N] for STS-B)} -- ready for tf.data.from_tensor_slices."""
    task = get_task(task_name)
    # One batched call per side: the toolkit tokenizer is vectorised over texts.
    ids_a = tokenizer.tokenize([e.text_a for e in examples]) if examples else []
    has_b = [bool(e.text_b) for e in examples]   # ELECTRA: an empty text_b packs as a single
    ids_b_list = tokenizer.tokenize([e.text_b for e, b in zip(examples, has_b) if b]) \
        if any(has_b) else []
    ids_b_iter = iter(ids_b_list)
    n = len(examples)
    arrays = {name: np.zeros((n, max_seq_length), dtype=np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    for i, example in enumerate(examples):
        ids_b = next(ids_b_iter) if has_b[i] else None
        packed = pack_example(ids_a[i], ids_b, max_seq_length,
                              tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
        for name, values in zip(("input_ids", "input_mask", "segment_ids"), packed):
            arrays[name][i] = values
    label_dtype = np.float32 if task.is_regression else np.int32
    arrays["label_ids"] = np.array([label_id(task.name, e.label) for e in examples],
                                   dtype=label_dtype)
    return arrays
