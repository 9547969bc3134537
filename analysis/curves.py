"""Training curves of pre-training runs, several runs overlaid.

    python -m analysis.curves --run NAME=MODEL_DIR [--run NAME=MODEL_DIR ...] --output_dir DIR
        [--metrics loss,gen_accuracy,disc_accuracy,disc_auc,learning_rate] [--smooth N]

Reads, per run_pretraining.py model_dir (local, gs://, ram://):
* the TensorBoard scalars under <model_dir>/train/ (training/loop.py writes every log window's
  record through training/summaries.py with pretrain/task.py's empty prefix: loss, gen_loss,
  gen_accuracy, disc_loss, disc_accuracy, disc_auc, learning_rate, grad_norm,
  sequences_per_second; the JAX trainer writes the same). Several event files (a resumed run)
  are merged by wall time, so a step trained again after a resume shows its last value. A
  model_dir without event files (a JAX run from before the JAX path wrote them) falls back to
  the `history` of its pretraining_summary.json, the same records;
* <model_dir>/heldout_curve.jsonl when present (reproduce/pipeline.py writes it: every kept
  checkpoint scored on a fixed held-out batch), drawn as markers on the metric of the same name.

Writes into DIR: curves_<metric>.png (one per metric, x = optimizer step, every run overlaid),
curves_overview.png (every metric as a subplot), curves.json (the raw series, unsmoothed) and
curves.md (per run: where the series came from, the steps, the last value of each metric).
`--smooth N` draws a trailing mean over N logged points over the faint raw curve (not for the
learning rate, a schedule).
Bad input prints one line `error: ...` and exits with status 1.
"""
import argparse
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from base.plots import pyplot, save_figure  # noqa: E402
from base import fileio  # noqa: E402

NAME = "curves"
DEFAULT_METRICS = "loss,gen_accuracy,disc_accuracy,disc_auc,learning_rate"
LOG_SUBDIR = "train"                        # pretrain/task.py: log_dir = <model_dir>/train
SUMMARY_FILE = "pretraining_summary.json"   # pretrain/task.py SUMMARY_FILE
HELDOUT_FILE = "heldout_curve.jsonl"        # reproduce/pipeline.py
UNSMOOTHED = ("learning_rate",)   # a schedule, not a noisy measurement: always drawn as it is
# y-axis label (with unit) per metric; others are labelled with their tag.
UNITS = {
    "loss": "total loss (gen + disc_weight × disc, nats)",
    "gen_loss": "generator MLM loss (nats)",
    "disc_loss": "discriminator loss (nats per token)",
    "gen_accuracy": "generator accuracy (fraction of masked tokens)",
    "disc_accuracy": "discriminator accuracy (fraction of tokens)",
    "disc_auc": "discriminator ROC AUC (0.5 = chance)",
    "learning_rate": "learning rate (per step)",
    "grad_norm": "gradient global norm (before clipping)",
    "sequences_per_second": "throughput (sequences / s)",
}


class UserError(Exception):
    """A bad flag or input; printed as one `error: ...` line."""


# ----------------------------------------------------------------------------- reading
def event_files(log_dir):
    return sorted(fileio.glob(fileio.join(log_dir, "events.out.tfevents.*")))


def read_event_scalars(files):
    """{tag: {step: value}} of every scalar in TensorBoard event files (tensor or simple_value
    summaries); a step written twice keeps the value of the later event (by wall time)."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
    events = []
    for path in files:
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            if event.HasField("summary"):
                events.append(event)
    events.sort(key=lambda e: e.wall_time)   # stable: file order breaks ties
    scalars = {}
    for event in events:
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                number = float(value.simple_value)
            elif kind == "tensor" and not value.tensor.tensor_shape.dim:
                number = float(tf.make_ndarray(value.tensor))
            else:
                continue
            scalars.setdefault(value.tag, {})[int(event.step)] = number
    return scalars


def _series(by_step):
    steps = sorted(by_step)
    return {"step": steps, "value": [by_step[s] for s in steps]}


def read_run(model_dir):
    """One run's curves: {"source", "log_dir", "series": {tag: {step, value}}, "heldout": ...}."""
    if not fileio.isdir(model_dir):
        raise UserError(f"{model_dir}: run directory not found")
    log_dir, source, scalars = None, None, {}
    for candidate in (fileio.join(model_dir, LOG_SUBDIR), model_dir):
        files = event_files(candidate) if fileio.isdir(candidate) else []
        if files:
            log_dir, source, scalars = candidate, "tensorboard", read_event_scalars(files)
            break
    summary_path = fileio.join(model_dir, SUMMARY_FILE)
    if not scalars and fileio.isfile(summary_path):
        history = json.loads(fileio.read_text(summary_path)).get("history", [])
        source = "pretraining_summary.json history"
        for record in history:
            for tag, value in record.items():
                if tag != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    scalars.setdefault(tag, {})[int(record["step"])] = float(value)
    if not scalars:
        raise UserError(f"{model_dir}: no TensorBoard event files under {LOG_SUBDIR}/ and no "
                        f"{SUMMARY_FILE} with a history (is it a run_pretraining.py model_dir?)")
    heldout = {}
    heldout_path = fileio.join(model_dir, HELDOUT_FILE)
    if fileio.isfile(heldout_path):
        for line in fileio.read_text(heldout_path).splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            for tag, value in record.items():
                if tag != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    heldout.setdefault(tag, {})[int(record["step"])] = float(value)
    return {"model_dir": model_dir, "source": source, "log_dir": log_dir,
            "series": {tag: _series(v) for tag, v in sorted(scalars.items())},
            "heldout": {tag: _series(v) for tag, v in sorted(heldout.items())}}


