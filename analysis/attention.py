"""Attention maps and their diagonal concentration C (ConvBERT Fig. 2/6, Table 8 = rebuttal
Table 1).

    python -m analysis.attention --checkpoint bert=runs/electra_small \\
        --checkpoint convbert=runs/small --glue_dir ../shared/data/glue --task mrpc \\
        --vocab_file vocab.txt --output_dir out/attention \\
        [--max_examples N] [--max_seq_length 128] [--examples 0,1] [--window 4] \\
        [--exclude_special] [--batch_size 16]

Each `--checkpoint NAME=PATH` is anything run_finetuning.py's `--init_checkpoint` accepts (a
pre-training model_dir, our native export, a Hugging Face dir, an official TF1 checkpoint); it is
loaded by the same `finetune.encoder_source.EncoderSource`, and its vocab is `--vocab_file` or,
without it, the one found beside the checkpoint (`find_vocab_file`). The dev set of `--task` is read
and tokenized exactly as for fine-tuning (finetune/glue readers and features, padded to
`--max_seq_length`) and run through the encoder in inference mode with `output_attentions=True`.

Only self-attention heads have a map: a ConvBERT layer has `num_attention_heads / head_ratio`
of them (the other half are span-based convolution heads, which have none), a BERT-architecture
model (`conv_type none`, `head_ratio 1`) has all its heads. A convolution-only model has no map.

The metric (as in the authors' rebuttal): C = sum_{|i-j|<=w} M_ij / sum_{|i-j|>w} M_ij, w =
`--window` (4 = (K-1)/2 for the kernel K = 9: the attention mass inside the convolution's window
against the mass outside it). C is a ratio, not a fraction (C = 1: half of the mass in the band).
Decisions, fixed here:

* maps are cropped to each example's real length (input_mask): padded queries and keys never count;
* pooled, not averaged: numerator and denominator are summed over examples, heads and layers and
  divided once (headline C); per layer and per (layer, head) the same with fewer sums. As every
  query row sums to 1, pooling over heads equals C of the head-averaged map, and every real token
  weighs the same (a long example counts more than a short one). The mean of per-example ratios is
  reported beside it (`mean_of_examples`), as the rebuttal does not say which it used;
* [CLS] and [SEP] rows and columns count by default: the rebuttal and the paper's figures use the
  maps as the model computes them (its reference extraction crops to the true length and keeps
  them), and attention to them is part of what a head does. BERT heads put much off-band mass on
  [CLS]/[SEP] (Clark et al. 2019), so `--exclude_special` drops their rows and columns to show how
  much of C that is; positions keep their place in the sequence (|i-j| is the distance the model
  saw), and the masses then no longer sum to 1 per row;
* C = inf when nothing lies outside the band (a purely diagonal map), nan when nothing is counted.

Writes into `--output_dir`: `attention.md` (model, pooled C, C per layer; the rebuttal's numbers
only as labelled "paper" rows), `attention.json` (every number incl. per head and per plotted
example, the settings and checkpoints; inf/nan as the strings "inf"/"nan"),
`attention_maps_example<k>.png` (the map of example k averaged over heads and layers, one panel
per checkpoint, like Fig. 2/6) and `attention_concentration_per_layer.png`.
A missing checkpoint, task directory, dev.tsv or vocab, or a bad flag: one line `error: ...`,
exit status 1, nothing written.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

NAME = "attention"
# The ConvBERT authors' rebuttal Table 1 (= paper Table 8), MRPC dev, w = 4: (label, layers x
# self-attention heads, C). Printed in attention.md as labelled reference rows, never as a result.
PAPER_REFERENCE = (("paper: BERT-base (rebuttal Table 1, MRPC dev)", "12 × 12", 0.941),
                   ("paper: ConvBERT-base (rebuttal Table 1, MRPC dev)", "12 × 6", 0.608))
MAX_TOKEN_LABELS = 40   # token strings on the map's axes up to this length, index ticks beyond


# ----------------------------------------------------------------------------- the metric (numpy)
def band_mask(size: int, window: int) -> np.ndarray:
    """bool [size, size]: True where |i - j| <= window."""
    index = np.arange(size)
    return np.abs(index[:, None] - index[None, :]) <= window


def positions_kept(lengths, size: int, input_ids=None, special_ids=()) -> np.ndarray:
    """bool [B, size]: the real positions (< length), minus those holding a `special_ids` token."""
    keep = np.arange(size)[None, :] < np.asarray(lengths)[:, None]
    if input_ids is not None and len(special_ids):
        keep &= ~np.isin(np.asarray(input_ids)[:, :size], list(special_ids))
    return keep


def band_sums(maps, keep, window: int):
    """(mass inside the band, mass outside it), each of shape maps.shape[:-2].

    maps [B, ..., T, T] (query, key), keep bool [B, T]: entry (i, j) counts when both i and j are
    kept."""
    maps = np.asarray(maps, dtype=np.float64)
    keep = np.asarray(keep, dtype=bool)
    batch, size = maps.shape[0], maps.shape[-1]
    counted = (keep[:, :, None] & keep[:, None, :]).reshape(
        (batch,) + (1,) * (maps.ndim - 3) + (size, size))
    band = band_mask(size, window)
    inside = (maps * (counted & band)).sum(axis=(-2, -1))
    outside = (maps * (counted & ~band)).sum(axis=(-2, -1))
    return inside, outside


def ratio(inside, outside):
    """inside / outside elementwise; inf where only outside is 0, nan where both are."""
    inside, outside = np.asarray(inside, np.float64), np.asarray(outside, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(outside > 0, inside / np.where(outside > 0, outside, 1.0),
                       np.where(inside > 0, np.inf, np.nan))
    return out if out.ndim else float(out)


def diagonal_concentration(maps, lengths, window: int, keep=None) -> float:
    """Pooled C of maps [B, ..., T, T] cropped to `lengths` (or to the positions `keep` [B, T]):
    all in-band mass over all out-of-band mass (not a mean of per-example ratios)."""
    maps = np.asarray(maps)
    if keep is None:
        keep = positions_kept(lengths, maps.shape[-1])
    inside, outside = band_sums(maps, keep, window)
    return ratio(inside.sum(), outside.sum())


def summarize(inside, outside) -> dict:
    """Every C of per-example band sums inside/outside [examples, layers, heads]."""
    inside, outside = np.asarray(inside, np.float64), np.asarray(outside, np.float64)
    total = inside.sum() + outside.sum()
    return {
        "C_pooled": ratio(inside.sum(), outside.sum()),
        "C_mean_of_examples": float(np.mean(ratio(inside.sum(axis=(1, 2)),
                                                  outside.sum(axis=(1, 2))))),
        "band_mass_fraction": float(inside.sum() / total) if total > 0 else math.nan,
        "C_per_layer": [float(c) for c in np.atleast_1d(ratio(inside.sum(axis=(0, 2)),
                                                              outside.sum(axis=(0, 2))))],
        "C_per_head": np.atleast_2d(ratio(inside.sum(axis=0), outside.sum(axis=0))).tolist(),
    }


# ----------------------------------------------------------------------------- flags and inputs
class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, exit 1 (argparse would print the usage, exit 2)
        from finetune.console import UsageError
        raise UsageError(message)


def parse_args(argv):
    p = _Parser(prog="python -m analysis.attention",
                description="Attention maps and diagonal concentration C (ConvBERT Fig. 2/6, "
                            "Table 8).")
    p.add_argument("--checkpoint", action="append", required=True, metavar="NAME=PATH",
                   help="a model to analyse (repeat); PATH as for run_finetuning --init_checkpoint")
    p.add_argument("--glue_dir", required=True, help="GLUE download dir (<glue_dir>/MRPC/dev.tsv)")
    p.add_argument("--task", default="mrpc", help="GLUE task whose dev set is read (mrpc)")
    p.add_argument("--vocab_file", default=None,
                   help="WordPiece vocab; default: the one beside each checkpoint")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_examples", type=int, default=None, help="first N dev examples (all)")
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--examples", default="0", help="dev example indices to plot, e.g. 0,1")
    p.add_argument("--window", type=int, default=4, help="band half-width w (4 = (9-1)/2)")
    p.add_argument("--exclude_special", action="store_true",
                   help="drop the rows and columns of [CLS]/[SEP] from C")
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args(argv)
    from finetune.console import UsageError
    args.checkpoints = []
    for spec in args.checkpoint:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UsageError(f"--checkpoint {spec!r}: expected NAME=PATH")
        if name.strip() in [n for n, _ in args.checkpoints]:
            raise UsageError(f"--checkpoint {spec!r}: name {name.strip()!r} given twice")
        args.checkpoints.append((name.strip(), path.strip()))
    try:
        args.example_indices = sorted({int(k) for k in args.examples.split(",") if k.strip()})
    except ValueError:
        raise UsageError(f"--examples {args.examples!r}: expected indices like 0,1") from None
    for flag in ("window", "max_seq_length", "batch_size", "max_examples"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "window" else 1):
            raise UsageError(f"--{flag} {value}: must be {'>= 0' if flag == 'window' else '> 0'}")
    if any(k < 0 for k in args.example_indices):
        raise UsageError(f"--examples {args.examples!r}: indices must be >= 0")
    return args


def check_inputs(args):
    """Every path checked before a model is built: [(name, path, vocab_file)] and the examples."""
    from finetune.console import UsageError
    from finetune.encoder_source import find_vocab_file
    from finetune.glue.readers import read_examples
    from finetune.glue.tasks import get_task
    from base import fileio
    models = []
    for name, path in args.checkpoints:
        if not (fileio.exists(path) or fileio.exists(path + ".index")):
            raise UsageError(f"{path}: checkpoint {name!r} not found")
        try:
            vocab_file = find_vocab_file(args.vocab_file, path)
        except UsageError:
            if args.vocab_file:
                raise
            raise UsageError(f"{path}: no vocab.txt beside checkpoint {name!r}; give --vocab_file"
                             ) from None
        models.append((name, path, vocab_file))
    task = get_task(args.task)
    split = "dev_matched" if task.name == "mnli" else "dev"
    examples = read_examples(args.glue_dir, task.name, split)[:args.max_examples]
    bad = [k for k in args.example_indices if k >= len(examples)]
    if bad:
        raise UsageError(f"--examples {bad[0]}: only {len(examples)} {task.name} dev examples")
    return models, task, split, examples


def load_encoder(path, vocab_file, max_seq_length, task_name):
    """(EncoderSource, encoder, tokenizer), as run_finetuning.py builds them."""
    from data.tokenization import load_tokenizer
    from finetune.console import UsageError
    from finetune.encoder_source import EncoderSource, check_sequence_length
    from finetune.hparams import FinetuneHParams
    hp = FinetuneHParams()
    source = EncoderSource(path, hp)
    if not source.config.use_self_attention:
        raise UsageError(f"{path}: a convolution-only model (use_self_attention false) has no "
                         "attention maps")
    check_sequence_length(source, max_seq_length, task_name)
    tokenizer = load_tokenizer(vocab_file, do_lower_case=hp.do_lower_case)
    if tokenizer.vocab_size > source.config.vocab_size:
        raise UsageError(f"{vocab_file}: {tokenizer.vocab_size} tokens but the model in {path} "
                         f"has only {source.config.vocab_size} word embeddings")
    return source, source.build(), tokenizer


# ----------------------------------------------------------------------------- running a model
def attention_statistics(encoder, features, window, batch_size, special_ids=(), plot_indices=()):
    """Band sums of every example, layer and self-attention head, and the plotted examples' maps.

    -> (inside [E, L, N], outside [E, L, N], {k: map [T_k, T_k] averaged over heads and layers})"""
    from keras import ops
    total = len(features["input_ids"])
    inside, outside, example_maps = [], [], {}
    for start in range(0, total, batch_size):
        batch = {k: features[k][start:start + batch_size]
                 for k in ("input_ids", "input_mask", "segment_ids")}
        out = encoder(batch, training=False, output_attentions=True)
        maps = np.stack([ops.convert_to_numpy(p) for p in out["attention_probs"]], axis=1)
        lengths = batch["input_mask"].sum(axis=1)
        keep = positions_kept(lengths, maps.shape[-1], batch["input_ids"], special_ids)
        band_in, band_out = band_sums(maps, keep, window)   # [b, L, N]
        inside.append(band_in)
        outside.append(band_out)
        for k in plot_indices:
            if start <= k < start + len(lengths):
                length = int(lengths[k - start])
                example_maps[k] = maps[k - start, :, :, :length, :length].mean(axis=(0, 1))
    return np.concatenate(inside), np.concatenate(outside), example_maps


def analyse_model(name, path, vocab_file, examples, args):
    from finetune.features import convert_examples_to_features
    from finetune.console import say
    source, encoder, tokenizer = load_encoder(path, vocab_file, args.max_seq_length, args.task)
    features = convert_examples_to_features(examples, args.task, tokenizer, args.max_seq_length)
    special = (tokenizer.cls_id, tokenizer.sep_id) if args.exclude_special else ()
    inside, outside, maps = attention_statistics(encoder, features, args.window, args.batch_size,
                                                 special, args.example_indices)
    cfg = source.config
    result = {"name": name, "checkpoint": path, "format": source.format,
              "vocab_file": str(vocab_file),
              "config": {"num_hidden_layers": cfg.num_hidden_layers,
                         "num_self_attention_heads": cfg.num_self_attention_heads,
                         "num_attention_heads": cfg.num_attention_heads,
                         "head_ratio": cfg.head_ratio, "conv_type": cfg.conv_type,
                         "conv_kernel_size": cfg.conv_kernel_size,
                         "hidden_size": cfg.hidden_size},
              "num_examples": len(examples), **summarize(inside, outside),
              "C_per_example_plotted": {str(k): ratio(inside[k].sum(), outside[k].sum())
                                        for k in args.example_indices}}
    lengths = features["input_mask"].sum(axis=1)
    plotted = {k: {"map": maps[k], "C": result["C_per_example_plotted"][str(k)],
                   "tokens": tokenizer.convert_ids_to_tokens(
                       features["input_ids"][k][:int(lengths[k])])}
               for k in args.example_indices}
    say(f"attention: {name}: {len(examples)} examples, {cfg.num_hidden_layers} layers x "
        f"{cfg.num_self_attention_heads} self-attention heads, C = {result['C_pooled']:.4f}")
    return result, plotted


# ----------------------------------------------------------------------------- outputs
def _fmt(value, digits=3):
    return "inf" if value == math.inf else "nan" if value != value else f"{value:.{digits}f}"


def _json_safe(value):
    """inf/nan as strings (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def describe_settings(args, task, split, num_examples):
    return {"task": task.name, "split": split, "num_examples": num_examples,
            "max_examples": args.max_examples, "max_seq_length": args.max_seq_length,
            "window": args.window, "exclude_special": args.exclude_special,
            "plotted_examples": args.example_indices, "batch_size": args.batch_size,
            "definition": "C = sum_{|i-j|<=w} M_ij / sum_{|i-j|>w} M_ij over self-attention maps "
                          "cropped to the real length; pooled = sums over examples, heads and "
                          "layers divided once; [CLS]/[SEP] rows and columns "
                          + ("dropped" if args.exclude_special else "included")}


def markdown_table(results, settings):
    special = "excluded" if settings["exclude_special"] else "included"
    lines = [f"# Attention: diagonal concentration C ({settings['task']} {settings['split']}, "
             f"{settings['num_examples']} examples)", "",
             f"C = Σ_{{|i−j|≤{settings['window']}}} M_ij / Σ_{{|i−j|>{settings['window']}}} M_ij "
             f"of the self-attention maps, cropped to each example's real length, [CLS]/[SEP] "
             f"{special}, max_seq_length {settings['max_seq_length']}. *C pooled*: in-band and "
             "out-of-band mass summed over examples, self-attention heads and layers, then "
             "divided; *mean of examples*: the mean of per-example ratios. *Band mass*: the "
             "fraction of the counted mass inside the band.", "",
             "| model | checkpoint | layers × SA heads | C pooled | mean of examples | band mass "
             "| C per layer (1..L) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        cfg = r["config"]
        lines.append(f"| {r['name']} | `{r['checkpoint']}` | {cfg['num_hidden_layers']} × "
                     f"{cfg['num_self_attention_heads']} | {_fmt(r['C_pooled'])} | "
                     f"{_fmt(r['C_mean_of_examples'])} | {100 * r['band_mass_fraction']:.1f}% | "
                     f"{', '.join(_fmt(c) for c in r['C_per_layer'])} |")
    if settings["task"] == "mrpc" and settings["window"] == 4:
        for label, heads, value in PAPER_REFERENCE:
            lines.append(f"| *{label}* | — | {heads} | *{value:.3f}* | — | — | — |")
        lines += ["", "Rows in *italics* are the ConvBERT authors' reported numbers (pre-trained "
                  "base models; their pooling and [CLS]/[SEP] choices are not stated), for "
                  "reference only — not computed here."]
    lines += ["", "Per (layer, head) values: `attention.json`. Plots: "
              + ", ".join(f"`attention_maps_example{k}.png`" for k in settings["plotted_examples"])
              + ", `attention_concentration_per_layer.png`.", ""]
    return "\n".join(lines)


def plot_example_maps(plotted, k, window, task_name, exclude_special=False):
    """Fig. 2/6: example k's head- and layer-averaged map, one panel per checkpoint."""
    from base.plots import pyplot
    plt = pyplot()
    names = list(plotted)
    fig, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 4.8), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[0], names):
        entry = plotted[name][k]
        image = ax.imshow(entry["map"], cmap="viridis", interpolation="nearest")
        length = entry["map"].shape[0]
        for offset in (-window, window):   # band edges |i - j| = w
            ax.plot(np.clip(np.arange(length) + offset, 0, length - 1), np.arange(length),
                    color="white", linestyle="--", linewidth=0.6, alpha=0.7)
        if length <= MAX_TOKEN_LABELS:
            ax.set_xticks(range(length), entry["tokens"], rotation=90, fontsize=6)
            ax.set_yticks(range(length), entry["tokens"], fontsize=6)
        ax.set_xlim(-0.5, length - 0.5)
        ax.set_ylim(length - 0.5, -0.5)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title(f"{name}: C = {_fmt(entry['C'])}")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention probability")
    fig.suptitle(f"{task_name.upper()} dev example {k}: self-attention averaged over heads and "
                 f"layers (dashed: |i−j| = {window})"
                 + ("; C without [CLS]/[SEP] rows and columns" if exclude_special else ""),
                 fontsize=10)
    return fig


