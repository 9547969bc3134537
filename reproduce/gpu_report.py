"""The one-GPU run's report in its output folder: reproduce/report.py's files (results.json,
results.md, pretraining_curves.png, glue_scores.png) and throughput.json.

results.md leads with the answer: how long both models were pre-trained (steps, tokens, the
fraction of ELECTRA-small's official budget) beside the published anchors, any model whose
pre-training was stopped by the collapse check, then reproduce/report.py's GLUE table (median
(mean ± std) over seeds, the average, the wins over random init beyond the seed spread) and its
pre-training table, ConvBERT against ELECTRA, the held-out curves; then how the run went
(device, stages, RTD throughput, the plan, the schedule).
"""
import json
import os

from reproduce import report
from reproduce.gpu_recipe import OFFICIAL_SMALL_STEPS, OFFICIAL_SMALL_TOKENS
from reproduce.recipes import MODELS

# Published GLUE dev scores of ELECTRA-Small (Clark et al. 2020): fully trained, and after 6.25%
# of its training. Each averages GLUE's dev tasks (MNLI, QQP and QNLI among them), not the five
# tasks of this run: a scale, not a comparison.
ANCHORS = (("ELECTRA-Small, fully trained (1M steps)", 79.9),
           ("ELECTRA-Small at 6.25% of its training", 74.1))


def collect(run):
    """Every number of the run (a reproduce.gpu_budget.GpuRun) as one JSON-able dict, in the
    fields reproduce/report.py reads."""
    glue = {model: report.glue_entries(run.work.finetune_dir(model), run.tasks)
            for model in MODELS}
    trials = max([e["summary"][e["metric"]]["n"] for m in glue.values() for e in m.values()]
                 or [0])
    data = {**run.results, "scale": run.recipe.name, "tasks": run.tasks, "models": list(MODELS),
            "num_trials": trials, "glue": glue,
            "pretraining": run.results.get("pretraining", {}),
            "pretraining_helps": report.pretraining_helps(glue), "glue_by_step": {},
            "convbert_vs_electra": report.compare_models(glue, "convbert", "electra"),
            "elapsed_s": round(run.clock.elapsed(), 1)}
    steps = (data.get("plan") or {}).get("steps")
    if steps:
        tokens = steps * run.recipe.pretrain["train_batch_size"] * \
            run.recipe.pretrain["max_seq_length"]
        data["budget_used"] = {"steps": steps, "tokens": tokens,
                               "fraction_of_official": tokens / OFFICIAL_SMALL_TOKENS}
    return data


def answer(data):
    """results.md's opening: the pre-training length beside the anchors, collapse stops."""
    lines = [f"# What pre-training buys on GLUE: GPU run, recipe `{data['scale']}`", ""]
    used = data.get("budget_used")
    if used:
        lines += [f"**Pre-training**: {used['steps']:,} steps per model "
                  f"({used['tokens']:,} tokens each: {100 * used['fraction_of_official']:.2f}% of "
                  f"ELECTRA-small's official budget, {OFFICIAL_SMALL_STEPS:,} steps x 128 x "
                  "128).", ""]
    verdict = answer_line(data)
    if verdict:
        lines += [verdict, ""]
    for model, p in data.get("pretraining", {}).items():
        if p.get("collapsed"):
            lines += [f"**{report.MODEL_TITLES[model]}: pre-training stopped at step "
                      f"{p['global_step']:,}: {p['collapsed']}. Not fine-tuned.**", ""]
    lines += ["Published anchors, GLUE dev (Clark et al. 2020; each an average over GLUE's dev "
              "tasks, MNLI, QQP and QNLI among them, not these five: a scale, not a "
              "comparison): " + "; ".join(f"{name} {score}" for name, score in ANCHORS) + ".",
              ""]
    return "\n".join(lines) + "\n"


