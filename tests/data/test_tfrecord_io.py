"""data/tfrecord_io.py (the TensorFlow-free reader of the JAX path) against tf.data on the same
shards: the same examples, and batches with the shape, ids and determinism the trainer needs."""
import numpy as np
import pytest

from data.errors import DataError
from data.tfrecord_io import find_shards, iter_records, pretraining_batches, read_examples
from tests.pretrain.test_run_pretraining import SEQ, tiny_data  # noqa: F401 (fixture)


def test_reader_equals_tf_parse(tiny_data):  # noqa: F811
    tf = pytest.importorskip("tensorflow")
    files = find_shards(tiny_data[0])
    spec = {k: tf.io.FixedLenFeature([SEQ], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    for path in files:
        ours = read_examples(path, SEQ)
        ref = {k: [] for k in spec}
        for record in tf.data.TFRecordDataset(path):
            example = tf.io.parse_single_example(record, spec)
            for k in spec:
                ref[k].append(example[k].numpy())
        assert len(ours["input_ids"]) == len(ref["input_ids"]) > 0
        for k in spec:
            np.testing.assert_array_equal(ours[k], np.asarray(ref[k]))


def test_batches_are_deterministic_and_resume(tiny_data):  # noqa: F811
    files = find_shards(tiny_data[0])
    first = next(pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16))
    stream = pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16)
    batches = [next(stream) for _ in range(6)]
    assert batches[0]["input_ids"].shape == (4, SEQ) and batches[0]["input_ids"].dtype == np.int32
    np.testing.assert_array_equal(batches[0]["input_ids"], first["input_ids"])
    assert [list(b["example_id"]) for b in batches[:2]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    resumed = pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16, skip_batches=4)
    for expected in batches[4:]:
        got = next(resumed)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    other = next(pretraining_batches(files, 4, SEQ, seed=4, shuffle_buffer=16))
    assert not np.array_equal(other["input_ids"], batches[0]["input_ids"])


def test_bad_shards_are_one_line_errors(tmp_path, tiny_data):  # noqa: F811
    with pytest.raises(DataError, match="no pre-training shards match"):
        find_shards(str(tmp_path / "none*"))
    path = find_shards(tiny_data[0])[0]
    data = open(path, "rb").read()
    (tmp_path / "cut").write_bytes(data[:len(data) // 2])
    with pytest.raises(DataError, match="truncated TFRecord"):
        list(iter_records(str(tmp_path / "cut")))
    with pytest.raises(DataError, match=r"has 32 input_ids values, expected 64"):
        read_examples(path, 64)
