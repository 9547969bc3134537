"""Writing packed examples to TFRecord shards, atomically.

Shards are written under a temporary name (`<shard>.incomplete`) and renamed only when the
whole build has succeeded, so an interrupted or failed run leaves nothing that looks like a
finished shard. Shard names follow ELECTRA: `pretrain_data.tfrecord-{i}-of-{n}`.
"""
import os

import tensorflow as tf

SHARD_PREFIX = "pretrain_data.tfrecord"
TEMP_SUFFIX = ".incomplete"
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")


def shard_path(output_dir, index, num_shards):
    return os.path.join(str(output_dir), f"{SHARD_PREFIX}-{index}-of-{num_shards}")


def _int64_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def serialize_example(input_ids, input_mask, segment_ids):
    """One tf.train.Example with the three int64[max_seq_length] features."""
    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": _int64_feature(input_ids),
        "input_mask": _int64_feature(input_mask),
        "segment_ids": _int64_feature(segment_ids),
    }))
    # deterministic: map fields (the feature dict) in key order, so the same examples give
    # byte-identical shards (protobuf does not fix map order otherwise).
    return example.SerializeToString(deterministic=True)


def serialize_packed(packed):
    """A `PackedExamples` batch as serialized tf.train.Examples (a list of bytes), in order.

    Both engines write these bytes: the local builder (`ShardWriter.write`) and the Beam
    pipeline (data/beam_builder.py), so their examples are byte-equal."""
    if not len(packed):
        return []
    ids = packed.input_ids.tolist()
    masks = packed.input_mask().tolist()
    segments = packed.segment_ids().tolist()
    return [serialize_example(row_ids, row_mask, row_segments)
            for row_ids, row_mask, row_segments in zip(ids, masks, segments)]


class ShardWriter:
    """Writes examples round-robin over the shards `shard_indices` of `num_shards` (temp names)."""

    def __init__(self, output_dir, shard_indices, num_shards):
        self.temp_paths = [shard_path(output_dir, i, num_shards) + TEMP_SUFFIX
                           for i in shard_indices]
        self._writers = [tf.io.TFRecordWriter(p) for p in self.temp_paths]
        self._next = 0

    def write(self, packed):
        """Writes a `PackedExamples` batch."""
        writers, count = self._writers, len(self._writers)
        for record in serialize_packed(packed):
            writers[self._next % count].write(record)
            self._next += 1

    def close(self):
        for writer in self._writers:
            writer.close()
        return self.temp_paths


def commit_shards(temp_paths):
    """Renames finished temp shards to their final names; returns the final paths."""
    final_paths = []
    for temp in temp_paths:
        final = temp[:-len(TEMP_SUFFIX)]
        tf.io.gfile.rename(temp, final, overwrite=True)
        final_paths.append(final)
    return final_paths


def remove_files(paths):
    for path in paths:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
