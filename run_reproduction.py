"""Reproduce the paper's comparison end to end: corpus -> (vocab) -> shards -> pre-train ConvBERT
and the ELECTRA baseline on the same data -> fine-tune both, and a randomly initialised ConvBERT,
on every GLUE task present, over several seeds -> one table, a JSON and PNG plots.

    python run_reproduction.py --scale=tiny --corpus_dirs=corpus/ --glue_dir=glue_data/ \
        --vocab_file=vocab.txt --output_dir=runs/repro_tiny

`--scale` picks a recipe of reproduce/recipes.py: `tiny` (about 2.5 hours on 2 CPU cores),
`small` / `base` (the paper's recipes, for a TPU v3-8 or GPUs; pass the strategy through
`--pretrain_flags`, e.g. '--distribution=tpu --tpu=my-tpu'). Rerunning the same command skips
finished stages and resumes an interrupted pre-training. Results: docs/RESULTS.md.

Bad input prints one line `error: ...` and exits with status 1.
"""
import os
import shlex
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
from base.command import quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

flags.DEFINE_string("scale", "tiny",
                    "tiny | tiny_3ep (tiny, fine-tuned 3 epochs on every task) | tiny_1k (the "
                    "first tiny recipe) | small | base (| smoke: the end-to-end test).")
flags.DEFINE_string("corpus_dirs", None, "Comma-separated directories of UTF-8 text files.")
flags.DEFINE_string("glue_dir", None, "GLUE data (<glue_dir>/<TASK>/{train,dev}.tsv).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab; without it one is learned from the "
                    "corpus (--vocab_size tokens).")
flags.DEFINE_integer("vocab_size", 30522, "Size of a learned vocabulary.")
flags.DEFINE_string("output_dir", None, "Where every stage writes (see reproduce/pipeline.py).")
flags.DEFINE_integer("num_shards", 16, "TFRecord shards per corpus directory (the last shard "
                     "of the first directory is the held-out set).")
flags.DEFINE_integer("build_processes", 2, "Processes of the shard builder.")
flags.DEFINE_string("models", "convbert,electra,random", "Which of convbert, electra, random.")
flags.DEFINE_string("tasks", None, "GLUE tasks (default: those of cola,sst,mrpc,sts,rte with a "
                    "train split under --glue_dir).")
flags.DEFINE_integer("seed", 0, "Pre-training seed and first fine-tuning seed.")
flags.DEFINE_boolean("reference", False, "Also train the PyTorch ELECTRA reference "
                     "(reproduce/rtd_reference.py) on the ELECTRA run's batches and plot its "
                     "held-out curves beside ours (needs torch + transformers).")
flags.DEFINE_integer("pretrain_steps", None, "Pre-train this many steps instead of the "
                     "recipe's (a longer run of the same recipe; warm-up and peak lr unchanged).")
flags.DEFINE_string("finetune_at_steps", "", "Comma-separated earlier kept checkpoints (steps) "
                    "of each pre-trained model to fine-tune too, e.g. 2000,4000,6000: GLUE as a "
                    "function of pre-training length (results.md, glue_vs_steps.png).")
flags.DEFINE_string("pretrain_flags", "", "Extra flags for run_pretraining.py.")
flags.DEFINE_string("finetune_flags", "", "Extra flags for run_finetuning.py.")
flags.DEFINE_boolean("report_only", False, "Only rewrite the report from finished stages.")

FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(1)
    # Flags are checked before TensorFlow is imported: a typo costs no start-up and no log noise.
    from reproduce.recipes import MODELS, RecipeError, get_recipe

    def fail(message):
        print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
        sys.exit(1)

    try:
        recipe = get_recipe(FLAGS.scale)
        if FLAGS.pretrain_steps is not None:
            recipe = recipe.with_pretrain_steps(FLAGS.pretrain_steps)
        try:
            finetune_at_steps = [int(s) for s in FLAGS.finetune_at_steps.split(",") if s.strip()]
        except ValueError:
            raise RecipeError("--finetune_at_steps must be comma-separated integers, got "
                              f"{FLAGS.finetune_at_steps!r}") from None
        finetune_at_steps = recipe.checked_finetune_steps(finetune_at_steps)
    except RecipeError as e:
        fail(e)
    if not FLAGS.output_dir:
        fail("--output_dir is required")
    if not FLAGS.glue_dir:
        fail("--glue_dir is required")
    models = [m.strip() for m in FLAGS.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown or not models:
        fail(f"unknown --models {', '.join(unknown) or '(none)'}; choose from {', '.join(MODELS)}")

    from data.errors import DataError
    from reproduce.pipeline import Reproduction, ReproductionError
    try:
        tasks = [t.strip() for t in FLAGS.tasks.split(",")] if FLAGS.tasks else None
        repro = Reproduction(
            recipe, FLAGS.output_dir, [d for d in (FLAGS.corpus_dirs or "").split(",") if d],
            FLAGS.glue_dir, vocab_file=FLAGS.vocab_file, vocab_size=FLAGS.vocab_size,
            num_shards=FLAGS.num_shards, build_processes=FLAGS.build_processes, models=models,
            tasks=tasks, seed=FLAGS.seed,
            reference=FLAGS.reference, pretrain_flags=shlex.split(FLAGS.pretrain_flags),
            finetune_flags=shlex.split(FLAGS.finetune_flags), finetune_at_steps=finetune_at_steps)
        if FLAGS.report_only:
            from reproduce.report import write_report
            print("report: " + ", ".join(write_report(repro)))
        else:
            repro.run()
    except (ReproductionError, DataError) as e:
        fail(str(e) or type(e).__name__)


if __name__ == "__main__":
    app.run(main)
