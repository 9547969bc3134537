"""Our pre-training TFRecord shards read WITHOUT TensorFlow: the input of the JAX path.

The GPU machine lent to some sessions has JAX but no TensorFlow, and a Keras-on-JAX TPU VM need
not install it either. The shards are plain files: TFRecord framing (length, its CRC, the record,
its CRC) around `tf.train.Example` protos whose three features (input_ids, input_mask,
segment_ids) are int64 lists. This module reads exactly that, with numpy and a few lines of
protobuf wire-format decoding, and batches it the way `data/pretraining_input.py` does for
tf.data: files in a seeded random order, a seeded shuffle buffer, endless repetition, fixed-size
batches (no remainder), `skip_batches` for exact resume. The order is decided in the calling
process alone; the decoding of each batch's records into arrays can be handed to worker
processes (`workers=N`), which changes nothing in the stream but its speed.

It is checked against `tf.data` + `tf.io.parse_example` on the same shards in
tests/data/test_tfrecord_io.py. CRCs are not verified (a truncated or garbled record still fails
loudly: its length or its protobuf does not parse).
"""
import collections
import itertools
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np

from base.protowire import fields, unpack_varint_rows, varint

from data.errors import DataError
from base import fileio

FEATURES = ("input_ids", "input_mask", "segment_ids")


def find_shards(file_patterns):
    """Sorted shard files matching a glob pattern, a comma-separated string of them or a list
    (local, or gs:// etc. where TensorFlow is installed: base/fileio.py), leaving out unfinished
    (`.incomplete`) files and the builder's JSON; DataError if none."""
    if isinstance(file_patterns, str):
        file_patterns = [p for p in file_patterns.split(",") if p]
    files = set()
    for pattern in file_patterns:
        files.update(fileio.glob(str(pattern)))
    files = sorted(f for f in files if not f.endswith(".incomplete") and not f.endswith(".json"))
    if not files:
        raise DataError(f"no pre-training shards match {', '.join(map(str, file_patterns))}")
    check_interrupted_build(files)
    return files


_SHARD_NAME = re.compile(r"^(.*)-(\d+)-of-(\d+)$")


def check_interrupted_build(files):
    """Shards `<prefix>-i-of-n` of a set whose missing members lie beside them as unfinished
    `.incomplete` files: a build killed while publishing its shards. DataError naming the first
    such shard. (A set matched only in part is otherwise the user's choice, e.g. a held-out
    shard kept out with `-[01]-of-3`.)"""
    sets = {}
    for path in files:
        match = _SHARD_NAME.match(path)
        if match:
            prefix, index, total = match.group(1), int(match.group(2)), int(match.group(3))
            sets.setdefault((prefix, total), set()).add(index)
    for (prefix, total), present in sorted(sets.items()):
        for index in sorted(set(range(total)) - present):
            if fileio.exists(f"{prefix}-{index}-of-{total}.incomplete"):
                raise DataError(f"{prefix}-{index}-of-{total}: missing, only its unfinished "
                                f".incomplete file is there ({len(present)} of {total} shards "
                                "of this set are published): an interrupted build; rerun it")


def iter_records(path):
    """The raw records of one TFRecord file, streamed."""
    with fileio.open_read(path) as f:
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise DataError(f"{path}: truncated TFRecord header")
            (length,) = struct.unpack("<Q", header[:8])
            record = _read_at_most(f, length)    # a garbled length is not an allocation
            if len(record) < length or len(f.read(4)) < 4:
                raise DataError(f"{path}: truncated TFRecord (record of {length} bytes)")
            yield record


def _read_at_most(f, length, chunk=1 << 24):
    """`length` bytes of `f`, or fewer where it ends; read in chunks, so a length field of a
    garbled file (up to 2**64) asks for no more memory than the file holds."""
    if length <= chunk:
        return f.read(length)
    parts = []
    while length > 0:
        part = f.read(min(length, chunk))
        if not part:
            break
        parts.append(part)
        length -= len(part)
    return b"".join(parts)


