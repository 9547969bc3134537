"""Writes a text corpus out as TFRecord shards of packed pre-training examples (ELECTRA format).

  python build_pretraining_dataset.py --corpus_dir=corpus/ --vocab_file=vocab.txt \
      --output_dir=pretrain_tfrecords --max_seq_length=128 --num_processes=2

Each line of each corpus file is one sentence; with --blanks_separate_docs (default true) a
blank line ends a document. See docs/DATA.md.
"""
import os
import sys

from base.command import quiet_tensorflow  # noqa: E402
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
flags.DEFINE_integer("num_shards", 1000, "Number of output shards.")
flags.DEFINE_integer("seed", 12345, "Random seed: same seed, same shards.")
flags.DEFINE_boolean("skip_bad_files", False,
                     "Skip (and count) binary or non-UTF-8 files instead of failing.")
flags.DEFINE_boolean("progress", True, "Print a progress line with ETA to stderr.")


def build_config():
    from data.pretraining_builder import BuildConfig
    return BuildConfig(
        corpus_dir=FLAGS.corpus_dir, output_dir=FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
        sp_model=FLAGS.sp_model, max_seq_length=FLAGS.max_seq_length,
        num_processes=FLAGS.num_processes, blanks_separate_docs=FLAGS.blanks_separate_docs,
        do_lower_case=FLAGS.do_lower_case, strip_accents=FLAGS.strip_accents,
        num_shards=FLAGS.num_shards, seed=FLAGS.seed, skip_bad_files=FLAGS.skip_bad_files,
        progress=FLAGS.progress)


def run(config):
    """Builds the shards; on bad input prints one line `error: ...` and exits with status 1."""
    import tensorflow as tf
    from data.errors import DataError
    from data.pretraining_builder import build_pretraining_dataset, format_summary
    try:
        summary = build_pretraining_dataset(config)
    except (DataError, OSError, tf.errors.OpError) as e:  # e.g. an unwritable --output_dir
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(format_summary(summary), flush=True)
    return summary


def main(argv):
    del argv
    run(build_config())


if __name__ == "__main__":
    flags.mark_flags_as_required(["corpus_dir", "output_dir"])
    app.run(main)