def plot_per_layer(results, window):
    from base.plots import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in results:
        layers = np.arange(1, len(r["C_per_layer"]) + 1)
        ax.plot(layers, r["C_per_layer"], marker="o",
                label=f"{r['name']} (pooled {_fmt(r['C_pooled'])})")
    longest = max(len(r["C_per_layer"]) for r in results)
    ax.set_xticks(range(1, longest + 1))
    ax.set_xlabel("layer")
    ax.set_ylabel(f"diagonal concentration C (w = {window}, ratio)")
    ax.set_title("Self-attention mass inside vs outside the band, per layer")
    finite = [c for r in results for c in r["C_per_layer"] if math.isfinite(c)]
    ax.set_ylim(0, 1.25 * max(finite, default=1.0) or 1.0)   # a ratio: drawn to scale from 0
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def write_outputs(output_dir, results, plotted, settings):
    from base.plots import save_figure
    from base import fileio
    fileio.makedirs(output_dir)
    document = {"settings": settings, "models": results}
    fileio.write_text_atomic(fileio.join(output_dir, f"{NAME}.json"),
                             json.dumps(_json_safe(document), indent=2, allow_nan=False) + "\n")
    fileio.write_text_atomic(fileio.join(output_dir, f"{NAME}.md"),
                             markdown_table(results, settings))
    paths = []
    for k in settings["plotted_examples"]:
        path = fileio.join(output_dir, f"attention_maps_example{k}.png")
        save_figure(plot_example_maps(plotted, k, settings["window"], settings["task"],
                                      settings["exclude_special"]), path)
        paths.append(path)
    path = fileio.join(output_dir, "attention_concentration_per_layer.png")
    save_figure(plot_per_layer(results, settings["window"]), path)
    return paths + [path]


