"""Throughput of the pre-training data builder, in tokens per second on one core.

  .venv/bin/python benchmarks/bench_data_builder.py [--repeats 5]

Corpus: WikiText-2 raw valid+test (../shared/data/corpus/wikitext-2-raw), BERT uncased vocab,
max_seq_length 128, blanks_separate_docs=false, one process. Timed: reading the files,
tokenizing, packing, serializing and writing the shards (`pack_files`); not timed: start-up
(imports, building the tokenizer). Reports WordPiece tokens of the corpus per second (the unit
of ELECTRA's ~140k tokens/s) and real tokens written per second.

"Per core" divides by the CPU time of this process (all its threads; TF is held to one
thread), which stays meaningful on a shared, loaded machine; wall-clock rates are printed too
and equal it on an idle core.
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import json_out  # noqa: E402

SHARED = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO.parent / "shared"))
CORPUS = SHARED / "data" / "corpus" / "wikitext-2-raw"
VOCAB = SHARED / "data" / "vocab" / "bert-uncased-vocab.txt"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    json_out.add_argument(parser)
    args = parser.parse_args()
    if not VOCAB.exists() or not CORPUS.exists():
        sys.exit(f"needs {CORPUS} and {VOCAB} (../shared)")

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)  # one core, as asked
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from data.pretraining_builder import BuildConfig, JobStats, pack_files
    from data.shard_writer import ShardWriter
    from data.tokenization import Tokenizer

    files = [str(CORPUS / "wiki.valid.raw"), str(CORPUS / "wiki.test.raw")]
    tokenizer = Tokenizer(VOCAB)
    with tempfile.TemporaryDirectory() as out:
        config = BuildConfig(corpus_dir=str(CORPUS), output_dir=out, vocab_file=str(VOCAB),
                             blanks_separate_docs=False, num_shards=1, progress=False)
        timings, cpu_timings = [], []
        for repeat in range(args.repeats + 1):  # the first run warms up (op caches, page cache)
            stats = JobStats()
            writer = ShardWriter(out, [0], 1)
            start, cpu_start = time.perf_counter(), time.process_time()
            pack_files(files, tokenizer, config, writer, stats)
            writer.close()
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
            if repeat:
                timings.append(seconds)
                cpu_timings.append(cpu_seconds)
    best, median = min(timings), statistics.median(timings)
    cpu_median = statistics.median(cpu_timings)
    print(f"corpus: {stats.bytes / 1e6:.2f} MB, {stats.lines:,} lines, "
          f"{stats.corpus_tokens:,} WordPiece tokens -> {stats.examples:,} examples, "
          f"{stats.tokens:,} real tokens")
    print(f"builder, 1 process, 1 TF thread, {len(timings)} runs: CPU time median "
          f"{cpu_median:.3f}s; wall median {median:.3f}s, best {best:.3f}s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"throughput per core: {stats.corpus_tokens / cpu_median / 1e6:.2f}M corpus tokens/s, "
          f"{stats.tokens / cpu_median / 1e6:.2f}M written tokens/s (CPU time); wall-clock "
          f"{stats.corpus_tokens / median / 1e6:.2f}M/s median, "
          f"{stats.corpus_tokens / best / 1e6:.2f}M/s best")
    json_out.write(args.json_out, [{
        "corpus_tokens": stats.corpus_tokens, "written_tokens": stats.tokens,
        "examples": stats.examples, "runs": len(timings), "cpu_median_s": cpu_median,
        "wall_median_s": median, "corpus_tokens_per_s_per_core": stats.corpus_tokens / cpu_median,
        "written_tokens_per_s_per_core": stats.tokens / cpu_median,
        "wall_tokens_per_s": stats.corpus_tokens / median}])

if __name__ == "__main__":
    main()
