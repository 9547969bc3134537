"""The protobuf wire format in plain Python: enough to decode `tf.train.Example`s
(data/tfrecord_io.py) and TensorFlow checkpoint index entries (model/tensor_bundle.py) where
TensorFlow is not installed, to encode the shard builders' examples without a protobuf object
per example (data/shard_writer.py) and TensorBoard's `Event`s (training/summaries.py); and the
TFRecord framing around a record (length, masked CRC32C of the length, the record, its masked
CRC32C), which TensorBoard's readers check. Reading a truncated buffer raises IndexError, an
unknown wire type ValueError."""
import struct


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


def key(number, wire):
    """The key of field `number` with wire type `wire` (0 varint, 1 fixed64, 2 length-delimited,
    5 fixed32)."""
    return encode_varint(number << 3 | wire)


def varint_field(number, value):
    """A varint field (int32/int64/enum/bool; a negative int takes ten bytes, as int64 does)."""
    return key(number, 0) + encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def bytes_field(number, payload):
    """A length-delimited field: bytes, a UTF-8 string (str) or an encoded message."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    return key(number, 2) + encode_varint(len(payload)) + payload


def double_field(number, value):
    return key(number, 1) + struct.pack("<d", value)


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


def unpack_varint_rows(payload, offsets, length):
    """The inverse of `packed_varints` for rows of `length` values each: int64 [n, length] from
    the packed varints of row i at payload[offsets[i]:offsets[i + 1]], decoded with numpy at
    once. None when a row does not hold exactly `length` complete varints of at most ten bytes
    (the caller's per-record parser then says which record and why)."""
    import numpy as np
    buf = np.frombuffer(payload, np.uint8)
    offsets = np.asarray(offsets, np.int64)
    rows = len(offsets) - 1
    if rows == 0 or length == 0:
        return np.zeros((rows, length), np.int64) if not len(buf) else None
    last = buf[offsets[1:] - 1] if len(buf) and (offsets[1:] > offsets[:-1]).all() else None
    if last is None or (last & 0x80).any():           # an empty row, or one ending mid-varint
        return None
    ends = np.flatnonzero((buf & 0x80) == 0)          # the last byte of each value
    if len(ends) != rows * length:
        return None
    if not np.array_equal(np.searchsorted(ends, offsets[1:] - 1), np.arange(1, rows + 1) * length
                          - 1):                        # each row's values end inside it
        return None
    starts = np.concatenate([[0], ends[:-1] + 1])
    widths = ends - starts + 1
    if widths.max() > 10:
        return None
    shift = np.arange(len(buf), dtype=np.int64) - np.repeat(starts, widths)
    parts = (buf & 0x7F).astype(np.uint64) << (7 * shift).astype(np.uint64)
    values = np.add.reduceat(parts, starts)            # disjoint bits: the sum is the OR
    return values.view(np.int64).reshape(rows, length)


# TFRecord framing: what tf.io.TFRecordWriter writes around each record, and TensorBoard's event
# files use. CRC32C (Castagnoli) in plain Python: a table lookup per byte, for the small records
# written here (TensorBoard events); the shard builders frame with TensorFlow.

def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """The CRC32C of `data` (bytes)."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    """TFRecord's masked CRC32C: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(record):
    """`record` (bytes) in TFRecord framing: uint64 length, masked CRC32C of those 8 bytes, the
    record, its masked CRC32C (little-endian)."""
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", masked_crc32c(length)) + record
            + struct.pack("<I", masked_crc32c(record)))
