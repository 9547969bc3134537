"""Learns a vocabulary from a text corpus: WordPiece (a BERT-layout vocab.txt) or SentencePiece.

  python build_vocab.py --corpus_dir=corpus/ --vocab_type=wordpiece --vocab_size=30522 \
      --output=vocab.txt
  python build_vocab.py --corpus_dir=corpus/ --vocab_type=sentencepiece --vocab_size=32000 \
      --output=sp.model

Then pass the result to every tool as --vocab_file=vocab.txt or --sp_model=sp.model
(build_pretraining_dataset.py, run_pretraining.py, run_finetuning.py). See docs/DATA.md.
Bad input prints one line `error: ...` and exits with status 1, writing nothing.
"""
import os
import sys

from base.command import quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus_dir", None, "Directory (or comma list) of UTF-8 text files.")
flags.DEFINE_string("vocab_type", "wordpiece", "wordpiece | sentencepiece")
flags.DEFINE_integer("vocab_size", 30522, "Target size (WordPiece treats it as a target).")
flags.DEFINE_string("output", None, "The vocab file (wordpiece) or <prefix>.model "
                    "(sentencepiece; <prefix>.vocab is written beside it).")
flags.DEFINE_boolean("do_lower_case", True, "Lower-case the text first (BERT uncased).")
flags.DEFINE_integer("min_count", 10, "WordPiece: lowest token frequency the learner keeps "
                     "(lower it for small corpora).")
flags.DEFINE_string("sp_model_type", "unigram", "SentencePiece: unigram | bpe")


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(1)
    if not FLAGS.corpus_dir or not FLAGS.output:
        print("error: --corpus_dir and --output are required", file=sys.stderr)
        sys.exit(1)
    from data.errors import DataError
    from data.vocab import build_vocab
    try:
        build_vocab([d for d in FLAGS.corpus_dir.split(",") if d], FLAGS.output,
                    FLAGS.vocab_type, FLAGS.vocab_size, FLAGS.do_lower_case, FLAGS.min_count,
                    FLAGS.sp_model_type, log=lambda m: print(m, flush=True))
    except (DataError, ValueError) as e:
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
