"""The GPU run's bundle: everything `bash scripts/gpu_run.sh` needs on a machine with no network and
no TensorFlow (a rented GPU box, a cluster node), in one git-ignored folder of at most 60 MiB.

    python -m reproduce.gpu_bundle --shared_dir=../shared --output_dir=gpu_bundle \
        [--python_version=3.12] [--wheels_from=DIR] [--build_processes=2]
    (bash scripts/gpu_bundle.sh: the same after setting up .venv)

    gpu_bundle/
      bundle.json            what is here: vocab size and special ids, max_seq_length, example
                             counts, file sizes, the inputs (relative to the repository)
      pretrain_train.npz     pre-training examples of every shard but the held-out one
      pretrain_heldout.npz   the held-out shard: the last shard of the first corpus, as
                             run_reproduction.py holds it out (data/pretraining_arrays.py)
      features/              GLUE train/dev features of the five tasks + manifest.json
                             (python -m finetune.features; finetune/feature_files.py)
      wheels/                keras, optree and namex for the GPU machine's CPython
                             (`--python_version`, default 3.12, recorded in bundle.json as
                             "python") on x86-64, the versions installed here (pip download from
                             the package index, or with `--wheels_from=DIR` from that folder of
                             wheels alone: an offline build; no other package is missing there;
                             scripts/gpu_run.sh refuses them for another Python in one line)

The shards are built exactly as the CPU reproduction builds them (reproduce/pipeline.py: the
BERT uncased vocab, 16 shards per corpus directory, build_pretraining_dataset.py's seed), under
`--build_dir`; a rerun reuses what is there.
"""
import json
import os
import subprocess
import sys
import time

from base import fileio

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_BUNDLE_MIB = 60
WHEELS = ("keras", "optree", "namex")
PYTHON_VERSION = "3.12"     # the GPU machines' Python so far (docs/RESULTS.md §11-§13)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                   "manylinux2014_x86_64", "manylinux1_x86_64")


class BundleError(RuntimeError):
    """A missing input or a bundle over its size; one line."""


def relative(path):
    """`path` relative to the repository: what bundle.json and the reports name."""
    return os.path.relpath(os.path.abspath(path), REPO_ROOT)


def build_shards(corpus_dirs, vocab_file, build_dir, log, processes):
    """(training shards, held-out shards) built as reproduce/pipeline.py builds them, by
    `processes` builder processes per corpus."""
    from reproduce.pipeline import Reproduction
    from reproduce.recipes import get_recipe
    repro = Reproduction(get_recipe("small"), build_dir, corpus_dirs, glue_dir=None,
                         vocab_file=vocab_file, log=log, build_processes=processes)
    repro.build_shards()
    return repro.shard_files()


def special_ids(vocab_file):
    from data.vocab import load_vocab
    tokens = load_vocab(vocab_file)
    index = {t: i for i, t in enumerate(tokens)}
    return len(tokens), {"cls_id": index["[CLS]"], "sep_id": index["[SEP]"],
                         "mask_id": index["[MASK]"]}


def download_wheels(directory, log, python_version=PYTHON_VERSION, wheels_from=None):
    """The installed keras / optree / namex versions as CPython `python_version` x86-64 wheels
    (the folder's earlier wheels removed first: one Python's wheels per bundle), from the package
    index or, given `wheels_from`, from that folder alone (no network)."""
    from importlib import metadata
    fileio.makedirs(directory)
    for old in fileio.glob(os.path.join(directory, "*.whl")):
        fileio.remove(old)
    pins = [f"{name}=={metadata.version(name)}" for name in WHEELS]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", directory,
           *pins]
    for platform in WHEEL_PLATFORMS:
        cmd[cmd.index("-d"):cmd.index("-d")] = ["--platform", platform]
    if wheels_from:
        cmd[cmd.index("-d"):cmd.index("-d")] = ["--no-index", "--find-links", wheels_from]
    source = f" from {wheels_from}" if wheels_from else ""
    log(f"[wheels] pip download {' '.join(pins)} for CPython {python_version}{source}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BundleError(f"pip download {' '.join(pins)} for CPython {python_version} failed: "
                          f"{last}")
    return pins