def count_records(path):
    """The number of records of one TFRecord file, walking its length headers only (a seek per
    record, no record read); DataError naming the file, the record and its byte offset when the
    file ends inside a record (a truncated copy, or a file that is not TFRecord framing)."""
    count, offset = 0, 0
    with fileio.open_read(path) as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(0)
        while offset < size:
            header = f.read(12)
            length = struct.unpack("<Q", header[:8])[0] if len(header) == 12 else None
            if length is None or offset + 12 + length + 4 > size:
                raise DataError(f"{path}: truncated TFRecord: record {count} at byte offset "
                                f"{offset} runs past the end of the file ({size} bytes)")
            offset += 12 + length + 4
            f.seek(offset)
            count += 1
    return count


def _payload(number, wire, value):
    """The bytes of a field that must be length-delimited (a message, a string); another wire
    type is a malformed Example, as for protobuf's own parser."""
    if wire != 2:
        raise ValueError(f"field {number}: wire type {wire}, expected length-delimited")
    return value


def _int64_list(feature):
    """Feature{int64_list = 3: Int64List{value = 1 (packed or not)}} -> list of ints."""
    values = []
    for number, wire, value in fields(feature):
        if number != 3:
            continue
        for inner_number, inner_wire, inner in fields(_payload(number, wire, value)):
            if inner_number != 1:
                continue
            if inner_wire == 0:
                values.append(inner)
            else:                                   # packed
                inner = _payload(inner_number, inner_wire, inner)
                pos = 0
                while pos < len(inner):
                    v, pos = varint(inner, pos)
                    values.append(v)
    return [v - (1 << 64) if v >= 1 << 63 else v for v in values]


def _feature_entries(record):
    """(key, serialized Feature) of each entry of a serialized tf.train.Example's feature map,
    with protobuf's defaults; ValueError / IndexError when it is not an Example."""
    for number, wire, features in fields(record):           # Example.features = 1
        if number != 1:
            continue
        for entry_number, wire, entry in fields(_payload(number, wire, features)):
            if entry_number != 1:                              # Features.feature = 1 (map entries)
                continue
            key, value = "", None                             # protobuf's defaults
            for n, w, v in fields(_payload(entry_number, wire, entry)):
                if n == 1:
                    key = bytes(_payload(n, w, v)).decode("utf-8")
                elif n == 2:
                    value = _payload(n, w, v)
            yield key, value


def parse_example(record, names=FEATURES):
    """{name: list of ints} of the int64 features `names` (None: all) of one serialized
    tf.train.Example."""
    return {key: _int64_list(value) for key, value in _feature_entries(record)
            if (names is None or key in names) and value is not None}


def check_shard(path, max_seq_length):
    """Checks the first record of a shard: exactly the three features, max_seq_length long.
    Returns whether the shard has a record at all."""
    for record in itertools.islice(iter_records(path), 1):
        example = _parse(record, path, 0, names=None)
        if sorted(example) != sorted(FEATURES):
            raise DataError(f"shard {path}: features {sorted(example)}, expected "
                            f"{sorted(FEATURES)}")
        for name in FEATURES:
            if len(example[name]) != max_seq_length:
                raise DataError(f"shard {path}: feature {name} has length "
                                f"{len(example[name])}, expected max_seq_length={max_seq_length}")
        return True
    return False


def largest_token_id(path, max_records=256):
    """The largest input id in the first `max_records` records of a shard (-1 if none)."""
    largest = -1
    for index, record in enumerate(itertools.islice(iter_records(path), max_records)):
        ids = _parse(record, path, index, names=("input_ids",)).get("input_ids")
        if ids:
            largest = max(largest, max(ids))
    return largest


