"""The protobuf wire format, read with plain Python: enough to decode `tf.train.Example`s
(data/tfrecord_io.py) and TensorFlow checkpoint index entries (model/tensor_bundle.py) where
TensorFlow is not installed. A truncated buffer raises IndexError, an unknown wire type
ValueError."""


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
