"""The reproduction's report: one Markdown table in the paper's layout, a JSON of every number,
and PNG plots (pre-training curves, GLUE scores with their spread over seeds; with
--finetune_at_steps, GLUE against the pre-training step of the fine-tuned checkpoint).

Cells are the median over fine-tuning seeds with mean ± sample std (ddof 1) and n, as
`finetune.glue.leaderboard.summarize_trials` computes them; the headline metric per task is the
papers' (CoLA MCC, STS-B Spearman, accuracy otherwise: `finetune.glue.metrics.task_score`).
"Pre-training helps" on a task means the pre-trained model's mean beats random init's mean by
more than the larger of the two seeds' standard deviations.
"""
import json
import os

from base.plots import pyplot, save_figure
from base import fileio

TASK_TITLES = {"cola": "CoLA (MCC)", "sst": "SST-2 (acc)", "mrpc": "MRPC (acc)",
               "sts": "STS-B (Spearman)", "rte": "RTE (acc)"}
MODEL_TITLES = {"convbert": "ConvBERT", "electra": "ELECTRA (BERT architecture)",
                "random": "ConvBERT, random init"}
COLORS = {"convbert": "tab:blue", "electra": "tab:orange", "random": "tab:gray"}


def read_json(path):
    return json.loads(fileio.read_text(path))


def read_jsonl(path):
    if not fileio.exists(path):
        return []
    return [json.loads(line) for line in fileio.read_text(path).splitlines() if line.strip()]


def trial_metrics(finetune_dir, task):
    """[{metric: value}] of every seed of one fine-tuning run on one task ([] before any)."""
    files = fileio.glob(os.path.join(finetune_dir, "results", f"{task}_dev_metrics*.json"))
    return [read_json(p)["metrics"] for p in files]


def task_summary(finetune_dir, task):
    """{metric: {median, mean, std, min, max, n}} over the seeds of one fine-tuning run, or None."""
    from finetune.glue.leaderboard import summarize_trials
    trials = trial_metrics(finetune_dir, task)
    return summarize_trials(trials) if trials else None


def pretraining_record(model_dir):
    """The run summary's numbers and the held-out curve of one pre-training model_dir, or None
    before the run has finished."""
    path = os.path.join(model_dir, "pretraining_summary.json")
    if not fileio.exists(path):
        return None
    s = read_json(path)
    return {"global_step": s["global_step"], "trainable_parameters": s["trainable_parameters"],
            "wall_seconds": s["wall_seconds"], "sequences_per_second": s["sequences_per_second"],
            "first_step_seconds": s.get("first_step_seconds"),
            "final_window": s["final"], "history": s["history"],
            "heldout": read_jsonl(os.path.join(model_dir, "heldout_curve.jsonl"))}


def glue_entries(finetune_dirs, tasks):
    """{task: {"metric": the paper's headline metric, "summary": {metric: {median, mean, std,
    min, max, n}}}} for the tasks with results: over the seeds of one fine-tuning run (a
    directory), or pooled over the seeds of several (a list: reproduce/seeds.py)."""
    from finetune.glue.leaderboard import summarize_trials
    from finetune.glue.metrics import PAPER_METRIC
    dirs = [finetune_dirs] if isinstance(finetune_dirs, (str, os.PathLike)) else finetune_dirs
    entries = {}
    for task in tasks:
        trials = [m for d in dirs for m in trial_metrics(d, task)]
        if trials:
            entries[task] = {"metric": PAPER_METRIC.get(task, "accuracy"),
                             "summary": summarize_trials(trials)}
    return entries


