"""The JAX path's input (data/tfrecord_io.py, no TensorFlow): examples/s delivered, and how fast a
resume skips consumed batches.

    python benchmarks/jax_input.py --shards 'runs/repro_tiny/shards/*/*.tfrecord*' [--rounds 5]

Per round, in one process: `pretraining_batches` from a fresh stream, time to the first batch
and to `--batches` batches (examples/s delivered, whole batches decoded), then a stream resumed
with `skip_batches=--skip` (time until its first batch = the resume cost). Medians over rounds;
the 1-minute load average before and after (a figure taken above 1.0 does not count).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from data.tfrecord_io import find_shards, pretraining_batches  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="glob(s) of pre-training shards")
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--skip", type=int, default=1000)
    ap.add_argument("--shuffle_buffer", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    files = find_shards(args.shards)
    print(f"# {len(files)} shards; batch {args.batch} x {args.max_seq_length}; load before "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    delivered, skipped = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        stream = pretraining_batches(files, args.batch, args.max_seq_length, seed=0,
                                     shuffle_buffer=args.shuffle_buffer)
        for _ in range(args.batches):
            next(stream)
        delivered.append(args.batches * args.batch / (time.perf_counter() - start))
        start = time.perf_counter()
        next(pretraining_batches(files, args.batch, args.max_seq_length, seed=0,
                                 shuffle_buffer=args.shuffle_buffer, skip_batches=args.skip))
        skipped.append(args.skip * args.batch / (time.perf_counter() - start))
    print(f"delivered: {statistics.median(delivered):,.0f} examples/s (decoded, median of "
          f"{args.rounds}, fill of the shuffle buffer included)")
    print(f"resume:    {statistics.median(skipped):,.0f} skipped examples/s "
          f"({args.skip} batches skipped before the first one)")
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
