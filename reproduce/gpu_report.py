"""The one-GPU run's report in its output folder: reproduce/report.py's files (results.json,
results.md, pretraining_curves.png, glue_scores.png: the GLUE table with median (mean ± std) over
seeds, the wins over random init, the pre-training table) headed by what only this run has
(throughput, the plan, the schedule), and throughput.json.
"""
import json
import os

from reproduce import report
from reproduce.recipes import MODELS


def collect(run):
    """Every number of the run (a reproduce.gpu_budget.GpuRun) as one JSON-able dict, in the
    fields reproduce/report.py reads."""
    glue = {model: report.glue_entries(run.work.finetune_dir(model), run.tasks)
            for model in MODELS}
    trials = max([e["summary"][e["metric"]]["n"] for m in glue.values() for e in m.values()]
                 or [0])
    return {**run.results, "scale": run.recipe.name, "tasks": run.tasks, "models": list(MODELS),
            "num_trials": trials, "glue": glue,
            "pretraining": run.results.get("pretraining", {}),
            "pretraining_helps": report.pretraining_helps(glue), "glue_by_step": {},
            "elapsed_s": round(run.clock.elapsed(), 1)}


def head(data, recipe):
    """What results.md says before the GLUE table: device, budget and stages, RTD throughput,
    the plan and the schedules."""
    from reproduce.gpu_recipe import schedule_text
    lines = [f"# GPU run, recipe `{recipe.name}`", ""]
    tp = data.get("throughput")
    if tp:
        lines += [f"Device: {tp['device']} ({tp['platform']}), JAX {tp['jax']}; budget "
                  f"{data['budget_s']:.0f}s, elapsed {data['elapsed_s']:.0f}s; stages (s): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in data.get("stage_seconds", {}).items()),
                  "", f"RTD pre-training throughput, {tp['precision']}, batch {tp['batch']} x "
                  f"{tp['seq_len']}:", "",
                  "| model | step (ms) | sequences/s | MFU | compiled after (s) |",
                  "|---|---|---|---|---|"]
        for model, row in tp["models"].items():
            mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
            lines.append(f"| {report.MODEL_TITLES[model]} | {row['step_ms']:.2f} | "
                         f"{row['sequences_per_second']:,.0f} | {mfu} | "
                         f"{row['compiled_after_s']} |")
        lines.append("")
    plan = data.get("plan")
    if plan:
        lines += [f"Pre-training steps per model (chosen from the step times above): "
                  f"{plan['steps']}. Fine-tuning steps: "
                  + ("the official count" if plan["finetune_step_fraction"] >= 1.0 else
                     f"{plan['finetune_step_fraction']:.2f} of the official count on every "
                     "task (the budget's cap)") + ".", ""]
    lines += [schedule_text(recipe.lr_schedule()), ""]
    lines.append(f"Fine-tuning: official settings, SST-2 capped at {recipe.sst_epochs:g} "
                 f"epoch(s); seeds run in rounds while the budget lasts.")
    lines.append("")
    return "\n".join(lines)


def write(run):
    """The report files of `run` in its output folder (after every stage, so what a cut-off run
    reached still comes back)."""
    data = collect(run)
    report.write_outputs(data, run.out, head(data, run.recipe))
    if "throughput" in run.results:
        report.write_text(os.path.join(run.out, "throughput.json"),
                          json.dumps(run.results["throughput"], indent=2) + "\n")
    return data
