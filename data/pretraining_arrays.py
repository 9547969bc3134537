"""Pre-training examples as one compact array file: our TFRecord shards in the form a small,
TensorFlow-free machine takes (a rented GPU box with an upload limit: scripts/gpu_bundle.sh).

    write_arrays(shard_files, path, max_seq_length)      # TFRecord shards -> one .npz
    arrays = load_arrays(path)                           # {input_ids, input_mask, segment_ids}
    batches = array_batches(arrays, batch_size, seed=0, skip_batches=0)

Stored (np.savez_compressed, no pickle): `input_ids` (uint16 when every id fits, else int32),
`length` (tokens before the padding) and `length_a` (segment 0: [CLS] A [SEP]). The packer's
layout (data/example_packer.py: segment 0, then segment 1, then padding with mask 0 and
segment 0) is rebuilt from the two lengths; `write_arrays` checks every example round-trips and
refuses shards that do not (a one-line DataError naming the shard and record). About 4x smaller
than the TFRecords, 256 bytes per 128-token example before compression.

`array_batches` is the JAX path's batch stream for arrays held in memory (pre-training examples,
or fine-tuning features with their labels: every array of the dict is batched): one seeded
permutation of all examples per epoch, fixed-size global batches (the stream runs on across epochs, so no
example is dropped), `example_id` = the example's position in the stream (the masking / sampling
key, as `data/tfrecord_io.pretraining_batches` gives it), `skip_batches` for exact resume at no
cost.
"""
import io

import numpy as np

from data.errors import DataError
from base import fileio

FEATURES = ("input_ids", "input_mask", "segment_ids")


def pack(examples, where="examples"):
    """{input_ids [N, T], input_mask, segment_ids} -> the stored arrays; DataError naming
    `where` and the record when an example is not in the packer's layout."""
    ids = np.asarray(examples["input_ids"])
    mask = np.asarray(examples["input_mask"])
    segments = np.asarray(examples["segment_ids"])
    length = mask.sum(axis=1).astype(np.int32)
    length_a = (mask * (segments == 0)).sum(axis=1).astype(np.int32)
    rebuilt = unpack({"input_ids": ids, "length": length, "length_a": length_a})
    bad = np.nonzero((rebuilt["input_mask"] != mask).any(axis=1)
                     | (rebuilt["segment_ids"] != segments).any(axis=1))[0]
    if len(bad):
        raise DataError(f"{where}: record {int(bad[0])} is not [CLS] A [SEP] B [SEP] + padding "
                        "(input_mask / segment_ids out of the packer's layout)")
    if ids.size and (ids.min() < 0 or ids.max() >= 1 << 31):
        raise DataError(f"{where}: token ids outside int32")
    dtype = np.uint16 if not ids.size or ids.max() < 1 << 16 else np.int32
    return {"input_ids": ids.astype(dtype), "length": length.astype(np.uint16),
            "length_a": length_a.astype(np.uint16)}


def unpack(stored):
    """The stored arrays -> {input_ids, input_mask, segment_ids}: int32 [N, T]."""
    ids = np.asarray(stored["input_ids"]).astype(np.int32)
    positions = np.arange(ids.shape[1])[None, :]
    length = np.asarray(stored["length"]).astype(np.int32)[:, None]
    length_a = np.asarray(stored["length_a"]).astype(np.int32)[:, None]
    return {"input_ids": ids, "input_mask": (positions < length).astype(np.int32),
            "segment_ids": ((positions >= length_a) & (positions < length)).astype(np.int32)}


def write_arrays(shard_files, path, max_seq_length):
    """Every example of `shard_files` (in order) as one .npz at `path` (atomic); the count."""
    from data.tfrecord_io import read_examples
    parts = []
    for shard in shard_files:
        examples = read_examples(shard, max_seq_length)
        if len(examples["input_ids"]):
            parts.append(pack(examples, where=shard))
    if not parts:
        raise DataError(f"no examples in {', '.join(map(str, shard_files[:3]))}")
    stored = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if len({p["input_ids"].dtype for p in parts}) > 1:
        stored["input_ids"] = stored["input_ids"].astype(np.int32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **stored)
    fileio.write_bytes_atomic(path, buffer.getvalue())
    return len(stored["input_ids"])


def load_arrays(path):
    """{input_ids, input_mask, segment_ids}: int32 [N, T] of a `write_arrays` file."""
    try:
        with np.load(io.BytesIO(fileio.read_bytes(path)), allow_pickle=False) as data:
            stored = {k: data[k] for k in ("input_ids", "length", "length_a")}
    except KeyError as e:
        raise DataError(f"{path}: no array {e} (not a pre-training array file)") from None
    except (ValueError, OSError) as e:
        raise DataError(f"{path}: not a pre-training array file ({e})") from None
    if stored["input_ids"].ndim != 2 or len({len(v) for v in stored.values()}) != 1:
        raise DataError(f"{path}: arrays of mismatched shapes")
    return unpack(stored)


def array_batches(arrays, batch_size, seed=0, skip_batches=0):
    """Endless global batches of `arrays` (see the module doc); deterministic in `seed`."""
    n = len(next(iter(arrays.values())))
    if n == 0:
        raise DataError("no examples to batch")
    produced = int(skip_batches)
    orders = {}
    while True:
        positions = produced * batch_size + np.arange(batch_size, dtype=np.int64)
        epochs, slots = np.divmod(positions, n)
        for e in set(epochs.tolist()) - set(orders):
            orders = {k: v for k, v in orders.items() if k >= e - 1}
            orders[e] = np.random.default_rng([seed, e]).permutation(n)
        rows = np.array([orders[e][s] for e, s in zip(epochs.tolist(), slots.tolist())])
        batch = {name: values[rows] for name, values in arrays.items()}
        batch["example_id"] = produced * batch_size + np.arange(batch_size, dtype=np.int64)
        yield batch
        produced += 1