def smooth(values, window):
    """Trailing mean over `window` points (window 1: the values themselves)."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


# ----------------------------------------------------------------------------- plots and table
def draw_metric(ax, runs, metric, window):
    """Every run's curve of one metric on `ax` (one color per run), held-out points as markers."""
    colors = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, run) in enumerate(runs.items()):
        color = colors[i % len(colors)]
        series = run["series"].get(metric)
        if series:
            steps, values = series["step"], series["value"]
            if window > 1 and metric not in UNSMOOTHED:
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=1)
                ax.plot(steps, smooth(values, window), color=color,
                        label=f"{name} (mean of {window})")
            else:
                ax.plot(steps, values, color=color, label=name)
        held = run["heldout"].get(metric)
        if held:
            ax.plot(held["step"], held["value"], color=color, marker="o", linestyle=":",
                    label=f"{name}, held-out batch")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(UNITS.get(metric, metric))
    ax.set_title(metric.replace("_", " "))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_metric(runs, metric, window, path):
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    draw_metric(ax, runs, metric, window)
    ax.set_title(f"Pre-training: {metric.replace('_', ' ')}")
    save_figure(fig, path)


def plot_overview(runs, metrics, window, path):
    columns = min(3, len(metrics))
    rows = -(-len(metrics) // columns)
    fig, axes = pyplot().subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows),
                                  squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        draw_metric(ax, runs, metric, window)
    for ax in list(axes.flat)[len(metrics):]:
        ax.remove()
    fig.suptitle(f"Pre-training curves: {', '.join(runs)}")
    fig.tight_layout()
    save_figure(fig, path)


def markdown(doc):
    metrics = doc["metrics"]
    lines = ["# Pre-training curves", "",
             "Last logged value of each metric (training windows; held-out batch where the run "
             "has heldout_curve.jsonl).", "",
             "| run | source | steps | " + " | ".join(metrics) + " | held-out gen acc | "
             "held-out disc AUC |", "|---" * (len(metrics) + 5) + "|"]
    for name, run in doc["runs"].items():
        steps = sorted({s for series in run["series"].values() for s in series["step"]})

        def last(series):
            return f"{series['value'][-1]:.4g}" if series and series["value"] else "–"
        cells = [last(run["series"].get(m)) for m in metrics]
        held = [last(run["heldout"].get(m)) for m in ("gen_accuracy", "disc_auc")]
        lines.append(f"| {name} | {run['source']} | {steps[0]}–{steps[-1]} ({len(steps)} logged) "
                     f"| " + " | ".join(cells + held) + " |")
    lines += ["", f"Command: `{doc['command']}`", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- entry point
class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, exit 1 (argparse would print the usage, exit 2)
        raise UserError(message)


def parse_args(argv):
    p = _Parser(prog="python -m analysis.curves",
                description="Pre-training curves from run_pretraining.py model_dirs.")
    p.add_argument("--run", action="append", required=True, metavar="NAME=MODEL_DIR",
                   help="a pre-training model_dir (repeat for several runs)")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--metrics", default=DEFAULT_METRICS, help="comma-separated scalar tags")
    p.add_argument("--smooth", type=int, default=1, help="trailing mean over N logged points")
    args = p.parse_args(argv)
    args.runs = {}
    for spec in args.run:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"--run {spec!r}: expected NAME=MODEL_DIR")
        if name.strip() in args.runs:
            raise UserError(f"--run {spec!r}: name {name.strip()!r} given twice")
        args.runs[name.strip()] = path.strip()
    args.metric_list = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not args.metric_list:
        raise UserError("--metrics is empty")
    if args.smooth < 1:
        raise UserError(f"--smooth must be at least 1, got {args.smooth}")
    return args


def run(argv):
    args = parse_args(argv)
    if fileio.exists(args.output_dir) and not fileio.isdir(args.output_dir):
        raise UserError(f"--output_dir {args.output_dir} is a file, not a directory")
    runs = {name: read_run(path) for name, path in args.runs.items()}
    available = sorted({t for r in runs.values() for t in (*r["series"], *r["heldout"])})
    missing = [m for m in args.metric_list if m not in available]
    if missing:
        raise UserError(f"--metrics {', '.join(missing)}: in none of the runs (they have "
                        f"{', '.join(available)})")
    doc = {"command": "python -m analysis.curves " + " ".join(argv), "metrics": args.metric_list,
           "smooth": args.smooth, "runs": runs}
    fileio.makedirs(args.output_dir)
    paths = []
    for metric in args.metric_list:
        paths.append(fileio.join(args.output_dir, f"{NAME}_{metric}.png"))
        plot_metric(runs, metric, args.smooth, paths[-1])
    paths.append(fileio.join(args.output_dir, f"{NAME}_overview.png"))
    plot_overview(runs, args.metric_list, args.smooth, paths[-1])
    for ext, text in (("json", json.dumps(doc, indent=2) + "\n"), ("md", markdown(doc))):
        paths.append(fileio.join(args.output_dir, f"{NAME}.{ext}"))
        fileio.write_text_atomic(paths[-1], text)
    print(markdown(doc))
    print("wrote " + ", ".join(paths))
    return 0


def main(argv=None):
    """Exit status: 0, or 1 with one line `error: ...` for a bad flag or input."""
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    try:
        return run(sys.argv[1:] if argv is None else list(argv))
    except UserError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
