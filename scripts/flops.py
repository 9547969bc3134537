"""Parameters, forward FLOPs per token and pre-training FLOPs (ELECTRA's counting convention).

    python scripts/flops.py                                   # the paper's recipes + comparison
    python scripts/flops.py --config configs/x.json --steps 1e6 --batch 128 --seq 128 --gen 0.25
    python scripts/flops.py --size base --electra --steps 766000 --batch 256 --seq 512 --gen 1/3
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model import flops  # noqa: E402
from model.config import ConvBertConfig  # noqa: E402


def fraction(text):
    """A float or a ratio "a/b" (1/3: the base generator's width, exactly)."""
    num, _, den = text.partition("/")
    try:
        return float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="ConvBertConfig JSON")
    ap.add_argument("--size", help="small | medium-small | base")
    ap.add_argument("--electra", action="store_true", help="head_ratio 1, conv_type none (ELECTRA/BERT)")
    ap.add_argument("--steps", type=float, default=1e6)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--gen", type=fraction, default=0.25,
                    help="generator hidden-size fraction, e.g. 0.25 or 1/3")
    args = ap.parse_args(argv)
    if not (args.config or args.size):
        print(f"{'recipe':22} {'params':>12} {'fwd FLOPs/token':>16} {'pre-train FLOPs':>16} {'paper':>8}")
        for name in flops.RECIPES:
            s = flops.summarize(name)
            paper = f"{s.paper:.1e}" if s.paper else "-"
            print(f"{name:22} {s.parameters:12,d} {s.forward_flops_per_token:16.4g} "
                  f"{s.pretrain_flops:16.3e} {paper:>8}")
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
