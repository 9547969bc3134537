"""Helpers shared by the data tests: read shards back, check example structure."""
import glob
import os

import numpy as np
import tensorflow as tf

FEATURES = ("input_ids", "input_mask", "segment_ids")


def read_examples(output_dir):
    """All examples of the finished shards in `output_dir` as int arrays [n, max_seq_length]."""
    paths = sorted(glob.glob(os.path.join(str(output_dir), "pretrain_data.tfrecord-*")))
    rows = {name: [] for name in FEATURES}
    for path in paths:
        for record in tf.data.TFRecordDataset(path):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            assert sorted(feature.keys()) == sorted(FEATURES)
            for name in FEATURES:
                rows[name].append(list(feature[name].int64_list.value))
    return {name: np.array(values, dtype=np.int64).reshape(len(values), -1)
            for name, values in rows.items()}


def assert_well_formed(examples, cls_id, sep_id, pad_id, vocab_size, max_seq_length):
    """[CLS] first, a [SEP] closing each segment, ids in range, masks/segments consistent."""
    ids, mask, segments = (examples[k] for k in FEATURES)
    assert ids.shape[1] == mask.shape[1] == segments.shape[1] == max_seq_length
    assert ((ids >= 0) & (ids < vocab_size)).all()
    lengths = mask.sum(axis=1)
    positions = np.arange(max_seq_length)[None, :]
    # input_mask is a prefix of ones; padding is [PAD] with segment 0.
    np.testing.assert_array_equal(mask, (positions < lengths[:, None]).astype(np.int64))
    assert (ids[mask == 0] == pad_id).all()
    assert (segments[mask == 0] == 0).all()
    assert (ids[:, 0] == cls_id).all()
    assert (ids[np.arange(len(ids)), lengths - 1] == sep_id).all()
    # Segment ids: 0...0 1...1 (a single switch) and the 0-part ends with [SEP].
    second_length = segments.sum(axis=1)
    first_end = lengths - second_length  # number of segment-0 real tokens
    np.testing.assert_array_equal(
        segments, ((positions >= first_end[:, None]) & (positions < lengths[:, None])).astype(int))
    assert (ids[np.arange(len(ids)), first_end - 1] == sep_id).all()
    # Exactly one [SEP] per segment and no [CLS]/[PAD] inside the real tokens.
    sep_counts = ((ids == sep_id) & (mask == 1)).sum(axis=1)
    np.testing.assert_array_equal(sep_counts, np.where(second_length > 0, 2, 1))
    assert ((ids[:, 1:] == cls_id) & (mask[:, 1:] == 1)).sum() == 0
    assert ((ids == pad_id) & (mask == 1)).sum() == 0
    assert (first_end >= 3).all()  # [CLS] at least one token [SEP]
    assert (second_length != 1).all()  # a second segment has tokens before its [SEP]
