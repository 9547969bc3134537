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
    data = {**run.results, "scale": run.recipe.scale, "tasks": run.tasks, "models": list(MODELS),
            "num_trials": trials, "glue": glue,
            "pretraining": run.results.get("pretraining", {}),
            "pretraining_helps": report.pretraining_helps(glue), "glue_by_step": {},
            "convbert_vs_electra": report.compare_models(glue, "convbert", "electra"),
            "elapsed_s": round(run.clock.elapsed(), 1)}
    reached = [p["global_step"] for p in data["pretraining"].values() if p]
    if reached:
        # what the models reached (a stopped one reached fewer), not what the plan asked for
        steps = min(reached)
        tokens = steps * run.recipe.pretrain["train_batch_size"] * \
            run.recipe.pretrain["max_seq_length"]
        data["budget_used"] = {"steps": steps, "tokens": tokens,
                               "fraction_of_official": tokens / OFFICIAL_SMALL_TOKENS,
                               "steps_per_model": {m: p["global_step"]
                                                   for m, p in data["pretraining"].items() if p}}
    data["answers_nothing"] = shortfalls(data, run.recipe)
    return data


def shortfalls(data, recipe):
    """Why this run's numbers answer nothing, in words ([] when they may): a check of the path
    (a recipe other than the GPU run's), or a run below the recipe's stated minimum of
    pre-training steps, seeds or dev examples scored per task."""
    out = []
    if recipe.scale != "gpu_budget":
        out.append(f"recipe `{recipe.scale}` is a check of the path on a tiny model")
    need = dict(recipe.answers_from)
    steps = (data.get("budget_used") or {}).get("steps", 0)
    if steps < need.get("pretraining steps", 0):
        out.append(f"{steps:,} pre-training steps (fewer than {need['pretraining steps']:,})")
    if data.get("num_trials", 0) < need.get("seeds", 0):
        out.append(f"{data.get('num_trials', 0)} seed(s) per task (fewer than {need['seeds']})")
    dev = data.get("dev_examples") or {}
    small = [t for t, n in dev.items() if n < need.get("dev examples", 0)]
    if small:
        out.append(f"{', '.join(small)} scored on fewer than {need['dev examples']} dev "
                   "examples")
    return out


def answer(data):
    """results.md's opening: whether its numbers answer anything (the first line says so when
    they do not), the pre-training length beside the anchors, collapse stops, the dev examples
    scored, the cells not run."""
    nothing = data.get("answers_nothing")
    title = f"# What pre-training buys on GLUE: GPU run, recipe `{data['scale']}`"
    if nothing:
        title += " (its numbers answer nothing)"
    lines = [title, ""]
    if nothing:
        lines += ["**These numbers answer nothing**: " + "; ".join(nothing) + ".", ""]
    used = data.get("budget_used")
    if used:
        per_model = used.get("steps_per_model") or {}
        differ = len(set(per_model.values())) > 1
        lines += [f"**Pre-training**: {used['steps']:,} steps per model"
                  + (" (" + ", ".join(f"{report.MODEL_TITLES[m]} {s:,}"
                                      for m, s in per_model.items()) + ")" if differ else "")
                  + f" ({used['tokens']:,} tokens each: {100 * used['fraction_of_official']:.2f}% "
                  f"of ELECTRA-small's official budget, {OFFICIAL_SMALL_STEPS:,} steps x 128 x "
                  "128).", ""]
    calls = data.get("calls") or []
    for index, call in enumerate(calls):
        if call.get("stopped"):
            resumed = any(c["call"] == call["call"] for c in calls[index + 1:])
            lines += [f"**Call {call['call']} {call['stopped']}**; "
                      + ("a later run of the same call continued from the work folder." if resumed
                         else "a rerun of the same command continues from the work folder."), ""]
    compiled = [c for call in data.get("calls") or []
                for c in call.get("compiles_after_compile_stage") or []]
    if compiled:
        lines += [f"**{len(compiled)} program(s) compiled after the compile stage "
                  f"({sum(c['seconds'] for c in compiled):.1f}s of the budget): "
                  + ", ".join(sorted({c['program'] for c in compiled})) + ".**", ""]
    verdict = answer_line(data)
    if verdict:
        lines += [verdict, ""]
    for model, p in data.get("pretraining", {}).items():
        if p and p.get("collapsed"):
            lines += [f"**{report.MODEL_TITLES[model]}: pre-training stopped at step "
                      f"{p['global_step']:,}: {p['collapsed']}. Not fine-tuned.**", ""]
    dev = data.get("dev_examples")
    if dev:
        lines += ["GLUE dev examples scored per task: " + ", ".join(
            f"{t} {n:,}" + (f" of {data['dev_examples_full'][t]:,}"
                            if data.get("dev_examples_full", {}).get(t, n) != n else "")
            for t, n in dev.items()) + ".", ""]
    not_run = data.get("cells_not_run")
    if not_run:
        by_seed = {}
        for cell in not_run:
            by_seed.setdefault(cell["seed"], []).append(cell["task"])
        lines += ["Not run (the budget ended first; every model of a task or none): " + "; ".join(
            f"seed {seed}: {', '.join(tasks)}" for seed, tasks in sorted(by_seed.items()))
            + ".", ""]
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
    head = ("**Numbers** (not an answer: see above)" if data.get("answers_nothing")
            else "**Answer**")
    return (f"{head} ({data['num_trials']} seed(s) per task): "
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
    curves = {m: p["heldout"] for m, p in data.get("pretraining", {}).items()
              if p and p["heldout"]}
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
        calls = data.get("calls") or []
        lines += [f"Device: {tp['device']} ({tp['platform']}), JAX {tp['jax']}; "
                  + "; ".join(f"call {c['call']} ({c.get('started', '?')}): budget "
                              f"{c['budget_s']:.0f}s, elapsed {c['elapsed_s']:.0f}s, stages (s) "
                              + ", ".join(f"{k} {v:.0f}" for k, v in c["stage_seconds"].items())
                              + ("" if c.get("finished") else " (did not finish)")
                              for c in calls),
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
