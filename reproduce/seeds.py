"""Reproductions of one recipe that differ only in `--seed` (the pre-training seed, and the first
of the fine-tuning seeds), side by side: does a finding hold across pre-training seeds?

    python -m reproduce.seeds runs/repro_tiny runs/repro_tiny_seed1 --output_dir=runs/tiny_seeds

Each argument is a `run_reproduction.py --output_dir` whose report has been written (its
results.json). Written into --output_dir: seeds.md, seeds.json, seeds_heldout.png (every run's
held-out curves in one plot) and seeds_glue.png (the pooled GLUE scores):

* per run: its seed, each pre-trained model's final held-out generator accuracy and
  discriminator AUC, and its GLUE wins over that run's random init;
* pooled: every fine-tuning trial of every run, per model and task, as median (mean ± std, n).
  Wins over random init use the report's rule (mean above random init's by more than the larger
  std), so the std now spans both the fine-tuning and the pre-training seeds.
"""
import argparse
import json
import os
import sys

if __name__ == "__main__":   # a command: quiet before reproduce/ imports TensorFlow
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from base import fileio  # noqa: E402
from base.plots import pyplot  # noqa: E402
from reproduce import report  # noqa: E402
from reproduce.pipeline import finetune_dir_of, pretrain_dir_of  # noqa: E402


class SeedsError(ValueError):
    """An unusable run directory; the message is one line and names the file."""


def load_run(run_dir):
    """{"dir", "seed", "results"} of one reproduction (results.json as run_reproduction wrote it)."""
    path = os.path.join(run_dir, "results.json")
    if not fileio.exists(path):
        raise SeedsError(f"{path}: not found (run `run_reproduction.py ... --report_only` there)")
    try:
        results = report.read_json(path)
        for key in ("scale", "tasks", "models", "glue", "pretraining"):
            results[key]
    except (ValueError, KeyError, TypeError) as e:
        raise SeedsError(f"{path}: not a reproduction's results.json ({e!r})") from None
    seed = None
    for model in ("convbert", "electra"):   # written when the pre-training starts
        hparams = os.path.join(pretrain_dir_of(run_dir, model), "hparams.json")
        if fileio.exists(hparams):
            seed = report.read_json(hparams).get("seed")
            break
    return {"dir": run_dir, "seed": seed, "results": results}


def check_runs(runs):
    """The runs must share scale, tasks and models, and (where known) differ in seed."""
    if len(runs) < 2:
        raise SeedsError("give at least two reproduction directories")
    first = runs[0]["results"]
    for run in runs[1:]:
        r = run["results"]
        for key in ("scale", "tasks", "models"):
            if r[key] != first[key]:
                raise SeedsError(f"{os.path.join(run['dir'], 'results.json')}: {key} {r[key]!r} "
                                 f"differs from {first[key]!r} of {runs[0]['dir']}")
    seeds = [run["seed"] for run in runs if run["seed"] is not None]
    if len(set(seeds)) < len(seeds):
        raise SeedsError(f"two runs share a pre-training seed ({', '.join(map(str, seeds))}): "
                         "they are the same sample")


def pooled_glue(runs):
    """{model: {task: {"metric", "summary"}}} over every trial of every run."""
    first = runs[0]["results"]
    return {model: report.glue_entries([finetune_dir_of(run["dir"], model) for run in runs],
                                       first["tasks"])
            for model in first["models"]}


def combine(runs):
    """Every number of seeds.md as one JSON-able dict."""
    check_runs(runs)
    first = runs[0]["results"]
    glue = pooled_glue(runs)
    per_run = []
    for run in runs:
        r = run["results"]
        final = {model: (p["heldout"][-1] if p["heldout"] else {})
                 for model, p in r["pretraining"].items()}
        per_run.append({
            "dir": run["dir"], "seed": run["seed"],
            "heldout_final": {m: {k: f.get(k) for k in ("step", "gen_accuracy", "disc_auc")}
                              for m, f in final.items()},
            "heldout": {m: p["heldout"] for m, p in r["pretraining"].items()},
            "wins": {m: sum(v.values()) for m, v in r["pretraining_helps"].items()},
            "compared": {m: len(v) for m, v in r["pretraining_helps"].items()},
            "won_tasks": {m: [t for t, v in per_task.items() if v]
                          for m, per_task in r["pretraining_helps"].items()}})
    return {"scale": first["scale"], "tasks": first["tasks"], "models": first["models"],
            "runs": per_run, "glue": glue, "pretraining_helps": report.pretraining_helps(glue),
            "num_trials": _trial_counts(glue)}