def collect(repro):
    """Every number of the reproduction as one JSON-able dict."""
    glue = {model: glue_entries(repro.finetune_dir(model), repro.tasks) for model in repro.models}
    pretraining = {}
    for model in ("convbert", "electra"):
        record = pretraining_record(repro.pretrain_dir(model))
        if model in repro.models and record is not None:
            pretraining[model] = record
    _, heldout = repro.shard_files()
    return {"scale": repro.recipe.scale, "tasks": list(repro.tasks), "models": list(repro.models),
            "heldout_shards": heldout,
            "num_trials": repro.recipe.num_trials, "glue": glue, "pretraining": pretraining,
            "pretraining_helps": pretraining_helps(glue),
            "glue_by_step": glue_by_step(repro, glue)}


def glue_by_step(repro, glue):
    """{model: [{"step", "glue": {task: entry}, "helps": {task: bool}}]} over the kept checkpoints
    fine-tuned with --finetune_at_steps and the final model (last), for each pre-trained model;
    {} without --finetune_at_steps."""
    result = {}
    for model in ("convbert", "electra"):
        if not repro.finetune_at_steps or model not in repro.models:
            continue
        rows = [{"step": step, "glue": glue_entries(repro.finetune_dir(model, step), repro.tasks)}
                for step in repro.finetune_at_steps]
        rows.append({"step": repro.recipe.pretrain["num_train_steps"], "glue": glue.get(model, {})})
        for row in rows:
            row["helps"] = pretraining_helps({model: row["glue"], "random": glue.get("random", {})}
                                             ).get(model, {})
        result[model] = rows
    return result


def _headline(entry):
    return entry["summary"][entry["metric"]] if entry else None


def pretraining_helps(glue):
    """{model: {task: bool}}: mean above random init's mean by more than the larger std."""
    random = glue.get("random", {})
    result = {}
    for model in ("convbert", "electra"):
        if model not in glue:
            continue
        result[model] = {}
        for task, entry in glue[model].items():
            if task not in random:
                continue
            ours, base = _headline(entry), _headline(random[task])
            margin = max(ours["std"], base["std"])
            result[model][task] = bool(ours["mean"] - base["mean"] > margin)
    return result


def compare_models(glue, first, second):
    """{task: {"difference": first's mean - second's mean, "beyond_spread": the difference
    larger than the larger of their seeds' stds (False with one seed: no spread)}} over the
    tasks both have."""
    out = {}
    for task, entry in glue.get(first, {}).items():
        other = glue.get(second, {}).get(task)
        if other is None:
            continue
        a, b = _headline(entry), _headline(other)
        difference = a["mean"] - b["mean"]
        out[task] = {"difference": round(difference, 2),
                     "beyond_spread": bool(min(a["n"], b["n"]) > 1
                                           and abs(difference) > max(a["std"], b["std"]))}
    return out


def score_cells(entries, tasks):
    """One table row's cells: `median (mean ± std)` per task ("–" when missing), then the Avg of
    the medians ("–" unless every task has one)."""
    cells, medians = [], []
    for task in tasks:
        entry = entries.get(task)
        if entry is None:
            cells.append("–")
            continue
        s = _headline(entry)
        medians.append(s["median"])
        cells.append(f"{s['median']:.1f} ({s['mean']:.1f} ± {s['std']:.1f})")
    return cells + [f"{sum(medians) / len(medians):.1f}" if len(medians) == len(tasks) else "–"]


