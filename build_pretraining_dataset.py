"""Writes a text corpus out as TFRecord shards of packed pre-training examples (ELECTRA format).

  python build_pretraining_dataset.py --corpus_dir=corpus/ --vocab_file=vocab.txt \
      --output_dir=pretrain_tfrecords --max_seq_length=128 --num_processes=2

Each line of each corpus file is one sentence; with --blanks_separate_docs (default true) a
blank line ends a document. The same build as an Apache Beam pipeline (pip install -e '.[beam]'):

  python build_pretraining_dataset.py --runner=DirectRunner --direct_num_workers=2 \
      --direct_running_mode=multi_processing --corpus_dir=... --vocab_file=... --output_dir=...
  python build_pretraining_dataset.py --runner=DataflowRunner --project=P --region=R \
      --temp_location=gs://bucket/tmp --corpus_dir=gs://... --output_dir=gs://... [--dry_run]

Flags the builder does not know are passed to Beam as pipeline options (write them as
--flag=value). See docs/DATA.md.
"""
import gc
import os
import sys

# Python's cyclic garbage collector off while TensorFlow, tensorflow-text and Keras are imported
# (many objects, none of them garbage), then those objects frozen out of its reach (`run`), so the
# build's own collections do not walk them again: about 0.6 s less CPU in a build of all
# Gutenberg (user time 6.4 -> 5.9 s, 2026-11-27). Start-up is a third of a small build's wall time
# (docs/PERFORMANCE.md, the shard builders).
gc.disable()
# TensorFlow imports Keras at start-up, and Keras' scikit-learn wrapper imports scikit-learn
# where it is installed (0.4 s of a 7 s build of all Gutenberg, 2026-11-27); the builder never
# uses it, and Keras takes its absence as it takes a machine without it.
sys.modules.setdefault("sklearn", None)

from base.command import parse_known_flags, quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus_dir", None, "Directory of UTF-8 text files (one sentence per line).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab file (one token per line).")
flags.DEFINE_string("sp_model", None, "SentencePiece model instead of --vocab_file.")
flags.DEFINE_string("output_dir", None, "Where to write the TFRecord shards.")
flags.DEFINE_integer("max_seq_length", 128, "Number of tokens per example.")
flags.DEFINE_integer("num_processes", 1, "Parallelize over this many processes.")
flags.DEFINE_boolean("blanks_separate_docs", True, "Whether blank lines end documents.")
flags.DEFINE_boolean("do_lower_case", True, "Lower-case the input text.")
flags.DEFINE_boolean("strip_accents", None, "Strip accents (default: same as --do_lower_case).")
flags.DEFINE_integer("num_shards", None, "Number of output shards (default: sized to the "
                     "corpus, one per 32 MB of it, at least --num_processes, at most 1,000).")
flags.DEFINE_integer("seed", 12345, "Random seed: same seed, same shards.")
flags.DEFINE_boolean("skip_bad_files", False,
                     "Skip (and count) binary or non-UTF-8 files instead of failing.")
flags.DEFINE_boolean("progress", True, "Print a progress line with ETA to stderr.")
flags.DEFINE_string("runner", None, "Run as an Apache Beam pipeline on this runner "
                    "(DirectRunner, DataflowRunner, FlinkRunner, SparkRunner); other flags "
                    "are Beam pipeline options. Default: the local processes.")
flags.DEFINE_boolean("dry_run", False, "With --runner: check the inputs and options and build "
                     "the pipeline, without running or submitting it.")


def build_config():
    from data.pretraining_builder import BuildConfig
    return BuildConfig(
        corpus_dir=FLAGS.corpus_dir, output_dir=FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
        sp_model=FLAGS.sp_model, max_seq_length=FLAGS.max_seq_length,
        num_processes=FLAGS.num_processes, blanks_separate_docs=FLAGS.blanks_separate_docs,
        do_lower_case=FLAGS.do_lower_case, strip_accents=FLAGS.strip_accents,
        num_shards=FLAGS.num_shards, seed=FLAGS.seed, skip_bad_files=FLAGS.skip_bad_files,
        progress=FLAGS.progress)


def run(config, runner=None, beam_args=(), dry_run=False):
    """Builds the shards (locally, or with Beam's `runner`); on bad input prints one line
    `error: ...` and exits with status 1."""
    import tensorflow as tf
    from data.errors import DataError
    from data.build_engine import build
    from data.pretraining_builder import format_summary
    gc.freeze()   # what the imports made stays; the collector looks only at newer objects
    gc.enable()
    try:
        summary = build(config, runner, list(beam_args), dry_run)
    except (DataError, OSError, tf.errors.OpError) as e:  # e.g. an unwritable --output_dir
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    if dry_run:
        print(summary, flush=True)
    else:
        print(f"{format_summary(summary)}; {summary['num_shards_note']}", flush=True)
    return summary


def parse_flags(argv):
    """The builder's flags; what is left (but argv[0]) goes to Beam as pipeline options."""
    return parse_known_flags(FLAGS, argv)


def main(argv):
    run(build_config(), FLAGS.runner, argv[1:], FLAGS.dry_run)
    if FLAGS.runner is None:
        end_now()


def end_now():
    """Ends the process at once, status 0, once the shards and the summary are written, closed
    and renamed. The interpreter's own ending with TensorFlow, tensorflow-text and Keras loaded
    (module teardown, garbage collection of their objects) cost about 1.2 s of CPU after the build
    had finished (4.5 s of user time against 3.3 s with this exit, 2026-11-27; 4-5 s of wall
    time under a load of 7): time a user waits for. Nothing is left to flush but the standard
    streams; no atexit handler matters to the builder (its worker pool, if any, is closed)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    flags.mark_flags_as_required(["corpus_dir", "output_dir"])
    app.run(main, flags_parser=parse_flags)
