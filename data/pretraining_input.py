"""tf.data input pipeline over the pre-training shards.

Files are found (data/tfrecord_io.py: `find_shards`, `check_shard`) and read (TFRecordDataset)
through tf.io.gfile, so gs:// paths work. With a
seed the order of batches is deterministic (file shuffle, deterministic interleave, seeded
shuffle buffer), and `skip_batches` drops the first N batches, so a resumed run sees exactly
the batches it would have seen.
"""
import tensorflow as tf

from data.shard_writer import FEATURE_NAMES
# Finding and checking shards needs no TensorFlow: one home for both backends.
from data.tfrecord_io import check_shard, find_shards

DEFAULT_SHUFFLE_BUFFER = 10000
DEFAULT_CYCLE_LENGTH = 4


def _parse_batch(serialized, max_seq_length):
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}
    parsed = tf.io.parse_example(serialized, spec)
    return {name: tf.cast(value, tf.int32) for name, value in parsed.items()}


def pretraining_dataset(file_patterns, batch_size, max_seq_length, is_training,
                        input_context=None, seed=None, shuffle_buffer=DEFAULT_SHUFFLE_BUFFER,
                        skip_batches=0, cycle_length=DEFAULT_CYCLE_LENGTH, check_files=True):
    """Batches {input_ids, input_mask, segment_ids}: int32 [batch, max_seq_length].

    Args:
      file_patterns: glob pattern(s) of shards (str, comma-separated str, or list).
      batch_size: the global batch size; with `input_context` each input pipeline yields
        `input_context.get_per_replica_batch_size(batch_size)` examples per batch.
      is_training: shuffle files and records and repeat forever; otherwise one ordered pass.
      input_context: a tf.distribute.InputContext; pipeline i reads every n-th file (or every
        n-th record when there are fewer files than pipelines).
      seed: makes the order deterministic (None: a different order each run).
      skip_batches: drop this many batches first (exact resume after N steps).
      check_files: check the first record of every shard up front, naming a bad file.
    """
    files = find_shards(file_patterns)
    if check_files:
        for path in files:
            check_shard(path, max_seq_length)
    per_pipeline_batch = batch_size
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_records = False
    if input_context is not None and input_context.num_input_pipelines > 1:
        per_pipeline_batch = input_context.get_per_replica_batch_size(batch_size)
        if len(files) >= input_context.num_input_pipelines:
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        else:
            shard_records = True

    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.repeat()
        dataset = dataset.interleave(
            tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)
    if shard_records:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training and shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(per_pipeline_batch, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)  # before parsing: skipped batches cost only I/O
    dataset = dataset.map(lambda records: _parse_batch(records, max_seq_length),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