def markdown(data):
    tasks = data["tasks"]
    lines = [f"GLUE dev, scale `{data['scale']}`: median over {data['num_trials']} fine-tuning "
             "seeds, (mean ± std); CoLA MCC, STS-B Spearman, accuracy otherwise; Avg of the "
             "medians.", "",
             "| model | " + " | ".join(TASK_TITLES.get(t, t) for t in tasks) + " | Avg |",
             "|---|" + "---|" * (len(tasks) + 1)]
    for model in data["models"]:
        cells = score_cells(data["glue"].get(model, {}), tasks)
        lines.append(f"| {MODEL_TITLES.get(model, model)} | " + " | ".join(cells) + " |")
    helps = data["pretraining_helps"]
    if helps:
        lines += ["", "Pre-trained mean above random init's mean by more than the larger std:", ""]
        for model, per_task in helps.items():
            wins = sum(per_task.values())
            detail = ", ".join(f"{t} {'yes' if v else 'no'}" for t, v in per_task.items())
            lines.append(f"- {MODEL_TITLES[model]}: {wins} of {len(per_task)} tasks ({detail})")
    if data.get("glue_by_step"):
        lines += ["", "GLUE dev by pre-training step (the kept checkpoint of that step, fine-tuned "
                  "with the same recipe and seeds; the last row of each model is the final "
                  "model above); wins: mean above random init's by more than the larger std.", "",
                  "| model | step | " + " | ".join(TASK_TITLES.get(t, t) for t in tasks)
                  + " | Avg | wins |", "|---|---|" + "---|" * (len(tasks) + 2)]
        for model, rows in data["glue_by_step"].items():
            for row in rows:
                cells = score_cells(row["glue"], tasks)
                wins = f"{sum(row['helps'].values())} of {len(row['helps'])}" if row["helps"] else "–"
                lines.append(f"| {MODEL_TITLES[model]} | {row['step']} | " + " | ".join(cells)
                             + f" | {wins} |")
    if data["pretraining"]:
        lines += ["", "| pre-training | steps | parameters (gen + disc) | wall | seq/s | "
                  "held-out gen acc | held-out disc AUC |", "|---|---|---|---|---|---|---|"]
        for model, p in data["pretraining"].items():
            last = p["heldout"][-1] if p["heldout"] else {}
            lines.append(
                f"| {MODEL_TITLES[model]} | {p['global_step']} | {p['trainable_parameters']:,} | "
                f"{p['wall_seconds']:.0f} s | {p['sequences_per_second']:.1f} | "
                f"{last.get('gen_accuracy', float('nan')):.3f} | "
                f"{last.get('disc_auc', float('nan')):.3f} |")
    return "\n".join(lines) + "\n"


GEN_ACCURACY_LABEL = "accuracy at masked positions"
AUC_LABEL = "ROC AUC (non-padding tokens)"


