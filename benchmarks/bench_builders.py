"""Whole-process wall time of the shard builders on one corpus: the local builder, the Beam
DirectRunner and (optionally) ELECTRA's `build_pretraining_dataset.py`, each with 1 and 2 processes.

  .venv/bin/python benchmarks/bench_builders.py [--passes 3] [--electra_dir DIR] [--out FILE]

What a user waits for: each build is one `subprocess.run` of the command line, so interpreter and
TensorFlow start-up are included. The builds run interleaved (every configuration once per pass,
then the next pass) so that a change in the machine's load hits all of them alike; the table
reports the median over passes. CPU is user + system of the process tree (`RUSAGE_CHILDREN`
deltas). Before each build the harness waits (up to `--settle_max_s`) for the 1-minute load to
fall below `--settle_load`, so the previous build's own load does not count against the next;
`os.getloadavg()` is printed before and after every build: a build that started at a 1-minute load
above 1.0 on this 2-core machine does not count for ratios.

ELECTRA's builder is not part of this repository: pass `--electra_dir` pointing to a checkout of
google-research/electra (it needs `six`). Both builders use their default 1,000 output shards.
Each result is appended to `--out` as one JSON line, so an interrupted run keeps what it measured.
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO.parent / "shared"))
CORPUS = SHARED / "data" / "corpus" / "gutenberg-en"
VOCAB = SHARED / "data" / "vocab" / "bert-uncased-vocab.txt"


def commands(corpus, vocab, out, electra_dir):
    """Configuration name -> (argv, working directory)."""
    ours = [sys.executable, str(REPO / "build_pretraining_dataset.py"), f"--corpus_dir={corpus}",
            f"--vocab_file={vocab}", f"--output_dir={out}", "--max_seq_length=128",
            "--num_shards=1000", "--noprogress"]   # ELECTRA's count (ours: sized to the corpus)
    runs = {
        "local, 1 process": (ours + ["--num_processes=1"], REPO),
        "local, 2 processes": (ours + ["--num_processes=2"], REPO),
        "Beam DirectRunner, 1 worker": (ours + ["--runner=DirectRunner"], REPO),
        "Beam DirectRunner, 2 workers": (ours + ["--runner=DirectRunner", "--direct_num_workers=2",
                                                 "--direct_running_mode=multi_processing"], REPO),
    }
    if electra_dir:
        electra = [sys.executable, "build_pretraining_dataset.py", f"--corpus-dir={corpus}",
                   f"--vocab-file={vocab}", f"--output-dir={out}", "--max-seq-length=128"]
        runs["ELECTRA, 1 process"] = (electra + ["--num-processes=1"], electra_dir)
        runs["ELECTRA, 2 processes"] = (electra + ["--num-processes=2"], electra_dir)
    return runs


def count_examples(out):
    """Serialized examples in every TFRecord file under `out` (framing only, no parsing)."""
    from data.tfrecord_io import count_records
    total = 0
    for path in sorted(pathlib.Path(out).iterdir()):
        if path.suffix != ".json":
            total += count_records(str(path))
    return total


def settle(load, max_s):
    """Wait (at most `max_s`) until the 1-minute load falls below `load`: the previous build's
    own load decays before the next one starts, so "load before" measures other jobs."""
    deadline = time.monotonic() + max_s
    while os.getloadavg()[0] >= load and time.monotonic() < deadline:
        time.sleep(5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--electra_dir", default=None)
    parser.add_argument("--corpus_dir", default=str(CORPUS))
    parser.add_argument("--settle_load", type=float, default=0.6,
                        help="before each build, wait until the 1-minute load is below this")
    parser.add_argument("--settle_max_s", type=float, default=120)
    parser.add_argument("--out", default=None, help="append one JSON line per build here")
    parser.add_argument("--builds", default=None,
                        help="only these builds: names as in the table, separated by ';' "
                             "('local, 1 process;ELECTRA, 1 process'); default all")
    args = parser.parse_args()
    wanted = args.builds and {b.strip() for b in args.builds.split(";")}
    if not pathlib.Path(args.corpus_dir).exists() or not VOCAB.exists():
        sys.exit(f"needs {args.corpus_dir} and {VOCAB} (../shared)")
    sys.path.insert(0, str(REPO))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    results = {}
    scratch = tempfile.mkdtemp(prefix="bench_builders_")
    try:
        out = os.path.join(scratch, "shards")
        for pass_no in range(1, args.passes + 1):
            for name, (argv, cwd) in commands(args.corpus_dir, VOCAB, out,
                                              args.electra_dir).items():
                if wanted and name not in wanted:
                    continue
                shutil.rmtree(out, ignore_errors=True)
                settle(args.settle_load, args.settle_max_s)
                load_before = os.getloadavg()[0]
                usage = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                load_after = os.getloadavg()[0]
                if proc.returncode:
                    sys.exit(f"{name} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
                cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
                row = {"pass": pass_no, "build": name, "wall_s": round(wall, 2),
                       "cpu_s": round(cpu, 2), "load_before": round(load_before, 2),
                       "load_after": round(load_after, 2), "examples": count_examples(out),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
                results.setdefault(name, []).append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as f:  # a local results log, not a user path
                        f.write(json.dumps(row) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("\n| build | median wall | median CPU | walls (load before → after) | examples |")
    print("|---|---:|---:|---|---:|")
    for name, rows in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f} s ({r['load_before']:.2f} → {r['load_after']:.2f})"
                          for r in rows)
        print(f"| {name} | {statistics.median(r['wall_s'] for r in rows):.1f} s | "
              f"{statistics.median(r['cpu_s'] for r in rows):.1f} s | {walls} | "
              f"{rows[0]['examples']:,} |")


if __name__ == "__main__":
    main()
