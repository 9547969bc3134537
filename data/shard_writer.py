"""Writing packed examples to TFRecord shards, atomically.

Shards are written under a temporary name (`<shard>.incomplete`) and renamed only when the
whole build has succeeded, so an interrupted or failed run leaves nothing that looks like a
finished shard. Shard names follow ELECTRA: `pretrain_data.tfrecord-{i}-of-{n}`.
"""
import os

import tensorflow as tf

from base import protowire
from data.example_packer import PackedExamples

SHARD_PREFIX = "pretrain_data.tfrecord"
TEMP_SUFFIX = ".incomplete"
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")


def shard_path(output_dir, index, num_shards):
    return os.path.join(str(output_dir), f"{SHARD_PREFIX}-{index}-of-{num_shards}")


def serialize_example(input_ids, input_mask, segment_ids):
    """One tf.train.Example with the three int64[max_seq_length] features."""
    return serialize_int64_examples({"input_ids": [input_ids], "input_mask": [input_mask],
                                     "segment_ids": [segment_ids]})[0]


def serialize_int64_examples(features):
    """Serialized tf.train.Examples, one per row of the integer arrays `features` (name ->
    [n, length]): byte for byte what `tf.train.Example(...).SerializeToString(deterministic=True)`
    gives (features in key order, each an Int64List of packed varints; tests/data check it), at
    a few microseconds per example instead of ~20 for building the protobuf objects. The
    varints are encoded for the whole batch at once (numpy); per example only the message
    headers, which depend on the payload sizes alone, are joined."""
    return [_example_prefix(len(body)) + body for body in _features_messages(features)]


_EXAMPLE_PREFIXES = {}   # the Example's `features` field header, by the Features message's size


def _example_prefix(size):
    prefix = _EXAMPLE_PREFIXES.get(size)
    if prefix is None:
        prefix = _EXAMPLE_PREFIXES[size] = b"\x0a" + protowire.encode_varint(size)
    return prefix


def _features_messages(features):
    """Per row of `features`, the serialized Features message: its map entries in key order
    (a serialized Example is `_example_prefix(len(message)) + message`)."""
    names = sorted(features)
    encoded = [(name.encode(), *protowire.packed_varints(features[name])) for name in names]
    count = len(encoded[0][2]) - 1 if encoded else 0
    messages = []
    for i in range(count):
        parts = []
        for key, payload, offsets in encoded:
            start, end = offsets[i], offsets[i + 1]
            parts.append(_entry_header(key, end - start))
            parts.append(payload[start:end])
        messages.append(b"".join(parts))
    return messages


_ENTRY_HEADERS = {}   # (feature name, payload size) -> the map entry's bytes before the payload


def _entry_header(key, size):
    header = _ENTRY_HEADERS.get((key, size))
    if header is None:
        # map entry { key: name, value: Feature { int64_list: Int64List { packed value } } };
        # an empty list is an empty Int64List (no packed field at all)
        values = b"\x0a" + protowire.encode_varint(size) if size else b""
        int64_list = len(values) + size
        feature = b"\x1a" + protowire.encode_varint(int64_list) + values
        value = b"\x12" + protowire.encode_varint(len(feature) + size) + feature
        name = b"\x0a" + protowire.encode_varint(len(key)) + key
        header = _ENTRY_HEADERS[key, size] = (
            b"\x0a" + protowire.encode_varint(len(name) + len(value) + size) + name + value)
    return header


_MASK_AND_SEGMENTS = {}   # (max_seq_length, len(A), len(B)) -> those two map entries


def serialize_packed(packed):
    """A `PackedExamples` batch as serialized tf.train.Examples (a list of bytes), in order:
    exactly `serialize_int64_examples` of its input_ids, input_mask and segment_ids.

    An example's input_mask and segment_ids depend only on its segment lengths, so their two map
    entries (they follow input_ids in key order) are made once per (max_seq_length, len(A),
    len(B)), by `_features_messages` itself, and reused (`_MASK_AND_SEGMENTS`, at most a few
    thousand entries); only the ids are encoded per batch (a third of the varints and of the
    per-example joins). Both engines write these bytes: the local builder (`ShardWriter.write`)
    and the Beam pipeline (data/beam_builder.py), so their examples are byte-equal."""
    if not len(packed):
        return []
    width = packed.input_ids.shape[1]
    payload, offsets = protowire.packed_varints(packed.input_ids)
    records = []
    lengths = zip(packed.first_lengths.tolist(), packed.second_lengths.tolist())
    for i, (a, b) in enumerate(lengths):
        tail = _MASK_AND_SEGMENTS.get((width, a, b))
        if tail is None:
            one = PackedExamples(packed.input_ids[i:i + 1], packed.first_lengths[i:i + 1],
                                 packed.second_lengths[i:i + 1])
            tail = _MASK_AND_SEGMENTS[width, a, b] = _features_messages(
                {"input_mask": one.input_mask(), "segment_ids": one.segment_ids()})[0]
        start, end = offsets[i], offsets[i + 1]
        head = _entry_header(b"input_ids", end - start)
        records.append(b"".join((_example_prefix(len(head) + end - start + len(tail)), head,
                                 payload[start:end], tail)))
    return records


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