def _parse(record, path, index, names=FEATURES):
    try:
        return parse_example(record, names)
    except (IndexError, ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: record {index} is not a tf.train.Example") from None


def read_examples(path, max_seq_length):
    """Every example of one shard as {name: int32 array [n, max_seq_length]}."""
    records = list(iter_records(path))
    return _decode(records, [(0, i) for i in range(len(records))], [path], max_seq_length)


def default_workers():
    """The decode workers `pretraining_batches` uses by default: none beside the reader itself
    (1) on a machine of one or two usable cores, else min(4, cores - 1), a core left to the reader
    and the training loop."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 1 if cores <= 2 else min(4, cores - 1)


def pretraining_batches(files, batch_size, max_seq_length, seed=0, shuffle_buffer=10000,
                        skip_batches=0, workers=None):
    """Endless global batches {input_ids, input_mask, segment_ids: int32 [B, T], example_id:
    int64 [B]} (example_id = the example's position in this stream: the masking / sampling
    RNG key, as in pretrain/task.py). Deterministic in `seed`; `skip_batches` resumes.

    The shuffle buffer holds the records still serialized and only a batch that is handed out is
    decoded, so the batches skipped on resume cost a file read and a few RNG draws each, not a
    protobuf decode per example.

    `workers` (None: `default_workers()`): with 1, this process decodes each batch as it hands it
    out; with more, that many worker processes decode the batches ahead (two each at most), while
    this process still reads the files and draws every batch's records from the shuffle buffer.
    The stream is the same for any `workers`: the same batches in the same order, the same
    `example_id`s, the same DataError at the same batch. The workers start at the first batch
    asked for and end when the stream does (an error, `close()`, or the generator collected)."""
    workers = default_workers() if workers is None else workers
    if not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers={workers!r}: expected an integer >= 1")
    plan = _batch_records(files, batch_size, shuffle_buffer, seed, skip_batches)
    if workers == 1:
        decoded = (_decode(records, where, files, max_seq_length) for records, where in plan)
    else:
        decoded = _decoded_by_workers(plan, files, max_seq_length, int(workers))
    try:
        for index, batch in enumerate(decoded, start=skip_batches):
            yield _with_ids(batch, index, batch_size)
    finally:
        decoded.close()                 # its workers end now, not whenever it is collected


def _batch_records(files, batch_size, shuffle_buffer, seed, skip_batches):
    """(serialized records, their (file index, record index)) of each batch from `skip_batches`
    on, endlessly: the order of the stream, decided here alone (files in a seeded order, a seeded
    shuffle buffer), whoever decodes the records."""
    rng = np.random.default_rng(seed)
    buffer = np.empty(0, object)            # serialized records
    where = np.zeros((0, 2), np.int64)      # (file index, record index) of each, for errors
    produced = 0
    while True:
        order = rng.permutation(len(files)) if len(files) > 1 else [0]
        for file_index in order:
            records = list(iter_records(files[file_index]))
            fresh = np.empty(len(records), object)
            fresh[:] = records
            buffer = np.concatenate([buffer, fresh])
            where = np.concatenate([where, np.stack([np.full(len(records), file_index),
                                                     np.arange(len(records))], axis=1)])
            while len(buffer) >= max(shuffle_buffer, batch_size):
                picks = rng.choice(len(buffer), size=batch_size, replace=False)
                keep = np.ones(len(buffer), bool)
                keep[picks] = False
                if produced >= skip_batches:
                    yield buffer[picks], where[picks]
                buffer, where = buffer[keep], where[keep]
                produced += 1
        if produced == 0 and len(buffer) == 0:
            raise DataError(f"no examples in {', '.join(files[:3])}")


# ---------------------------------------------------------------------- decode workers
# Worker processes are fresh interpreters (subprocess, `python -c`), not multiprocessing: no fork
# of a process that JAX or TensorFlow made multithreaded, no re-import of the caller's __main__
# script in each worker (multiprocessing's spawn does that), and no pickle: a job and its result
# cross the pipes as raw bytes (a header of two int64s, then the payload).
_JOB, _OK, _DATA_ERROR, _OTHER_ERROR = 0, 1, 2, 3
_HEADER = struct.Struct("<qq")          # (kind, payload length)
_DEPTH = 2                              # batches in flight per worker


def _decoded_by_workers(plan, files, max_seq_length, workers):
    """The decoded batches of `plan`, in order, decoded by `workers` worker processes: batch k by
    worker k % workers, at most `_DEPTH` batches ahead per worker. An error of the plan itself
    (a file that does not read) is raised where the one-process stream raises it: after the
    batches before it."""
    pool = _WorkerPool(files, max_seq_length, workers)
    in_flight = collections.deque()     # the worker of each batch sent, in stream order
    sent, failure = 0, None
    try:
        while True:
            while failure is None and len(in_flight) < workers * _DEPTH:
                try:
                    records, where = next(plan)
                except Exception as error:      # raised once the batches before it are out
                    failure = error
                    break
                pool.send(sent % workers, records, where)
                in_flight.append(sent % workers)
                sent += 1
            if not in_flight:
                raise failure
            yield pool.receive(in_flight.popleft())
    finally:
        pool.close()
        plan.close()


class _WorkerPool:
    """`workers` decode processes (`_serve`), each fed jobs through its stdin and answering in
    the same order on its stdout."""

    def __init__(self, files, max_seq_length, workers):
        self.max_seq_length = max_seq_length
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        setup = json.dumps({"files": [str(f) for f in files],
                            "max_seq_length": max_seq_length}).encode()
        self.procs = []
        try:
            for _ in range(workers):
                proc = subprocess.Popen(
                    [sys.executable, "-c", "from data.tfrecord_io import _serve; _serve()"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                self.procs.append(proc)
                _write_frame(proc.stdin, _JOB, setup)
        except BaseException:
            self.close()
            raise

    def send(self, worker, records, where):
        """Hands worker `worker` one batch to decode: its records and their (file, record)."""
        records = list(records)
        lengths = np.fromiter(map(len, records), np.int64, len(records))
        payload = b"".join([struct.pack("<q", len(records)), lengths.tobytes(),
                            np.ascontiguousarray(where, np.int64).tobytes()] + records)
        try:
            _write_frame(self.procs[worker].stdin, _JOB, payload)
        except (BrokenPipeError, OSError):
            pass                        # it ended: receive() says how

    def receive(self, worker):
        """The next decoded batch of worker `worker`, or its error raised here: the DataError it
        met (the same line as in one process), else a RuntimeError."""
        proc = self.procs[worker]
        kind, payload = _read_frame(proc.stdout)
        if kind == _OK:
            values = np.frombuffer(payload, np.int32).reshape(len(FEATURES), -1,
                                                              self.max_seq_length)
            return dict(zip(FEATURES, values))
        if kind == _DATA_ERROR:
            raise DataError(payload.decode())
        if kind == _OTHER_ERROR:
            raise RuntimeError(f"a TFRecord decode worker failed: {payload.decode()}")
        status = proc.poll()
        raise RuntimeError(f"a TFRecord decode worker (pid {proc.pid}) ended unexpectedly"
                           + (f" (exit status {status})" if status is not None else ""))

    def close(self):
        """Ends every worker and waits for it: its stdin closed (it stops at the end of its
        jobs), its stdout closed (an answer it is writing fails), killed if still there."""
        for proc in self.procs:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def _write_frame(stream, kind, payload):
    stream.write(_HEADER.pack(kind, len(payload)))
    stream.write(payload)
    stream.flush()


def _read_frame(stream):
    """(kind, payload) of the next frame, or (None, b"") where the stream ended. The payload is
    a bytearray: the arrays made on it are writable, as those decoded in this process are."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None, b""
    kind, length = _HEADER.unpack(header)
    payload = bytearray(length)
    view, done = memoryview(payload), 0
    while done < length:
        count = stream.readinto(view[done:])
        if not count:
            return None, b""
        done += count
    return kind, payload


def _serve():
    """A decode worker's loop: the setup frame (files, max_seq_length), then per job frame the
    decoded batch [3, n, T] int32, or the error's message. Ends at the end of its stdin, or when
    its answers can no longer be written. Three threads: one reads the jobs as they come, so the
    reader process never waits to hand one over; the main thread decodes; one writes the
    answers, so the next decode never waits for the reader process to take the last answer."""
    import queue
    import signal
    import threading
    # The reader's process owns the workers: an interrupt meant for it (Ctrl-C reaches the whole
    # process group) or its SIGTERM checkpoint-and-stop must not end them first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    jobs, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    sys.stdout = sys.stderr             # a stray print must not enter the answers
    _, setup = _read_frame(jobs)
    if not setup:
        os._exit(0)
    setup = json.loads(setup)
    files, max_seq_length = setup["files"], setup["max_seq_length"]
    inbox, outbox = queue.Queue(), queue.Queue()    # bounded by the reader's _DEPTH

    def read_jobs():
        while True:
            kind, payload = _read_frame(jobs)
            if kind != _JOB:
                inbox.put(None)
                return
            inbox.put(payload)

    def write_answers():
        try:
            while True:
                answer = outbox.get()
                if answer is None:
                    break
                _write_frame(answers, *answer)
        except OSError:                 # the reader closed the pipe: it needs no more answers
            pass
        os._exit(0)                     # here, without flushing pipes that are gone

    threading.Thread(target=read_jobs, daemon=True).start()
    threading.Thread(target=write_answers, daemon=True).start()
    while True:
        payload = inbox.get()
        if payload is None:
            break
        outbox.put(_decode_job(payload, files, max_seq_length))
    outbox.put(None)
    threading.Event().wait()            # the writer ends the process


def _decode_job(payload, files, max_seq_length):
    """(kind, payload) of the answer to one job frame."""
    payload = bytes(payload)            # records as bytes, as the reader holds them
    (n,) = struct.unpack_from("<q", payload)
    lengths = np.frombuffer(payload, np.int64, n, 8)
    where = np.frombuffer(payload, np.int64, 2 * n, 8 + 8 * n).reshape(n, 2)
    ends = np.cumsum(lengths) + 8 + 24 * n
    records = [payload[end - length:end] for end, length in zip(ends.tolist(), lengths.tolist())]
    try:
        batch = _decode(records, where, files, max_seq_length)
    except DataError as error:
        return _DATA_ERROR, str(error).encode()
    except Exception as error:          # a bug, reported rather than a silent dead worker
        return _OTHER_ERROR, f"{type(error).__name__}: {error}".encode()
    return _OK, b"".join(batch[name].tobytes() for name in FEATURES)


def _packed_payloads(record):
    """{feature name: its packed int64 payload} of a serialized Example in the layout our
    builders write (every feature an int64 list, packed); None for any other layout."""
    out = {}
    for key, value in _feature_entries(record):
        payload = b""
        for n, w, int64_list in fields(value or b""):         # Feature.int64_list = 3
            if n != 3 or w != 2:
                return None
            for inner_number, inner_wire, inner in fields(int64_list):
                if inner_number != 1 or inner_wire != 2:      # not packed
                    return None
                payload += inner
        out[key] = payload
    return out


def _decode_fast(records, max_seq_length):
    """{name: int32 [n, max_seq_length]} of records in our builders' layout, the varints decoded
    with numpy at once (base/protowire.unpack_varint_rows); None when any record is not in that
    layout or not as expected (the per-record parser then names it)."""
    payloads = {name: [] for name in FEATURES}
    for record in records:
        try:
            example = _packed_payloads(record)
        except (IndexError, ValueError):                 # (UnicodeDecodeError is a ValueError)
            return None
        if example is None or any(name not in example for name in FEATURES):
            return None
        for name in FEATURES:
            payloads[name].append(example[name])
    out = {}
    for name in FEATURES:
        sizes = np.fromiter((len(p) for p in payloads[name]), np.int64, len(records))
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        values = unpack_varint_rows(b"".join(payloads[name]), offsets, max_seq_length)
        if values is None or (len(values) and (values.min() < -(1 << 31)
                                               or values.max() >= 1 << 31)):
            return None
        out[name] = values.astype(np.int32)
    return out


def _decode(records, where, files, max_seq_length):
    """{name: int32 [len(records), max_seq_length]} of serialized records: at once where they
    are all in our builders' layout (the common case), else record by record, naming the first
    record that is not as expected."""
    if len(records):
        fast = _decode_fast(records, max_seq_length)
        if fast is not None:
            return fast
    out = {name: np.empty((len(records), max_seq_length), np.int32) for name in FEATURES}
    for row, (record, (file_index, index)) in enumerate(zip(records, where)):
        path = files[file_index]
        example = _parse(record, path, index)
        for name in FEATURES:
            values = example.get(name)
            if values is None or len(values) != max_seq_length:
                raise DataError(f"{path}: record {index} has {len(values or [])} {name} values, "
                                f"expected {max_seq_length} (another --max_seq_length?)")
            if min(values, default=0) < -(1 << 31) or max(values, default=0) >= 1 << 31:
                raise DataError(f"{path}: record {index} has a {name} value outside int32")
            out[name][row] = values
    return out


def _with_ids(batch, index, batch_size):
    ids = index * batch_size + np.arange(batch_size, dtype=np.int64)
    return {**batch, "example_id": ids}