def finish_figure(fig, axes, title, png):
    """A grid and a legend on every panel, the title, then the PNG."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, png)


def plot_pretraining(data, png):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for model, p in data["pretraining"].items():
        color, title = COLORS[model], MODEL_TITLES[model]
        steps = [h["step"] for h in p["history"]]
        axes[0].plot(steps, [h["gen_loss"] for h in p["history"]], color=color, label=title)
        held = p["heldout"]
        axes[1].plot(steps, [h["gen_accuracy"] for h in p["history"]], color=color, alpha=0.4,
                     linestyle="--", label=f"{title}, training batches")
        axes[2].plot(steps, [h["disc_auc"] for h in p["history"]], color=color, alpha=0.4,
                     linestyle="--", label=f"{title}, training batches")
        if held:
            axes[1].plot([h["step"] for h in held], [h["gen_accuracy"] for h in held],
                         color=color, marker="o", label=f"{title}, held-out batch")
            axes[2].plot([h["step"] for h in held], [h["disc_auc"] for h in held],
                         color=color, marker="o", label=f"{title}, held-out batch")
            fixed = [h for h in held if "disc_auc_last_gen" in h]
            if fixed:  # one fixed corruption: moves with the discriminator only
                axes[2].plot([h["step"] for h in fixed], [h["disc_auc_last_gen"] for h in fixed],
                             color=color, marker="^", linestyle=":",
                             label=f"{title}, held-out, last generator's replacements")
    axes[0].set(xlabel="optimizer step", ylabel="generator MLM loss (nats)",
                title="Generator loss (training batches)")
    axes[1].set(xlabel="optimizer step", ylabel=GEN_ACCURACY_LABEL, title="Generator accuracy")
    axes[2].set(xlabel="optimizer step", ylabel=AUC_LABEL,
                title="Discriminator AUC (replaced-token detection)")
    finish_figure(fig, axes, f"Pre-training curves, scale {data['scale']}", png)


def plot_glue(data, png):
    plt = pyplot()
    import numpy as np
    tasks = data["tasks"]
    models = [m for m in data["models"] if data["glue"].get(m)]
    width = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(tasks), 4.2))
    for i, model in enumerate(models):
        means, stds, medians = [], [], []
        for task in tasks:
            entry = data["glue"][model].get(task)
            s = _headline(entry) if entry else {"mean": np.nan, "std": 0.0, "median": np.nan}
            means.append(s["mean"])
            stds.append(s["std"])
            medians.append(s["median"])
        x = np.arange(len(tasks)) + (i - (len(models) - 1) / 2) * width
        ax.bar(x, means, width, yerr=stds, capsize=3, color=COLORS.get(model),
               label=f"{MODEL_TITLES.get(model, model)} (mean ± std)")
        ax.plot(x, medians, "k_", markersize=10)
    ax.plot([], [], "k_", markersize=10, label="median")
    ax.set_xticks(np.arange(len(tasks)), [TASK_TITLES.get(t, t) for t in tasks], fontsize=8)
    ax.set_xlabel("GLUE task (metric)")
    ax.set_ylabel("dev score (×100)")
    ax.set_title(f"GLUE dev, scale {data['scale']}, {data['num_trials']} seeds per task")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, png)


def plot_glue_by_step(data, png):
    """One panel per task: mean ± std over seeds against the pre-training step of the fine-tuned
    checkpoint, for each pre-trained model; random init as a line with its ±std band."""
    plt = pyplot()
    tasks = data["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.4 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        random = data["glue"].get("random", {}).get(task)
        if random:
            s = _headline(random)
            ax.axhline(s["mean"], color=COLORS["random"], linestyle="--",
                       label=f"{MODEL_TITLES['random']} (mean ± std)")
            ax.axhspan(s["mean"] - s["std"], s["mean"] + s["std"], color=COLORS["random"],
                       alpha=0.2)
        for model, rows in data["glue_by_step"].items():
            points = [(r["step"], _headline(r["glue"][task])) for r in rows if task in r["glue"]]
            if points:
                ax.errorbar([p[0] for p in points], [p[1]["mean"] for p in points],
                            yerr=[p[1]["std"] for p in points], color=COLORS[model], marker="o",
                            capsize=3, label=f"{MODEL_TITLES[model]} (mean ± std)")
        ax.set(xlabel="pre-training step of the fine-tuned checkpoint",
               ylabel="dev score (×100)", title=TASK_TITLES.get(task, task))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"GLUE dev against pre-training length, scale {data['scale']}, "
                 f"{data['num_trials']} seeds per point")
    fig.tight_layout()
    save_figure(fig, png)


def write_text(path, text):
    fileio.write_text_atomic(path, text)


def write_outputs(data, directory, head="", tail=""):
    """A run's report files in `directory`: results.json (`data`), results.md (`head`, the GLUE
    table and the pre-training table, `tail`), pretraining_curves.png when there is
    pre-training and glue_scores.png when there are GLUE results. {kind: path} of those
    written."""
    paths = {"md": os.path.join(directory, "results.md"),
             "json": os.path.join(directory, "results.json")}
    write_text(paths["json"], json.dumps(data, indent=2) + "\n")
    write_text(paths["md"], head + markdown(data) + tail)
    if data["pretraining"]:
        paths["curves"] = os.path.join(directory, "pretraining_curves.png")
        plot_pretraining(data, paths["curves"])
    if any(data["glue"].values()):
        paths["glue"] = os.path.join(directory, "glue_scores.png")
        plot_glue(data, paths["glue"])
    return paths


def write_report(repro):
    """results.md, results.json and the PNGs under the reproduction's output directory."""
    data = collect(repro)
    paths = write_outputs(data, repro.out)
    if data["glue_by_step"]:
        paths["by_step"] = repro.path("glue_vs_steps.png")
        plot_glue_by_step(data, paths["by_step"])
    return list(paths.values())