def _trial_counts(glue):
    """"n" of the pooled cells: one number, or "min–max" when the runs are not all complete."""
    counts = sorted({e["summary"][e["metric"]]["n"] for m in glue.values() for e in m.values()})
    if not counts:
        return 0
    return counts[0] if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def markdown(data):
    tasks = data["tasks"]
    pretrained = [m for m in ("convbert", "electra") if m in data["models"]]
    lines = [f"Scale `{data['scale']}`, {len(data['runs'])} reproductions that differ in --seed.",
             "", "| run | seed | " + " | ".join(
                 f"{report.MODEL_TITLES[m]} held-out gen acc / AUC" for m in pretrained)
             + " | " + " | ".join(f"{report.MODEL_TITLES[m]} wins" for m in pretrained) + " |",
             "|---|---|" + "---|" * (2 * len(pretrained))]
    for run in data["runs"]:
        cells = []
        for m in pretrained:
            f = run["heldout_final"].get(m) or {}
            cells.append(f"{f['gen_accuracy']:.3f} / {f['disc_auc']:.3f}"
                         if f.get("gen_accuracy") is not None else "–")
        for m in pretrained:
            won = run["won_tasks"].get(m)
            compared = run["compared"].get(m)
            cells.append(f"{run['wins'][m]} of {compared}" + (f" ({', '.join(won)})" if won else "")
                         if compared else "–")
        lines.append(f"| {run['dir']} | {run['seed']} | " + " | ".join(cells) + " |")
    lines += ["", f"GLUE dev pooled over every trial of every run (n = {data['num_trials']} per "
              "cell): median (mean ± std); CoLA MCC, STS-B Spearman, accuracy otherwise; Avg "
              "of the medians.", "",
              "| model | " + " | ".join(report.TASK_TITLES.get(t, t) for t in tasks) + " | Avg |",
              "|---|" + "---|" * (len(tasks) + 1)]
    for model in data["models"]:
        cells = report.score_cells(data["glue"].get(model, {}), tasks)
        lines.append(f"| {report.MODEL_TITLES.get(model, model)} | " + " | ".join(cells) + " |")
    if data["pretraining_helps"]:
        lines += ["", "Pooled: pre-trained mean above random init's mean by more than the larger "
                  "std:", ""]
        for model, per_task in data["pretraining_helps"].items():
            won = [t for t, v in per_task.items() if v]
            lines.append(f"- {report.MODEL_TITLES[model]}: {len(won)} of {len(per_task)} tasks"
                         + (f" ({', '.join(won)})" if won else ""))
    return "\n".join(lines) + "\n"


def plot_heldout(data, png):
    """Held-out generator accuracy and discriminator AUC against step: one colour per model,
    one line style per run."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    styles = ("-", "--", ":", "-.")
    for i, run in enumerate(data["runs"]):
        for model, curve in run["heldout"].items():
            if not curve:
                continue
            steps = [h["step"] for h in curve]
            label = f"{report.MODEL_TITLES[model]}, seed {run['seed']}"
            for ax, key in zip(axes, ("gen_accuracy", "disc_auc")):
                ax.plot(steps, [h[key] for h in curve], color=report.COLORS[model],
                        linestyle=styles[i % len(styles)], marker="o", markersize=3, label=label)
    axes[0].set(xlabel="optimizer step", ylabel=report.GEN_ACCURACY_LABEL,
                title="Generator accuracy, held-out batch")
    axes[1].set(xlabel="optimizer step", ylabel=report.AUC_LABEL,
                title="Discriminator AUC, held-out batch (own generator)")
    report.finish_figure(fig, axes, "Pre-training curves over pre-training seeds, scale "
                                    f"{data['scale']}", png)


def write(runs, output_dir):
    data = combine(runs)
    fileio.makedirs(output_dir)
    paths = {name: os.path.join(output_dir, name) for name in
             ("seeds.json", "seeds.md", "seeds_heldout.png", "seeds_glue.png")}
    report.write_text(paths["seeds.json"], json.dumps(data, indent=2) + "\n")
    report.write_text(paths["seeds.md"], markdown(data))
    plot_heldout(data, paths["seeds_heldout.png"])
    report.plot_glue(dict(data, scale=f"{data['scale']}, pooled over {len(runs)} pre-training "
                                       "seeds"), paths["seeds_glue.png"])
    return list(paths.values())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run_reproduction.py output directories")
    ap.add_argument("--output_dir", required=True)
    args = ap.parse_args(argv)
    try:
        paths = write([load_run(d) for d in args.runs], args.output_dir)
    except SeedsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("seeds: " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