# ----------------------------------------------------------------------------- entry point
_ERROR_TYPES = (("data.errors", "DataError"),
                ("model.checkpoints", "CheckpointError"), ("model.config", "ConfigError"),
                ("finetune.hparams", "HParamsError"))


def _user_error_types():
    """Bad-input error classes of the modules loaded so far (as run_finetuning.py does)."""
    from finetune.console import UsageError
    return (UsageError,) + tuple(getattr(sys.modules[m], n) for m, n in _ERROR_TYPES
                                 if m in sys.modules)


def run(argv):
    args = parse_args(argv)
    models, task, split, examples = check_inputs(args)
    args.task = task.name
    results, plotted = [], {}
    for name, path, vocab_file in models:
        result, plotted[name] = analyse_model(name, path, vocab_file, examples, args)
        results.append(result)
    settings = describe_settings(args, task, split, len(examples))
    for path in write_outputs(args.output_dir, results, plotted, settings):
        print(f"wrote {path}")
    print(f"wrote {args.output_dir}/{NAME}.md, {NAME}.json")
    return 0


def main(argv=None):
    """Exit status: 0, or 1 with one line `error: ...` for a bad flag or input."""
    from base.command import run_command
    return run_command(run, argv, _user_error_types)


if __name__ == "__main__":
    sys.exit(main())
