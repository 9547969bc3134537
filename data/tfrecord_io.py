"""Our pre-training TFRecord shards read WITHOUT TensorFlow: the input of the JAX path.

The GPU machine lent to some sessions has JAX but no TensorFlow, and a Keras-on-JAX TPU VM need
not install it either. The shards are plain files: TFRecord framing (length, its CRC, the record,
its CRC) around `tf.train.Example` protos whose three features (input_ids, input_mask,
segment_ids) are int64 lists. This module reads exactly that, with numpy and a few lines of
protobuf wire-format decoding, and batches it the way `data/pretraining_input.py` does for
tf.data: files in a seeded random order, a seeded shuffle buffer, endless repetition, fixed-size
batches (no remainder), `skip_batches` for exact resume.

It is checked against `tf.data` + `tf.io.parse_example` on the same shards in
tests/data/test_tfrecord_io.py. CRCs are not verified (a truncated or garbled record still fails
loudly: its length or its protobuf does not parse).
"""
import io
import struct

import numpy as np

from data.errors import DataError
from model import fileio

FEATURES = ("input_ids", "input_mask", "segment_ids")


def find_files(patterns):
    """Sorted files matching a comma-separated list of glob patterns (local, or gs:// etc. where
    TensorFlow is installed: model/fileio.py); DataError if none."""
    files = []
    for pattern in [p for p in str(patterns).split(",") if p]:
        files += fileio.glob(pattern)
    files = [f for f in files if not f.endswith(".incomplete")]
    if not files:
        raise DataError(f"no TFRecord files match {patterns}")
    return files


def iter_records(path):
    """The raw records of one TFRecord file (a bucket file is read whole first)."""
    with (io.BytesIO(fileio.read_bytes(path)) if fileio.is_url(path) else open(path, "rb")) as f:
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise DataError(f"{path}: truncated TFRecord header")
            (length,) = struct.unpack("<Q", header[:8])
            record = f.read(length)
            if len(record) < length or len(f.read(4)) < 4:
                raise DataError(f"{path}: truncated TFRecord (record of {length} bytes)")
            yield record


def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of a protobuf message; value = bytes for length-
    delimited fields, an int for varints."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, buf[pos:pos + length]
            pos += length
        elif wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 5:
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _int64_list(feature):
    """Feature{int64_list = 3: Int64List{value = 1 (packed or not)}} -> list of ints."""
    values = []
    for number, wire, value in _fields(feature):
        if number != 3:
            continue
        for inner_number, inner_wire, inner in _fields(value):
            if inner_number != 1:
                continue
            if inner_wire == 0:
                values.append(inner)
            else:                                   # packed
                pos = 0
                while pos < len(inner):
                    v, pos = _varint(inner, pos)
                    values.append(v)
    return [v - (1 << 64) if v >= 1 << 63 else v for v in values]


def parse_example(record, names=FEATURES):
    """{name: list of ints} of the int64 features `names` of one serialized tf.train.Example."""
    out = {}
    for number, _, features in _fields(record):           # Example.features = 1
        if number != 1:
            continue
        for entry_number, _, entry in _fields(features):   # Features.feature = 1 (map entries)
            if entry_number != 1:
                continue
            key = value = None
            for n, _, v in _fields(entry):
                if n == 1:
                    key = bytes(v).decode("utf-8")
                elif n == 2:
                    value = v
            if key in names and value is not None:
                out[key] = _int64_list(value)
    return out


def read_examples(path, max_seq_length, names=FEATURES):
    """Every example of one shard as {name: int32 array [n, max_seq_length]}."""
    rows = {name: [] for name in names}
    for index, record in enumerate(iter_records(path)):
        try:
            example = parse_example(record, names)
        except (IndexError, ValueError, UnicodeDecodeError):
            raise DataError(f"{path}: record {index} is not a tf.train.Example") from None
        for name in names:
            values = example.get(name)
            if values is None or len(values) != max_seq_length:
                raise DataError(f"{path}: record {index} has {len(values or [])} {name} values, "
                                f"expected {max_seq_length} (another --max_seq_length?)")
            rows[name].append(values)
    return {name: np.asarray(v, np.int32).reshape(-1, max_seq_length) for name, v in rows.items()}


def pretraining_batches(files, batch_size, max_seq_length, seed=0, shuffle_buffer=10000,
                        skip_batches=0):
    """Endless global batches {input_ids, input_mask, segment_ids: int32 [B, T], example_id:
    int64 [B]} (example_id = the example's position in this stream: the masking / sampling
    RNG key, as in pretrain/task.py). Deterministic in `seed`; `skip_batches` resumes."""
    rng = np.random.default_rng(seed)
    buffer = {name: np.zeros((0, max_seq_length), np.int32) for name in FEATURES}
    produced = epoch = 0
    while True:
        order = rng.permutation(len(files)) if len(files) > 1 else [0]
        for file_index in order:
            examples = read_examples(files[file_index], max_seq_length)
            buffer = {n: np.concatenate([buffer[n], examples[n]]) for n in FEATURES}
            while len(buffer["input_ids"]) >= max(shuffle_buffer, batch_size):
                buffer, batch = _take(buffer, batch_size, rng)
                if produced >= skip_batches:
                    yield _with_ids(batch, produced, batch_size)
                produced += 1
        epoch += 1
        if produced == 0 and len(buffer["input_ids"]) == 0:
            raise DataError(f"no examples in {', '.join(files[:3])}")


def _take(buffer, batch_size, rng):
    picks = rng.choice(len(buffer["input_ids"]), size=batch_size, replace=False)
    keep = np.ones(len(buffer["input_ids"]), bool)
    keep[picks] = False
    return ({n: v[keep] for n, v in buffer.items()}, {n: v[picks] for n, v in buffer.items()})


def _with_ids(batch, index, batch_size):
    ids = index * batch_size + np.arange(batch_size, dtype=np.int64)
    return {**batch, "example_id": ids}
