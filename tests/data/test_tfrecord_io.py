"""data/tfrecord_io.py (the TensorFlow-free reader of the JAX path) against tf.data on the same
shards: the same examples, and batches with the shape, ids and determinism the trainer needs."""
import re

import numpy as np
import pytest

from data.errors import DataError
from data.tfrecord_io import find_shards, iter_records, pretraining_batches, read_examples
from tests.pretrain.test_run_pretraining import SEQ, tiny_data  # noqa: F401 (fixture)


def test_reader_equals_tf_parse(tiny_data):  # noqa: F811
    tf = pytest.importorskip("tensorflow")
    files = find_shards(tiny_data[0])
    spec = {k: tf.io.FixedLenFeature([SEQ], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    for path in files:
        ours = read_examples(path, SEQ)
        ref = {k: [] for k in spec}
        for record in tf.data.TFRecordDataset(path):
            example = tf.io.parse_single_example(record, spec)
            for k in spec:
                ref[k].append(example[k].numpy())
        assert len(ours["input_ids"]) == len(ref["input_ids"]) > 0
        for k in spec:
            np.testing.assert_array_equal(ours[k], np.asarray(ref[k]))


def test_batches_are_deterministic_and_resume(tiny_data):  # noqa: F811
    files = find_shards(tiny_data[0])
    first = next(pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16))
    stream = pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16)
    batches = [next(stream) for _ in range(6)]
    assert batches[0]["input_ids"].shape == (4, SEQ) and batches[0]["input_ids"].dtype == np.int32
    np.testing.assert_array_equal(batches[0]["input_ids"], first["input_ids"])
    assert [list(b["example_id"]) for b in batches[:2]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    resumed = pretraining_batches(files, 4, SEQ, seed=3, shuffle_buffer=16, skip_batches=4)
    for expected in batches[4:]:
        got = next(resumed)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    other = next(pretraining_batches(files, 4, SEQ, seed=4, shuffle_buffer=16))
    assert not np.array_equal(other["input_ids"], batches[0]["input_ids"])


def test_bad_shards_are_one_line_errors(tmp_path, tiny_data):  # noqa: F811
    with pytest.raises(DataError, match="no pre-training shards match"):
        find_shards(str(tmp_path / "none*"))
    path = find_shards(tiny_data[0])[0]
    data = open(path, "rb").read()
    (tmp_path / "cut").write_bytes(data[:len(data) // 2])
    with pytest.raises(DataError, match="truncated TFRecord"):
        list(iter_records(str(tmp_path / "cut")))
    with pytest.raises(DataError, match=r"has 32 input_ids values, expected 64"):
        read_examples(path, 64)


def test_packed_varint_rows_round_trip_and_refuse_what_does_not_fit():
    from base.protowire import packed_varints, unpack_varint_rows
    rng = np.random.default_rng(0)
    values = rng.integers(-(1 << 62), 1 << 62, (5, 7)) >> rng.integers(0, 62, (5, 7))
    values[0, :3] = [0, 127, 128]
    payload, offsets = packed_varints(values)
    np.testing.assert_array_equal(unpack_varint_rows(payload, offsets, 7), values)
    small, small_offsets = packed_varints(np.arange(12).reshape(3, 4))   # one byte each
    np.testing.assert_array_equal(unpack_varint_rows(small, small_offsets, 4),
                                  np.arange(12).reshape(3, 4))
    assert unpack_varint_rows(payload, offsets, 6) is None               # 7 values per row
    cut = offsets[:-1] + [offsets[-1] - 1]                                # last varint cut short
    assert unpack_varint_rows(payload[:-1], cut, 7) is None
    shifted = [0, offsets[1] + 1] + offsets[2:]                           # rows split mid-value
    assert unpack_varint_rows(payload, shifted, 7) is None
    assert unpack_varint_rows(b"", [0, 0], 0).shape == (1, 0)


def _example(features):
    """A serialized tf.train.Example by hand: {name: (values, packed?)} as int64 lists, or
    bytes for a bytes_list."""
    from base.protowire import encode_varint

    def field(number, payload):
        return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload

    entries = b""
    for name, value in features.items():
        if isinstance(value, bytes):
            feature = field(1, field(1, value))                          # bytes_list
        else:
            values, packed = value
            if packed:
                inner = field(1, b"".join(encode_varint(v) for v in values))
            else:
                inner = b"".join(encode_varint(1 << 3) + encode_varint(v) for v in values)
            feature = field(3, inner)
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def test_records_in_another_layout_decode_as_protobuf_does():
    """The builders' layout is decoded at once; unpacked lists and extra features (what another
    writer may produce) go through the per-record parser, with the same result."""
    from data.tfrecord_io import _decode
    ids, mask, segments = [101, 7, 30000, 102], [1, 1, 1, 1], [0, 0, 1, 1]
    ours = _example({"input_ids": (ids, True), "input_mask": (mask, True),
                     "segment_ids": (segments, True)})
    other = _example({"segment_ids": (segments, False), "text": b"x",
                      "input_ids": (ids, False), "input_mask": (mask, True)})
    for records in ([ours, ours], [ours, other]):
        out = _decode(records, [(0, 0), (0, 1)], ["f"], 4)
        np.testing.assert_array_equal(out["input_ids"], [ids, ids])
        np.testing.assert_array_equal(out["segment_ids"], [segments, segments])
    short = _example({"input_ids": (ids[:3], True), "input_mask": (mask, True),
                      "segment_ids": (segments, True)})
    with pytest.raises(DataError, match=r"^f: record 1 has 3 input_ids values, expected 4"):
        _decode([ours, short], [(0, 0), (0, 1)], ["f"], 4)


def test_protobuf_fields_of_every_wire_type():
    """base/protowire.fields: varint, 64-bit, length-delimited and 32-bit fields; an unknown
    wire type is a ValueError (the readers turn it into a one-line error)."""
    from base.protowire import encode_varint, fields
    message = (encode_varint(1 << 3 | 0) + encode_varint(300)
               + encode_varint(2 << 3 | 1) + bytes(range(8))
               + encode_varint(3 << 3 | 2) + encode_varint(2) + b"hi"
               + encode_varint(4 << 3 | 5) + bytes(range(4)))
    assert [(n, w, bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else v)
            for n, w, v in fields(message)] == [
        (1, 0, 300), (2, 1, bytes(range(8))), (3, 2, b"hi"), (4, 5, bytes(range(4)))]
    with pytest.raises(ValueError, match="wire type 3"):
        list(fields(encode_varint(5 << 3 | 3)))


def test_fields_a_parser_must_skip_are_skipped():
    """What a parser must ignore: fields of other numbers in an Example, its Features map and an
    Int64List, and a feature that is not an int64 list (a float list) in a record of another
    layout; the decoded ids are the same as without them."""
    from base.protowire import encode_varint, fields
    from data.tfrecord_io import _decode, _int64_list, _packed_payloads

    def field(number, payload):
        return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload

    ids, mask, segments = [101, 7, 8, 102], [1, 1, 1, 1], [0, 0, 0, 0]
    plain = _example({"input_ids": (ids, True), "input_mask": (mask, True),
                      "segment_ids": (segments, True)})
    # Int64List with an unknown field 2 beside its values; Feature with a float_list (2) first
    feature = field(2, field(1, bytes(8))) + field(3, field(2, b"\x01") + field(1, b"".join(
        encode_varint(v) for v in ids)))
    assert _int64_list(feature) == ids
    assert _packed_payloads(field(1, field(1, field(1, b"input_ids") + field(2, feature)))) is None
    # unknown fields in the Example (2) and in its Features map (2)
    [(_, _, features)] = list(fields(plain))
    extra = field(2, b"x") + field(1, field(2, b"y") + bytes(features))
    out = _decode([plain, extra], [(0, 0), (0, 1)], ["f"], 4)
    np.testing.assert_array_equal(out["input_ids"], [ids, ids])


# ------------------------------------------------------------------ decode workers (workers=N)
@pytest.fixture
def worker_procs(monkeypatch):
    """The worker processes started while the test runs (real subprocesses, not forks of the
    test suite's zygote, whose start would import TensorFlow)."""
    import subprocess
    monkeypatch.setenv("CONVBERT_TEST_ZYGOTE", "0")
    started, popen = [], subprocess.Popen

    def spy(*args, **kwargs):
        proc = popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(subprocess, "Popen", spy)
    return started


def _take(stream, n):
    """The first `n` batches of a stream, then closed; or (batches before it, the error)."""
    batches = []
    try:
        for _ in range(n):
            batches.append(next(stream))
    except Exception as error:          # noqa: BLE001 (compared below)
        return batches, error
    finally:
        stream.close()
    return batches, None


def _assert_same_stream(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert sorted(a) == sorted(b)
        for key in b:
            assert a[key].dtype == b[key].dtype and a[key].flags.writeable == b[key].flags.writeable
            np.testing.assert_array_equal(a[key], b[key])


def test_workers_give_the_one_process_stream(tiny_data, worker_procs):  # noqa: F811
    """workers=2 and 3 hand out exactly the workers=1 batches, past the end of an epoch (2 x
    1,029 examples here), for several seeds and on resume; the workers are gone after close()."""
    import threading
    threads = threading.active_count()
    files = find_shards(tiny_data[0])
    for seed, skip, batch, counts in ((0, 0, 48, (2,)), (5, 0, 48, (3,)), (3, 7, 40, (2, 3))):
        def stream(workers):
            return pretraining_batches(files, batch, SEQ, seed=seed, shuffle_buffer=100,
                                       skip_batches=skip, workers=workers)
        expected, error = _take(stream(1), 50)
        assert error is None and expected[0]["example_id"][0] == skip * batch
        for workers in counts:
            got, error = _take(stream(workers), 50)
            assert error is None
            _assert_same_stream(got, expected)
    assert len(worker_procs) == 2 + 3 + 2 + 3
    assert all(proc.poll() is not None for proc in worker_procs)
    assert threading.active_count() == threads


def _write_tfrecord(path, records):
    """TFRecord framing around `records` (CRCs zero: the reader does not check them)."""
    import struct
    with open(path, "wb") as f:
        for record in records:
            f.write(struct.pack("<Q", len(record)) + bytes(4) + record + bytes(4))


def test_worker_errors_are_the_one_process_errors(tmp_path, tiny_data, worker_procs):  # noqa: F811
    """A record that does not decode (in a worker) and a file that does not read (in the reader,
    ahead of the batches in flight) end the stream at the same batch with the same one-line
    DataError as in one process, and leave no worker behind."""
    good = list(iter_records(find_shards(tiny_data[0])[0]))
    bad_record = _example({"input_ids": ([1, 2], True), "input_mask": ([1, 1], True),
                           "segment_ids": ([0, 0], True)})
    _write_tfrecord(tmp_path / "a", good[:300] + [bad_record] + good[300:600])
    _write_tfrecord(tmp_path / "b", good[600:])
    data = (tmp_path / "b").read_bytes()
    (tmp_path / "c").write_bytes(data[:len(data) - 100])                 # truncated
    for files, message, counts in (
            ([tmp_path / "a", tmp_path / "b"], r"a: record 300 has 2 input_ids", (2, 3)),
            ([tmp_path / "b", tmp_path / "c"], r"c: truncated TFRecord", (3,))):
        files = [str(f) for f in files]
        expected, expected_error = _take(pretraining_batches(
            files, 16, SEQ, seed=1, shuffle_buffer=400, workers=1), 200)
        assert isinstance(expected_error, DataError)
        assert re.search(message, str(expected_error)) and len(expected) > 0
        for workers in counts:
            got, error = _take(pretraining_batches(files, 16, SEQ, seed=1, shuffle_buffer=400,
                                                   workers=workers), 200)
            assert type(error) is DataError and str(error) == str(expected_error)
            _assert_same_stream(got, expected)
    assert all(proc.poll() is not None for proc in worker_procs)


def test_workers_end_with_the_stream(tiny_data, worker_procs):  # noqa: F811
    """A stream left early (closed, or dropped and collected) ends its workers, also those with
    answers not yet taken; a worker that dies is a RuntimeError, not a hang; a stream never
    started starts none."""
    import gc
    files = find_shards(tiny_data[0])
    never = pretraining_batches(files, 8, SEQ, workers=2)
    del never
    assert worker_procs == []
    stream = pretraining_batches(files, 64, SEQ, shuffle_buffer=100, workers=3)
    next(stream)
    stream.close()
    assert len(worker_procs) == 3 and all(p.poll() is not None for p in worker_procs)
    stream = pretraining_batches(files, 64, SEQ, shuffle_buffer=100, workers=2)
    next(stream)
    del stream
    gc.collect()
    assert len(worker_procs) == 5 and all(p.poll() is not None for p in worker_procs)
    stream = pretraining_batches(files, 8, SEQ, shuffle_buffer=100, workers=2)
    next(stream)
    worker_procs[-1].kill()
    with pytest.raises(RuntimeError, match="decode worker .* ended unexpectedly"):
        for _ in range(100):
            next(stream)
    assert all(p.poll() is not None for p in worker_procs)
    with pytest.raises(ValueError, match="workers=0"):
        next(pretraining_batches(files, 8, SEQ, workers=0))
