"""TensorFlow checkpoints (tensor bundle V2: `<prefix>.index` + `<prefix>.data-*-of-*`) read with
NumPy alone, so an official TF1 ConvBERT checkpoint loads where TensorFlow is not installed
(Keras-on-JAX: a GPU box, a TPU VM on the JAX runtime).

    tensors = read_tensor_bundle("convbert_small/model.ckpt-1000000")   # {name: np.ndarray}

The format is TensorFlow's (core/util/tensor_bundle): the index is a LevelDB-format table whose
keys are the tensor names (the empty key holds the bundle header) and whose values are
`BundleEntryProto`s (dtype, shape, shard, offset, size); each tensor's bytes are stored raw,
little-endian, in its data shard. Table blocks may be snappy-compressed (decompressed here).
String tensors (TF2's object graph) and partitioned (sliced) variables are skipped: no ConvBERT
weight is one. Every file is read through base/fileio.py (local, gs://, ram://). A damaged file
is a CheckpointError naming it.
"""
import re
import struct

import numpy as np

from base import fileio
from base.protowire import fields, varint

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
# TensorFlow DataType enum -> NumPy dtype (types.proto); bfloat16 via ml_dtypes when installed.
DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 9: "<i8", 10: "?",
          17: "<u2", 19: "<f2", 22: "<u4", 23: "<u8"}
DT_BFLOAT16, DT_STRING = 14, 7


class TensorBundleError(ValueError):
    """A file of the bundle is missing or damaged (the message names it)."""


# ------------------------------------------------------------------------------- encodings
def _snappy_decompress(data):
    """Raw snappy (the table's block compression 1)."""
    length, pos = varint(data, 0)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:                                   # literal
            size = tag >> 2
            if size >= 60:
                extra = size - 59
                size = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            size += 1
            out += data[pos:pos + size]
            pos += size
            continue
        if kind == 1:
            size, offset = ((tag >> 2) & 7) + 4, ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            size, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + 2], "little")
            pos += 2
        else:
            size, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        if offset == 0 or offset > len(out):
            raise TensorBundleError("corrupt snappy block")
        for _ in range(size):                           # copies may overlap their own output
            out.append(out[-offset])
    if len(out) != length:
        raise TensorBundleError("corrupt snappy block (length)")
    return bytes(out)


# ------------------------------------------------------------------------------- the table
def _block(data, offset, size):
    """The contents of the block at `offset` (its 5-byte trailer: compression type + crc)."""
    if offset + size + 5 > len(data):
        raise TensorBundleError("block beyond the end of the file")
    contents = data[offset:offset + size]
    compression = data[offset + size]
    if compression == 1:
        return _snappy_decompress(contents)
    if compression != 0:
        raise TensorBundleError(f"unknown block compression {compression}")
    return bytes(contents)


def _block_entries(block):
    """[(key, value)] of a table block (prefix-compressed keys, restart array at the end)."""
    if len(block) < 4:
        raise TensorBundleError("block too short")
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * num_restarts
    entries, pos, key = [], 0, b""
    while pos < end:
        shared, pos = varint(block, pos)
        unshared, pos = varint(block, pos)
        value_size, pos = varint(block, pos)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        entries.append((key, block[pos:pos + value_size]))
        pos += value_size
    return entries


def read_table(data):
    """{key: value} of a LevelDB-format table (TensorFlow's checkpoint index)."""
    if len(data) < FOOTER_SIZE:
        raise TensorBundleError("too short for a checkpoint index")
    footer = data[-FOOTER_SIZE:]
    if struct.unpack_from("<Q", footer, 40)[0] != TABLE_MAGIC:
        raise TensorBundleError("not a checkpoint index (bad table magic)")
    _, pos = varint(footer, 0)                 # metaindex handle: unused
    _, pos = varint(footer, pos)
    index_offset, pos = varint(footer, pos)
    index_size, pos = varint(footer, pos)
    table = {}
    for _, handle in _block_entries(_block(data, index_offset, index_size)):
        offset, p = varint(handle, 0)
        size, _ = varint(handle, p)
        table.update(_block_entries(_block(data, offset, size)))
    return table


def _entry(value):
    """(dtype enum, shape, shard id, offset, size, sliced) of a BundleEntryProto."""
    dtype, shape, shard, offset, size, sliced = 0, [], 0, 0, 0, False
    for number, _, v in fields(value):
        if number == 1:
            dtype = v
        elif number == 2:
            for dim_number, _, dim in fields(v):
                if dim_number == 2:
                    shape.append(dict((n, x) for n, _, x in fields(dim)).get(1, 0))
        elif number == 3:
            shard = v
        elif number == 4:
            offset = v
        elif number == 5:
            size = v
        elif number == 7:
            sliced = True
    return dtype, shape, shard, offset, size, sliced


def _numpy_dtype(enum):
    if enum == DT_BFLOAT16:
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    if enum not in DTYPES:
        raise TensorBundleError(f"unsupported tensor dtype {enum}")
    return np.dtype(DTYPES[enum])


# ------------------------------------------------------------------------------- public
def latest_prefix(directory):
    """The prefix named by `<directory>/checkpoint` (TensorFlow's CheckpointState text), else the
    last `*.index` in the directory; None when there is neither."""
    state = fileio.join(directory, "checkpoint")
    if fileio.exists(state):
        match = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', fileio.read_text(state),
                          re.MULTILINE)
        if match:
            name = match.group(1)
            prefix = name if name.startswith("/") or fileio.is_url(name) else \
                fileio.join(directory, name)
            if fileio.exists(prefix + ".index"):
                return prefix
    indexes = sorted(fileio.glob(fileio.join(directory, "*.index")))
    return indexes[-1][:-len(".index")] if indexes else None


def read_tensor_bundle(prefix):
    """{name: array} of every numeric, unpartitioned tensor of the checkpoint at `prefix`."""
    index_path = prefix + ".index"
    try:   # TensorBundleError is a ValueError, as is an unknown wire type; truncation: IndexError
        table = read_table(fileio.read_bytes(index_path))
        header = dict((n, v) for n, _, v in fields(table.pop(b"", b"")))
        entries = {key: _entry(value) for key, value in table.items()}
    except (ValueError, struct.error, IndexError) as e:
        raise TensorBundleError(f"{index_path}: {e}") from None
    num_shards = header.get(1, 1)
    if header.get(2, 0) != 0:
        raise TensorBundleError(f"{index_path}: a big-endian checkpoint")
    shards, tensors = {}, {}
    for key, (dtype, shape, shard, offset, size, sliced) in entries.items():
        if dtype == DT_STRING or sliced:
            continue
        if shard not in shards:
            path = f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"
            if not fileio.exists(path):
                raise TensorBundleError(f"{path}: data shard missing")
            shards[shard] = (path, fileio.read_bytes(path))
        path, data = shards[shard]
        np_dtype = _numpy_dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if size != count * np_dtype.itemsize or offset + size > len(data):
            raise TensorBundleError(f"{path}: tensor {key.decode()} does not fit its entry "
                                    f"(offset {offset}, {size} bytes, shape {shape})")
        tensors[key.decode()] = np.frombuffer(data, np_dtype, count, offset).reshape(shape).copy()
    return tensors
