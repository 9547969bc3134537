"""The builders' example encoder (data/shard_writer.serialize_int64_examples, base/protowire's
packed varints) gives exactly the bytes of tf.train.Example.SerializeToString(deterministic=True),
including varint widths 1 to 10 (negative int64s), empty lists and long feature names."""
import numpy as np
import pytest

from data.shard_writer import serialize_example, serialize_int64_examples

EDGES = np.array([0, 1, 127, 128, 255, 16383, 16384, 2 ** 21 - 1, 2 ** 21, 2 ** 31, 2 ** 62,
                  2 ** 63 - 1, -1, -2 ** 63], np.int64)


def reference(features, row):
    import tensorflow as tf
    feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(
        value=[int(v) for v in values[row]])) for name, values in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
        deterministic=True)


@pytest.mark.parametrize("trial", range(12))
def test_bytes_equal_tensorflows(trial):
    rng = np.random.default_rng(trial)
    n, m = int(rng.integers(1, 5)), [0, 1, 7, 128, 300][trial % 5]
    features = {"input_ids": rng.choice(EDGES, (n, m)) if trial % 2 else
                rng.integers(0, 30522, (n, m)),
                "input_mask": rng.integers(0, 2, (n, m)), "segment_ids": rng.integers(0, 2, (n, m)),
                "f" * 200: rng.integers(0, 1000, (n, m))}
    assert serialize_int64_examples(features) == [reference(features, i) for i in range(n)]


def test_one_example_and_an_empty_batch():
    ids, mask, segments = [2, 5, 3, 0], [1, 1, 1, 0], [0, 0, 0, 0]
    features = {"input_ids": [ids], "input_mask": [mask], "segment_ids": [segments]}
    assert serialize_example(ids, mask, segments) == reference(features, 0)
    empty = np.zeros([0, 4], np.int64)
    assert serialize_int64_examples({"input_ids": empty, "input_mask": empty}) == []


@pytest.mark.parametrize("width", [8, 128, 200])
def test_packed_batches_are_the_three_features_serialized(width):
    """serialize_packed reuses the input_mask / segment_ids entries per segment lengths: its
    bytes are those of serialize_int64_examples over the three arrays, batch after batch (the
    reused entries outlive a batch)."""
    from data.example_packer import PackedExamples
    from data.shard_writer import serialize_packed
    rng = np.random.default_rng(width)
    for n in (0, 1, 7, 300):
        first = rng.integers(0, width - 3, n)
        second = np.where(rng.random(n) < 0.4, 0, rng.integers(0, width, n))
        second = np.minimum(second, width - 3 - first)
        ids = rng.integers(0, 2 ** 20 if width == 200 else 30522, (n, width))
        packed = PackedExamples(ids, first, second)
        expected = [] if not n else serialize_int64_examples(
            {"input_ids": ids, "input_mask": packed.input_mask(),
             "segment_ids": packed.segment_ids()})
        assert serialize_packed(packed) == expected
