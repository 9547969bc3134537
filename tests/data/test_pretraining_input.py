"""The tf.data pipeline over shards: parsing, determinism, resume, sharding, clear errors."""
import numpy as np
import pytest
import tensorflow as tf

from data.errors import DataError
from data.pretraining_input import pretraining_dataset
from data.shard_writer import serialize_example

SEQ = 8


def _write_shards(directory, num_shards=4, per_shard=12, seq=SEQ):
    """Shard s holds examples whose first id encodes (shard, index): 1000*s + i."""
    directory.mkdir(parents=True, exist_ok=True)
    for s in range(num_shards):
        path = directory / f"pretrain_data.tfrecord-{s}-of-{num_shards}"
        with tf.io.TFRecordWriter(str(path)) as w:
            for i in range(per_shard):
                ids = [1000 * s + i] + [5] * (seq - 3) + [0, 0]
                w.write(serialize_example(ids, [1] * (seq - 2) + [0, 0], [0] * seq))
    return str(directory / "pretrain_data.tfrecord-*")


def _first_ids(dataset, batches):
    return [batch["input_ids"][:, 0].numpy().tolist() for batch in dataset.take(batches)]


def test_eval_pass_parses_int32_features_in_order(tmp_path):
    pattern = _write_shards(tmp_path)
    dataset = pretraining_dataset(pattern, batch_size=5, max_seq_length=SEQ, is_training=False)
    batches = list(dataset)
    assert len(batches) == 48 // 5  # drop_remainder
    batch = batches[0]
    assert sorted(batch) == ["input_ids", "input_mask", "segment_ids"]
    assert all(v.dtype == tf.int32 and v.shape == (5, SEQ) for v in batch.values())
    assert batch["input_ids"][:, 0].numpy().tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(batch["input_mask"][0], [1] * 6 + [0, 0])


def test_training_order_is_deterministic_given_seed_and_repeats(tmp_path):
    pattern = _write_shards(tmp_path)
    make = lambda seed: pretraining_dataset(pattern, 4, SEQ, True, seed=seed, shuffle_buffer=16)
    first = _first_ids(make(3), 30)   # 120 examples > 48: repeats
    assert first == _first_ids(make(3), 30)
    assert first != _first_ids(make(4), 30)
    # 2.5 epochs (the shuffle buffer mixes epoch boundaries): every example shows up.
    assert {x for batch in first for x in batch} == {1000 * s + i for s in range(4)
                                                     for i in range(12)}


def test_skip_batches_resumes_exactly(tmp_path):
    pattern = _write_shards(tmp_path)
    full = _first_ids(pretraining_dataset(pattern, 4, SEQ, True, seed=1, shuffle_buffer=16), 20)
    resumed = _first_ids(pretraining_dataset(pattern, 4, SEQ, True, seed=1, shuffle_buffer=16,
                                             skip_batches=7), 13)
    assert resumed == full[7:]


def test_input_context_shards_files_and_divides_batch(tmp_path):
    pattern = _write_shards(tmp_path)
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        dataset = pretraining_dataset(pattern, 8, SEQ, False, input_context=context)
        batches = _first_ids(dataset, 100)
        assert all(len(batch) == 4 for batch in batches)  # global 8 over 2 replicas
        seen.append({x for batch in batches for x in batch})
    assert not seen[0] & seen[1]
    assert {x // 1000 for x in seen[0]} == {0, 2} and {x // 1000 for x in seen[1]} == {1, 3}


def test_no_matching_files(tmp_path):
    with pytest.raises(DataError, match="no pre-training shards match"):
        pretraining_dataset(str(tmp_path / "nothing-*"), 4, SEQ, True)


def test_wrong_length_names_file(tmp_path):
    pattern = _write_shards(tmp_path, seq=16)
    with pytest.raises(DataError, match=r"pretrain_data.tfrecord-0-of-4.*length 16"):
        pretraining_dataset(pattern, 4, SEQ, True)


def test_wrong_feature_names_names_file(tmp_path):
    path = tmp_path / "other.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        example = tf.train.Example(features=tf.train.Features(feature={
            "input_word_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * SEQ))}))
        writer.write(example.SerializeToString())
    with pytest.raises(DataError, match=r"other.tfrecord: features \['input_word_ids'\]"):
        pretraining_dataset(str(path), 4, SEQ, True)