def directory_size(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def build_bundle(shared_dir, output_dir, build_dir, log=print, tasks=None,
                 python_version=PYTHON_VERSION, wheels_from=None, build_processes=2):
    from data.pretraining_arrays import write_arrays
    from reproduce.recipes import GLUE_TASKS
    data = os.path.join(shared_dir, "data")
    corpus_dirs = [os.path.join(data, "corpus", d) for d in ("gutenberg-en", "wikitext-2-raw")]
    vocab_file = os.path.join(data, "vocab", "bert-uncased-vocab.txt")
    glue_dir = os.path.join(data, "glue")
    for path in corpus_dirs + [vocab_file, glue_dir]:
        if not os.path.exists(path):
            raise BundleError(f"{path}: not found (the bundle is built from ../shared/data)")
    tasks = list(tasks or GLUE_TASKS)
    started = time.time()
    os.makedirs(output_dir, exist_ok=True)
    train, heldout = build_shards(corpus_dirs, vocab_file, build_dir, log, build_processes)
    max_seq_length = 128
    counts = {}
    for name, shards in (("pretrain_train.npz", train), ("pretrain_heldout.npz", heldout)):
        counts[name] = write_arrays(shards, os.path.join(output_dir, name), max_seq_length)
        log(f"[arrays] {name}: {counts[name]:,} examples from {len(shards)} shard(s)")
    features_dir = os.path.join(output_dir, "features")
    cmd = [sys.executable, "-m", "finetune.features", f"--task_names={','.join(tasks)}",
           f"--data_dir={glue_dir}", f"--vocab_file={vocab_file}",
           f"--max_seq_length={max_seq_length}", "--splits=train,dev",
           f"--output_dir={features_dir}"]
    log(f"[features] {' '.join(cmd[1:])}")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BundleError(f"python -m finetune.features failed: {last}")
    pins = download_wheels(os.path.join(output_dir, "wheels"), log, python_version, wheels_from)
    vocab_size, ids = special_ids(vocab_file)
    sizes = {name: directory_size(os.path.join(output_dir, name))
             if os.path.isdir(os.path.join(output_dir, name))
             else os.path.getsize(os.path.join(output_dir, name))
             for name in ("pretrain_train.npz", "pretrain_heldout.npz", "features", "wheels")}
    bundle = {"format": 1, "made": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "corpus_dirs": [relative(d) for d in corpus_dirs],
              "vocab_file": relative(vocab_file), "glue_dir": relative(glue_dir),
              "vocab_size": vocab_size, "special_ids": ids, "max_seq_length": max_seq_length,
              "pretrain_file": "pretrain_train.npz", "heldout_file": "pretrain_heldout.npz",
              "train_examples": counts["pretrain_train.npz"],
              "heldout_examples": counts["pretrain_heldout.npz"],
              "train_shards": len(train), "features_dir": "features", "tasks": tasks,
              "wheels": pins, "python": python_version, "bytes": sizes, "build_seconds": round(time.time() - started, 1)}
    fileio.write_text_atomic(os.path.join(output_dir, "bundle.json"),
                             json.dumps(bundle, indent=2) + "\n")
    total = directory_size(output_dir)
    log(f"bundle {output_dir}: {total / 2**20:.1f} MiB ("
        + ", ".join(f"{k} {v / 2**20:.1f}" for k, v in sizes.items()) + ")")
    if total > MAX_BUNDLE_MIB * 2**20:
        raise BundleError(f"{output_dir}: {total / 2**20:.1f} MiB, over the {MAX_BUNDLE_MIB} MiB "
                          "a GPU call takes")
    return bundle


def main(argv=None):
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared_dir", default=os.path.join(REPO_ROOT, "..", "shared"))
    ap.add_argument("--output_dir", default=os.path.join(REPO_ROOT, "gpu_bundle"))
    ap.add_argument("--build_dir", default=os.path.join(REPO_ROOT, "runs", "gpu_bundle_build"))
    ap.add_argument("--python_version", default=PYTHON_VERSION,
                    help="the GPU machine's CPython (X.Y) the wheels are for (default "
                         f"{PYTHON_VERSION})")
    ap.add_argument("--wheels_from", default=None,
                    help="a folder of wheels to take keras / optree / namex from instead of the "
                         "package index (pip --no-index --find-links: an offline build)")
    ap.add_argument("--build_processes", type=int, default=2,
                    help="builder processes per corpus for the pre-training shards (default 2; "
                         "1: in the builder's own process, without a TensorFlow import per "
                         "worker)")
    args = ap.parse_args(argv)
    from data.errors import DataError
    try:
        build_bundle(args.shared_dir, args.output_dir, args.build_dir,
                     log=lambda m: print(m, flush=True), python_version=args.python_version,
                     wheels_from=args.wheels_from, build_processes=args.build_processes)
    except (BundleError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
