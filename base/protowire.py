"""The protobuf wire format in plain Python: enough to decode `tf.train.Example`s
(data/tfrecord_io.py) and TensorFlow checkpoint index entries (model/tensor_bundle.py) where
TensorFlow is not installed, and to encode the shard builders' examples without a protobuf object
per example (data/shard_writer.py). Reading a truncated buffer raises IndexError, an unknown wire
type ValueError."""


def varint(buf, pos):
    """(value, position after it) of the base-128 varint at `pos`."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message; value = bytes for length-
    delimited and fixed32/64 fields, an int for varints."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = varint(buf, pos)
            yield number, wire, buf[pos:pos + length]
            pos += length
        elif wire == 0:
            value, pos = varint(buf, pos)
            yield number, wire, value
        elif wire == 5:
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


# Writing: what the shard builders need to serialize tf.train.Examples without building a
# protobuf object per example (data/shard_writer.py).

def encode_varint(value):
    """The base-128 varint of a non-negative int, as bytes."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def packed_varints(values):
    """Each row of the integer array `values` [n, m] as protobuf packed varints: (payload bytes of
    all rows back to back, offsets [n + 1] where row i is payload[offsets[i]:offsets[i + 1]]).
    Negative values take ten bytes (two's complement), as protobuf's int64 does."""
    import numpy as np
    values = np.asarray(values)
    values = values.reshape(len(values), -1) if values.size else values.reshape(len(values), 0)
    unsigned = values.astype(np.int64).view(np.uint64).reshape(-1)
    rows, length = values.shape
    top = int(unsigned.max()) if unsigned.size else 0
    if top < 0x80:  # one byte per value: input masks, segment ids
        return unsigned.astype(np.uint8).tobytes(), [i * length for i in range(rows + 1)]
    widths = np.ones(unsigned.shape, np.int64)
    for k in range(1, 10):
        if top < 1 << (7 * k):
            break
        widths += unsigned >= np.uint64(1 << (7 * k))
    ends = np.cumsum(widths)
    starts = ends - widths
    out = np.zeros(int(ends[-1]), np.uint8)      # not empty: an empty array returned above
    for k in range(int(widths.max())):
        sel = widths > k
        group = (unsigned[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (widths[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[sel] + k] = (group | more).astype(np.uint8)
    row_sizes = widths.reshape(values.shape).sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(row_sizes)]).tolist()
    return out.tobytes(), offsets
