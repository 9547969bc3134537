"""The (width, depth) grid of an elastic ConvBERT on a GLUE dev set, DynaBERT's paper-style table.

    python -m elastic.grid --task_name mrpc --run_dir runs/dynabert_mrpc \
        --data_dir ../shared/data/glue --vocab_file vocab.txt --output_dir runs/dynabert_mrpc/grid \
        [--width_list 1,0.75,0.5,0.25] [--depth_list 1,0.75,0.5] [--max_seq_length 128]

`--run_dir` is what `python -m elastic.run` wrote: one `seed_<s>/` per seed, holding the trained
model of each phase (`<phase>/model`; the last of final > depth > width is evaluated) and
`rewired/model`, the plain fine-tuned teacher rewired by importance but never DynaBERT-trained:
the same cells cut from it are the baseline ("plain"). Every cell is the sliced sub-network
(elastic/slicing.py `sliced_forward`, equal to the extracted model of elastic/extract.py) with
dropout off, on the whole dev set.

Writes into --output_dir: `grid.md` (rows = width multiplier, columns = depth multiplier: the
task's main metric, mean ± sample std over seeds, DynaBERT-trained and plain; then parameters and
FLOPs per cell), `grid.json` (every number, per seed) and `grid.png` (metric vs encoder
parameters, one series per model kind, error bars = std over seeds).
Parameters = encoder parameters without the task head; FLOPs = forward FLOPs per token at
--max_seq_length (model/flops.py conventions, via elastic/extract.py `subnetwork_cost`).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from base import fileio

NAME = "grid"
KINDS = (("dynabert", "DynaBERT-trained"), ("plain", "plain fine-tuned (no DynaBERT training)"))
PHASE_ORDER = ("final", "depth", "width")


def main_metric(task):
    from finetune.glue_task import GLUE_TABLE_COLUMNS
    for key, _, metric in GLUE_TABLE_COLUMNS:
        if key == task:
            return metric
    return "accuracy"


def evaluate_cells(encoder, head, task, features, width_list, depth_list, batch_size=64):
    """{(width, depth): {metric: value x 100}} of every sub-network of `encoder` + `head` on
    `features` (dev, with label_ids)."""
    import tensorflow as tf
    from elastic.importance import MODEL_INPUTS
    from elastic.slicing import Subnet, sliced_forward
    from finetune.glue.metrics import compute_metrics
    from finetune.glue_task import to_predictions
    inputs = {k: np.asarray(features[k]) for k in MODEL_INPUTS}
    n = len(inputs["input_ids"])
    pad = (-n) % batch_size
    if pad:   # one batch shape: one trace per cell
        inputs = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                  for k, v in inputs.items()}
    results = {}
    for width in width_list:
        for depth in depth_list:
            subnet = Subnet.for_width(encoder.config, width, depth)

            @tf.function(autograph=False)  # no tensor control flow; see training/core.py
            def forward(batch, subnet=subnet):
                sequence = sliced_forward(encoder, batch, subnet, training=False)
                return tf.cast(head(sequence, training=False), tf.float32)

            logits = np.concatenate([
                forward({k: v[i:i + batch_size] for k, v in inputs.items()}).numpy()
                for i in range(0, len(inputs["input_ids"]), batch_size)])[:n]
            results[(width, depth)] = compute_metrics(task, to_predictions(task, logits),
                                                      features["label_ids"])
    return results


def cell_costs(config, width_list, depth_list, seq_len):
    from elastic.extract import subnetwork_cost
    from elastic.slicing import Subnet
    costs = {}
    for width in width_list:
        for depth in depth_list:
            subnet = Subnet.for_width(config, width, depth)
            costs[(width, depth)] = {
                **subnetwork_cost(config, subnet, seq_len), "sa_heads": subnet.sa_heads,
                "conv_heads": subnet.conv_heads, "ffn_per_group": subnet.ffn_per_group,
                "layers": list(subnet.layers)}
    return costs


def build_grid(task, per_seed, costs, width_list, depth_list, settings):
    """The grid document: per_seed = {kind: [{(w, d): metrics} per seed]}."""
    from finetune.glue.leaderboard import summarize_trials
    metric = main_metric(task)
    cells = []
    for width in width_list:
        for depth in depth_list:
            cell = {"width": width, "depth": depth, **costs[(width, depth)]}
            for kind, runs in per_seed.items():
                if runs:
                    values = [r[(width, depth)] for r in runs]
                    cell[kind] = {"per_seed": values, "summary": summarize_trials(values)}
            cells.append(cell)
    return {"task": task, "metric": metric, "width_list": list(width_list),
            "depth_list": list(depth_list), "settings": settings, "cells": cells}


def _cell(grid, width, depth):
    return next(c for c in grid["cells"] if c["width"] == width and c["depth"] == depth)


def _fmt(summary, metric):
    s = summary[metric]
    return f"{s['mean']:.1f} ± {s['std']:.1f}"


def markdown_table(grid):
    metric, widths, depths = grid["metric"], grid["width_list"], grid["depth_list"]
    settings = grid["settings"]
    lines = [f"# DynaBERT grid: {grid['task']} dev {metric}",
             "",
             f"Mean ± sample std over seeds {settings['seeds']} (n = {len(settings['seeds'])}); "
             f"{settings['num_examples']} dev examples. Each cell: DynaBERT-trained / plain "
             "(the same sub-network cut from the rewired fine-tuned teacher without DynaBERT "
             "training). Rows: width multiplier (heads per HEAD_COUNTS, FFN fraction); columns: "
             "depth multiplier (DynaBERT's layer rule).",
             "",
             "| width \\ depth | " + " | ".join(f"{d:g}" for d in depths) + " |",
             "|---|" + "---|" * len(depths)]
    for w in widths:
        row = []
        for d in depths:
            cell = _cell(grid, w, d)
            parts = [_fmt(cell[k]["summary"], metric) if k in cell else "-" for k, _ in KINDS]
            row.append(" / ".join(parts))
        lines.append(f"| {w:g} | " + " | ".join(row) + " |")
    lines += ["", f"Encoder parameters (M) / forward GFLOPs per token at sequence length "
              f"{settings['seq_len']} and heads (self-attention + convolution) / FFN per group / "
              "layers kept:", "",
              "| width \\ depth | " + " | ".join(f"{d:g}" for d in depths) + " |",
              "|---|" + "---|" * len(depths)]
    for w in widths:
        row = []
        for d in depths:
            c = _cell(grid, w, d)
            row.append(f"{c['parameters'] / 1e6:.3f}M / {c['flops_per_token'] / 1e9:.4f} / "
                       f"{c['sa_heads']}+{c['conv_heads']} / {c['ffn_per_group']} / "
                       f"{','.join(map(str, c['layers']))}")
        lines.append(f"| {w:g} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot_grid(grid):
    from base.plots import pyplot
    plt = pyplot()
    metric = grid["metric"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for (kind, label), marker in zip(KINDS, ("o", "s")):
        cells = sorted((c for c in grid["cells"] if kind in c), key=lambda c: c["parameters"])
        if not cells:
            continue
        x = [c["parameters"] / 1e6 for c in cells]
        y = [c[kind]["summary"][metric]["mean"] for c in cells]
        err = [c[kind]["summary"][metric]["std"] for c in cells]
        ax.errorbar(x, y, yerr=err, fmt=marker, capsize=3, label=label, alpha=0.85)
    ax.set_xlabel("encoder parameters (millions)")
    ax.set_ylabel(f"dev {metric} (%)")
    ax.set_title(f"{grid['task'].upper()} dev {metric} of every (width, depth) sub-network "
                 f"(n = {len(grid['settings']['seeds'])} seeds)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=9)
    return fig


def write_grid(grid, output_dir):
    """grid.md, grid.json, grid.png under `output_dir`; returns their paths."""
    from base.plots import save_figure
    fileio.makedirs(output_dir)
    paths = [fileio.join(output_dir, f"{NAME}.{ext}") for ext in ("md", "json", "png")]
    fileio.write_text_atomic(paths[1], json.dumps(grid, indent=2, allow_nan=False) + "\n")
    fileio.write_text_atomic(paths[0], markdown_table(grid))
    save_figure(plot_grid(grid), paths[2])
    return paths


# ----------------------------------------------------------------------------- from a run dir
def seed_dirs(run_dir):
    """{seed: directory} of an elastic.run output."""
    seeds = {}
    for name in fileio.listdir(run_dir):
        if name.startswith("seed_") and name[5:].isdigit():
            seeds[int(name[5:])] = fileio.join(run_dir, name)
    return dict(sorted(seeds.items()))


def trained_model_dir(seed_dir):
    """The model of the last finished phase (final > depth > width) of one seed."""
    for phase in PHASE_ORDER:
        if fileio.exists(fileio.join(seed_dir, phase, "summary.json")):
            return fileio.join(seed_dir, phase, "model")
    return None


def grid_from_run(task, run_dir, dev_features, width_list, depth_list, seq_len, output_dir,
                  seeds=None, log=print):
    """Evaluate every seed of `run_dir` (or those in `seeds`), DynaBERT-trained and plain, and
    write the grid."""
    from finetune.console import UsageError
    from elastic.train import build_model, load_finetuned
    found = seed_dirs(run_dir)
    seeds = {s: d for s, d in found.items() if seeds is None or s in seeds}
    if not seeds:
        raise UsageError(f"{run_dir}: no seed_<s>/ directories (run python -m elastic.run first)")
    per_seed = {kind: [] for kind, _ in KINDS}
    models, config = {}, None
    for seed, directory in seeds.items():
        trained = trained_model_dir(directory)
        if trained is None:
            raise UsageError(f"{directory}: no finished phase (width/summary.json missing)")
        for kind, path in (("dynabert", trained), ("plain", fileio.join(directory, "rewired"))):
            config, tensors, path = load_finetuned(path, task)
            encoder, head = build_model(config, tensors, task, path)
            per_seed[kind].append(evaluate_cells(encoder, head, task, dev_features, width_list,
                                                 depth_list))
            models.setdefault(kind, []).append(path)
            log(f"seed {seed} {kind}: " + ", ".join(
                f"{w:g}/{d:g} {m[main_metric(task)]:.1f}"
                for (w, d), m in per_seed[kind][-1].items()))
    costs = cell_costs(config, width_list, depth_list, seq_len)
    settings = {"run_dir": run_dir, "seeds": list(seeds), "models": models, "seq_len": seq_len,
                "num_examples": int(len(dev_features["input_ids"]))}
    grid = build_grid(task, per_seed, costs, width_list, depth_list, settings)
    return grid, write_grid(grid, output_dir)


def load_dev_features(task, data_dir, vocab_file, max_seq_length, max_eval_examples=None):
    from data.tokenization import load_tokenizer
    from finetune.features import convert_examples_to_features as glue_features
    from finetune.glue.splits import load_glue_data
    from finetune.hparams import FinetuneHParams
    from finetune.console import UsageError
    if not fileio.isfile(vocab_file):
        raise UsageError(f"{vocab_file}: vocab file not found")
    hp = FinetuneHParams(max_eval_examples=max_eval_examples)
    data = load_glue_data(task, hp, data_dir, do_train=False, do_eval=True, do_predict=False)
    return glue_features(data.evals[0][1], task, load_tokenizer(vocab_file), max_seq_length)


# ----------------------------------------------------------------------------- entry point
def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m elastic.grid", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task_name", required=True)
    parser.add_argument("--run_dir", required=True, help="output dir of python -m elastic.run")
    parser.add_argument("--data_dir", required=True, help="GLUE dir (<TASK>/dev.tsv)")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--width_list", default="1,0.75,0.5,0.25")
    parser.add_argument("--depth_list", default="1,0.75,0.5")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_eval_examples", type=int, default=None)
    return parser.parse_args(argv)


def run(argv):
    from elastic.train import parse_multipliers
    from finetune.console import UsageError
    from finetune.glue.tasks import normalize_task_name
    args = parse_args(argv)
    task = normalize_task_name(args.task_name)
    widths = parse_multipliers(args.width_list, "width_list")
    depths = parse_multipliers(args.depth_list, "depth_list")
    if not fileio.isdir(args.run_dir):
        raise UsageError(f"{args.run_dir}: --run_dir not found")
    dev = load_dev_features(task, args.data_dir, args.vocab_file, args.max_seq_length,
                            args.max_eval_examples)
    _, paths = grid_from_run(task, args.run_dir, dev, widths, depths, args.max_seq_length,
                             args.output_dir)
    for path in paths:
        print(f"wrote {path}")
    return 0


_ERROR_TYPES = (("data.errors", "DataError"), ("finetune.glue.tasks", "DataError"),
                ("model.checkpoints", "CheckpointError"), ("model.config", "ConfigError"),
                ("finetune.hparams", "HParamsError"), ("training.state", "TrainingError"))


def user_error_types():
    """Bad-input error classes of the modules loaded so far (as run_finetuning.py does)."""
    from finetune.console import UsageError
    return (UsageError,) + tuple(getattr(sys.modules[m], n) for m, n in _ERROR_TYPES
                                 if m in sys.modules)


def main(argv=None, run_fn=run):
    """Exit status: 0, or 1 with one line `error: ...` for a bad flag or input (128 + signal
    after SIGTERM/SIGINT)."""
    from base.command import run_command
    return run_command(run_fn, argv, user_error_types)


if __name__ == "__main__":
    sys.exit(main())
