"""The JAX path's input (data/tfrecord_io.py, no TensorFlow): examples/s delivered per number of
decode workers, and how fast a resume skips consumed batches.

    python benchmarks/jax_input.py --shards 'runs/repro_tiny/shards/*/*.tfrecord*' \
        [--workers 1,2,4] [--rounds 5]

Per round, in one process, each `--workers` count in turn (interleaved: 1, 2, 4, 1, 2, 4, ...):
`pretraining_batches(..., workers=N)` from a fresh stream, timed to its first batch (worker start
and shuffle-buffer fill) and to `--batches` batches; examples/s delivered counts from the
stream's creation (start and fill included), steady examples/s from the first batch on. Then a
stream resumed with `skip_batches=--skip` (time until its first batch = the resume cost). Medians
over rounds; the 1-minute load average before and after (a figure taken above 1.0 does not
count).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import json_out  # noqa: E402
from data.tfrecord_io import find_shards, pretraining_batches  # noqa: E402


def measure(files, args, workers):
    """(examples/s from creation, examples/s after the first batch, seconds to the first batch,
    skipped examples/s of a resume) of one fresh stream with `workers`."""
    start = time.perf_counter()
    stream = pretraining_batches(files, args.batch, args.max_seq_length, seed=0,
                                 shuffle_buffer=args.shuffle_buffer, workers=workers)
    next(stream)
    first = time.perf_counter()
    for _ in range(args.batches - 1):
        next(stream)
    end = time.perf_counter()
    stream.close()
    delivered = args.batches * args.batch / (end - start)
    steady = (args.batches - 1) * args.batch / (end - first)
    to_first = first - start
    start = time.perf_counter()
    resumed = pretraining_batches(files, args.batch, args.max_seq_length, seed=0,
                                  shuffle_buffer=args.shuffle_buffer, skip_batches=args.skip,
                                  workers=workers)
    next(resumed)
    skipped = args.skip * args.batch / (time.perf_counter() - start)
    resumed.close()
    return delivered, steady, to_first, skipped


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="glob(s) of pre-training shards")
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--skip", type=int, default=1000)
    ap.add_argument("--shuffle_buffer", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="1",
                    help="comma-separated decode worker counts, measured side by side")
    json_out.add_argument(ap)
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w]
    files = find_shards(args.shards)
    print(f"# {len(files)} shards; batch {args.batch} x {args.max_seq_length}; {args.batches} "
          f"batches; shuffle buffer {args.shuffle_buffer}; {os.cpu_count()} CPUs; load before "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    results = {w: [] for w in counts}
    for _ in range(args.rounds):
        for w in counts:
            results[w].append(measure(files, args, w))
    print(f"{'workers':>7}  {'delivered ex/s':>14}  {'steady ex/s':>11}  {'first batch s':>13}  "
          f"{'resume skipped ex/s':>19}")
    rows = []
    for w in counts:
        med = [statistics.median(r[i] for r in results[w]) for i in range(4)]
        rows.append({"workers": w, "delivered_per_s": med[0], "steady_per_s": med[1],
                     "first_batch_s": med[2], "skipped_per_s": med[3]})
        print(f"{w:>7}  {med[0]:>14,.0f}  {med[1]:>11,.0f}  {med[2]:>13.3f}  {med[3]:>19,.0f}")
    print(f"# medians of {args.rounds} rounds; delivered: from the stream's creation (worker "
          "start and shuffle-buffer fill included); steady: after the first batch; resume: "
          f"{args.skip} batches skipped before the first one")
    print(f"# load after {os.getloadavg()[0]:.2f}")
    json_out.write(args.json_out, rows, shards=len(files), batch=args.batch,
                   batches=args.batches, rounds=args.rounds)


if __name__ == "__main__":
    main()
