"""Builds pre-training shards from OpenWebText in ELECTRA's layout.

  python build_openwebtext_pretraining_dataset.py --data_dir=$DATA_DIR --num_processes=2

reads `$DATA_DIR/openwebtext/*.xz` (tar.xz archives of .txt files, one document each) and
`$DATA_DIR/vocab.txt`, and writes `$DATA_DIR/pretrain_tfrecords/`. Each archive is one unit of
work, read as a stream (no extraction, no staging folder; $DATA_DIR may be gs://). The same
build as an Apache Beam pipeline: add --runner=DirectRunner|DataflowRunner|... and Beam's
pipeline options (as --flag=value), see build_pretraining_dataset.py and docs/DATA.md.
"""
import os
import sys

from base.command import parse_known_flags, quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Directory holding openwebtext/ (and vocab.txt).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab (default: <data_dir>/vocab.txt).")
flags.DEFINE_string("output_dir", None, "Output (default: <data_dir>/pretrain_tfrecords).")
flags.DEFINE_string("tmp_dir", None, "Unused: archives are streamed, not extracted (kept so "
                    "that older command lines still run).")
flags.DEFINE_integer("max_seq_length", 128, "Number of tokens per example.")
flags.DEFINE_integer("num_processes", 1, "Parallelize over this many processes.")
flags.DEFINE_boolean("do_lower_case", True, "Lower-case the input text.")
flags.DEFINE_boolean("strip_accents", None, "Strip accents (default: same as --do_lower_case).")
flags.DEFINE_integer("num_shards", 1000, "Number of output shards.")
flags.DEFINE_integer("seed", 12345, "Random seed: same seed, same shards.")
flags.DEFINE_boolean("skip_bad_files", False, "Skip (and count) a corrupt archive or an "
                     "undecodable member instead of failing.")
flags.DEFINE_boolean("progress", True, "Print a progress line with ETA to stderr.")
flags.DEFINE_string("runner", None, "Run as an Apache Beam pipeline on this runner "
                    "(DirectRunner, DataflowRunner, FlinkRunner, SparkRunner); other flags "
                    "are Beam pipeline options. Default: the local processes.")
flags.DEFINE_boolean("dry_run", False, "With --runner: check the inputs and options and build "
                     "the pipeline, without running or submitting it.")


def main(argv):
    import tensorflow as tf
    from data.errors import DataError
    from data.build_engine import build
    from data.pretraining_builder import format_summary, openwebtext_config

    overrides = dict(
        vocab_file=FLAGS.vocab_file or os.path.join(FLAGS.data_dir, "vocab.txt"),
        output_dir=FLAGS.output_dir or os.path.join(FLAGS.data_dir, "pretrain_tfrecords"),
        max_seq_length=FLAGS.max_seq_length, num_processes=FLAGS.num_processes,
        do_lower_case=FLAGS.do_lower_case, strip_accents=FLAGS.strip_accents,
        num_shards=FLAGS.num_shards, seed=FLAGS.seed, skip_bad_files=FLAGS.skip_bad_files,
        progress=FLAGS.progress)
    try:
        summary = build(openwebtext_config(FLAGS.data_dir, overrides), FLAGS.runner, argv[1:],
                        FLAGS.dry_run)
    except (DataError, OSError, tf.errors.OpError) as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(summary if FLAGS.dry_run else f"{format_summary(summary)}; "
          f"{summary['num_shards_note']}", flush=True)


def parse_flags(argv):
    """The builder's flags; what is left (but argv[0]) goes to Beam as pipeline options."""
    return parse_known_flags(FLAGS, argv)


if __name__ == "__main__":
    flags.mark_flags_as_required(["data_dir"])
    app.run(main, flags_parser=parse_flags)
