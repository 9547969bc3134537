"""Export the discriminator and generator of one kept checkpoint of a pre-training run, not only
its last, so that an earlier step can be fine-tuned like the final model (what pre-training buys as
a function of its length: run_reproduction.py --finetune_at_steps, docs/RESULTS.md).

    python -m pretrain.export_step --model_dir=runs/repro/pretrain/convbert --step=4000 \
        --output_dir=runs/repro/pretrain/convbert/steps/4000

writes <output_dir>/discriminator and <output_dir>/generator exactly as the run's own final export
(`PretrainingTask.export`), so `run_finetuning.py --init_checkpoint=<output_dir>` and
`ConvBertModel.from_pretrained(<output_dir>/discriminator)` read it. Each part is written under a
temporary name and moved into place, so an interrupted export leaves no half-written model.
Bad input (no run, no checkpoint of that step) prints one line `error: ...` and exits 1.
"""
import argparse
import os
import sys

from pretrain import heldout_eval   # (run with -m, the package quiets TensorFlow first)
from pretrain.heldout_eval import EvalError

PARTS = ("discriminator", "generator")


def is_exported(output_dir):
    """True when both parts of an export are in place (each is moved there whole)."""
    from model.checkpoints import NATIVE_CONFIG
    from base import fileio
    return all(fileio.exists(os.path.join(output_dir, part, NATIVE_CONFIG)) for part in PARTS)


def export_step(model_dir, step, output_dir, vocab_file=None):
    """Restores <model_dir>'s checkpoint of `step` into the run's pre-trainer and exports it."""
    import tensorflow as tf
    from pretrain.task import make_core
    kept = dict(heldout_eval.checkpoint_paths(model_dir))
    if step not in kept:
        raise EvalError(f"{model_dir}: no kept checkpoint of step {step} (kept: "
                        f"{', '.join(map(str, sorted(kept)))})")
    hp, values = heldout_eval.load_hparams(model_dir)
    task, core = make_core(hp, [], tf.distribute.get_strategy(), hp.vocab_size,
                           log=lambda *_: None,
                           special_ids=heldout_eval.special_ids(vocab_file, values))
    core.checkpoint.restore(kept[step]).expect_partial()
    restored = int(core.step.numpy())
    if restored != step:   # the checkpoint's own step counter, not only its file name
        raise EvalError(f"{kept[step]}: holds step {restored}, not {step}")
    task.export(output_dir)
    return output_dir


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, exit 1 (argparse would print the usage, exit 2)
        raise EvalError(message)


def main(argv=None):
    p = _Parser(prog="python -m pretrain.export_step",
                description="Export the discriminator and generator of one kept checkpoint.")
    p.add_argument("--model_dir", required=True, help="a run_pretraining.py --model_dir")
    p.add_argument("--step", required=True, type=int, help="the kept checkpoint's step")
    p.add_argument("--output_dir", required=True, help="where discriminator/ and generator/ go")
    p.add_argument("--vocab_file", default=None,
                   help="WordPiece vocab (special-token ids), when the run's hparams lack them")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        export_step(args.model_dir, args.step, args.output_dir, args.vocab_file)
    except EvalError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1
    print(f"exported step {args.step} of {args.model_dir} to {args.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
