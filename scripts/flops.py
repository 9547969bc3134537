"""Parameters, forward FLOPs per token and pre-training FLOPs (ELECTRA's counting convention).

    python scripts/flops.py                                   # the paper's recipes + comparison
    python scripts/flops.py --config configs/x.json --steps 1e6 --batch 128 --seq 128 --gen 0.25
    python scripts/flops.py --size base --electra --steps 766000 --batch 256 --seq 512 --gen 1/3
    python scripts/flops.py --recipe tiny         # a run_reproduction.py recipe, model by model
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from base.command import quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from model import flops  # noqa: E402
from model.config import ConvBertConfig  # noqa: E402


def fraction(text):
    """A float or a ratio "a/b" (1/3: the base generator's width, exactly)."""
    num, _, den = text.partition("/")
    try:
        return float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None


def recipe_rows(scale, vocab_size=30522):
    """[(model, pretrain_flops dict)] for the pre-trained models of a run_reproduction.py recipe,
    with the hparams run_pretraining.py resolves for them (so steps, batch, sequence length,
    generator width and the model's shape are the recipe's own)."""
    from pretrain.hparams import make_hparams, model_config
    from reproduce.recipes import get_recipe
    rows = []
    for name, model in get_recipe(scale).pretrained_models().items():
        hp = make_hparams(model.model_size, overrides=model.hparams)
        cfg = model_config(hp, hp.vocab_size or vocab_size)
        if hp.generator_layers != 1.0:   # model.flops' generator keeps the discriminator's depth
            raise SystemExit(f"--recipe {scale}: generator_layers {hp.generator_layers} is not "
                             f"counted by model/flops.py")
        rows.append((name, flops.pretrain_flops(cfg, hp.train_batch_size, hp.num_train_steps,
                                                hp.max_seq_length, hp.generator_hidden_size)))
    return rows


def print_recipe(scale):
    from reproduce.recipes import RecipeError
    try:
        rows = recipe_rows(scale)
    except RecipeError as e:
        raise SystemExit(f"scripts/flops.py: {e}") from None
    small = flops.summarize("convbert-small").pretrain_flops
    print(f"{'model':10} {'pre-train FLOPs':>16} {'of ConvBERT-small (1M steps)':>30}")
    for name, total in rows:
        share = total["total"] / small
        print(f"{name:10} {total['total']:16.3e} "
              f"{('1/' + format(1 / share, ',.0f')) if share < 1 else format(share, '.2f') + 'x':>30}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="ConvBertConfig JSON")
    ap.add_argument("--size", help="small | medium-small | base")
    ap.add_argument("--recipe", help="a run_reproduction.py --scale (reproduce/recipes.py): the "
                                     "pre-training FLOPs of each of its pre-trained models")
    ap.add_argument("--electra", action="store_true", help="head_ratio 1, conv_type none (ELECTRA/BERT)")
    ap.add_argument("--steps", type=float, default=1e6)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--gen", type=fraction, default=0.25,
                    help="generator hidden-size fraction, e.g. 0.25 or 1/3")
    ap.add_argument("--json_out", default=None,
                    help="with neither --config nor --size: the recipes' rows as JSON here")
    args = ap.parse_args(argv)
    if args.recipe:
        print_recipe(args.recipe)
        return
    if not (args.config or args.size):
        print(f"{'recipe':22} {'params':>12} {'fwd FLOPs/token':>16} {'pre-train FLOPs':>16} {'paper':>8}")
        rows = []
        for name in flops.RECIPES:
            s = flops.summarize(name)
            paper = f"{s.paper:.1e}" if s.paper else "-"
            print(f"{name:22} {s.parameters:12,d} {s.forward_flops_per_token:16.4g} "
                  f"{s.pretrain_flops:16.3e} {paper:>8}")
            rows.append({"recipe": name, "parameters": s.parameters,
                         "forward_flops_per_token": s.forward_flops_per_token,
                         "pretrain_flops": s.pretrain_flops, "paper": s.paper})
        if args.json_out:
            with open(args.json_out, "w") as f:   # a results file the caller named
                json.dump({"rows": rows}, f, indent=1)
        return
    cfg = (ConvBertConfig.from_json(args.config) if args.config
           else ConvBertConfig.from_size(args.size))
    if args.electra:
        cfg = cfg.replace(head_ratio=1, conv_type="none", num_groups=1)
    total = flops.pretrain_flops(cfg, args.batch, args.steps, args.seq, args.gen)
    print(f"parameters (encoder)        {flops.encoder_parameters(cfg):,d}")
    print(f"forward FLOPs / token       {flops.forward_flops_per_token(cfg, args.seq):.4g}")
    print(f"pre-training FLOPs          {total['total']:.3e}  (discriminator "
          f"{total['discriminator']:.3e} + generator {total['generator']:.3e}; "
          f"{args.steps:g} steps x batch {args.batch} x seq {args.seq})")


if __name__ == "__main__":
    main()