def answer_line(data):
    """One sentence: on how many tasks each pre-trained model beats random init beyond the seed
    spread, and every model's GLUE average (of the medians; "–" until every task has one)."""
    helps, glue = data.get("pretraining_helps") or {}, data.get("glue") or {}
    if not any(glue.values()):
        return None
    wins = [f"{report.MODEL_TITLES[m]} on {sum(v.values())} of {len(v)} tasks"
            for m, v in helps.items() if v]
    averages = [f"{report.MODEL_TITLES[m]} {report.score_cells(glue[m], data['tasks'])[-1]}"
                for m in data["models"] if glue.get(m)]
    if data["num_trials"] < 2:
        wins = []           # no spread to beat: report.pretraining_helps would count any margin
    return (f"**Answer** ({data['num_trials']} seed(s) per task): "
            + ("pre-training beats random init beyond the seed spread: " + "; ".join(wins)
               + ". " if wins else "")
            + "GLUE average of the medians: " + ", ".join(averages) + ".")


def details(data, recipe):
    """What results.md says after the GLUE and pre-training tables: ConvBERT against ELECTRA,
    the held-out curves, then how the run went (device, stages, throughput, plan, schedule)."""
    from reproduce.gpu_recipe import schedule_text
    lines = [""]
    versus = data.get("convbert_vs_electra")
    if versus:
        lines += ["ConvBERT against ELECTRA (mean difference per task; beyond the seed spread when "
                  "it exceeds the larger std): " + ", ".join(
                      f"{t} {d['difference']:+.1f}{' (beyond)' if d['beyond_spread'] else ''}"
                      for t, d in versus.items()) + ".", ""]
    curves = {m: p["heldout"] for m, p in data.get("pretraining", {}).items() if p["heldout"]}
    if curves:
        steps = (data.get("plan") or {}).get("steps")
        points = sorted({h["step"] for c in curves.values() for h in c})
        lines += ["Held-out batch (generator accuracy / discriminator AUC):", "",
                  "| step | learning rate | " + " | ".join(report.MODEL_TITLES[m] for m in curves)
                  + " |", "|---|---|" + "---|" * len(curves)]
        for step in points:
            cells = []
            for c in curves.values():
                h = next((h for h in c if h["step"] == step), None)
                cells.append("–" if h is None else
                             f"{h['gen_accuracy']:.3f} / {h['disc_auc']:.3f}")
            lr = f"{recipe.lr_at(step - 1, steps):.2g}" if steps else "–"
            lines.append(f"| {step:,} | {lr} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## How the run went", ""]
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
        lines += [f"Plan: {plan['steps']:,} pre-training steps per model (chosen from the step "
                  f"times above); fine-tuning {plan.get('seeds', 1)} seed(s) planned at "
                  + ("the official length" if plan["finetune_step_fraction"] >= 1.0 else
                     f"{plan['finetune_step_fraction']:.2f} of the official steps on every task "
                     "(the budget's cap)") + ", more while the budget lasts.", ""]
        lines += [schedule_text(recipe.lr_schedule(plan["steps"]), plan["steps"]), ""]
    ratios = {m: r for m, r in (data.get("pretraining_loop_over_timed") or {}).items() if r}
    if ratios:
        lines += ["Pre-training stage wall per step over the RTD step timed alone (held-out "
                  "points and checkpoints included; the plan allowed "
                  f"{(plan or {}).get('loop_overhead', '?')}x plus the held-out points): "
                  + ", ".join(f"{report.MODEL_TITLES[m]} {r:.2f}" for m, r in ratios.items())
                  + ".", ""]
    lines.append(f"Fine-tuning: official settings, SST-2 capped at {recipe.sst_epochs:g} "
                 f"epoch(s); seeds run in rounds while the budget lasts.")
    return "\n".join(lines) + "\n"


def write(run):
    """The report files of `run` in its output folder (after every stage, so what a cut-off run
    reached still comes back)."""
    data = collect(run)
    report.write_outputs(data, run.out, answer(data), details(data, run.recipe))
    if "throughput" in run.results:
        report.write_text(os.path.join(run.out, "throughput.json"),
                          json.dumps(run.results["throughput"], indent=2) + "\n")
    return data
