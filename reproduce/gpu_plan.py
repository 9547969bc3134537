"""The one-GPU run's plan: how the seconds of a session's device window are spent.

A session has `WINDOW_S` (15 minutes) of device time, machine start-up included, and the machine
stays warm `WARM_S` after a call, with its files: the run is two calls on one machine. Call 1
(at most `COMMAND_LIMIT_S`, 9.5 minutes, from a cold start) builds, compiles and times every
program, plans, pre-trains both models and fine-tunes seed 1 of every model x task; call 2
(the same command with `--call=2`, started within `WARM_S`, at most `SECOND_COMMAND_LIMIT_S`)
resumes on the same work folder: its compile stage reads the compile cache call 1 left, and it
fine-tunes the seeds left. Each call's outputs are complete on their own (call 1's answer has
one seed; call 2's, every seed). Outside the run's own clock (`--budget_s`) each command pays
the copy of the checkout and bundle (call 1: the machine's start-up too), the wheels and
imports, and the packing of the compile cache (`OUTSIDE_BUDGET_S`, `SECOND_OUTSIDE_S`); the
default budgets are what is left of each limit after those and a slack.

Inside call 1 the run first builds, compiles and times its programs (measured, not planned),
then decides, once, with `plan_budget` (reproduce/gpu_budget.py keeps the result in the work
folder's plan.json, so that call 2 and any rerun train on the same schedule):

* fine-tuning first: ConvBERT, ELECTRA and random init on every task at the official length
  (SST-2 one epoch). With a second call (`second_call_s`: the fine-tuning seconds call 2
  affords): seed 1 in call 1, seeds 2 .. `recipe.num_trials` in call 2, every run shortened by
  one stated fraction where a seed does not fit call 2's share or `1 - recipe.min_pretrain_share`
  of call 1's. Without: as many seeds (at most `recipe.num_trials`) as leave pre-training
  `recipe.min_pretrain_share` of the time left, or one seed shortened to fit;
* pre-training gets the rest of call 1: the held-out points (one evaluation of both models,
  timed) are paid first, the steps (the same number for both models) get the remainder at
  `LOOP_OVERHEAD` times the timed step, in hundreds, at least `recipe.min_pretrain_steps`
  (fine-tuning is shortened to pay for those when they do not fit).

Seeds beyond the planned ones still run when the time left covers them (the estimates are
margins, not measurements of this core: reproduce/gpu_stages.Finetuning), and fine-tuning runs
task by task with every model on a task before the next task, so a cut removes whole tasks of a
seed, never one model's cell.

Inputs are times the run measured in its throughput stage on the compiled programs that train:
the RTD step of each pre-trained model, the fine-tuning step of each encoder and one held-out
evaluation. `estimate` says how long the planned run takes; tests/test_gpu_run.py checks it
against the figures recorded on the GPU machines (docs/RESULTS.md §11-§13, docs/PERFORMANCE.md
P4) and against the P4 target rates.
"""

# What the training loop takes per step over the step timed alone, for the plan: the H100 run of
# docs/RESULTS.md §12 measured 1.3-1.7x in pre-training (windows without held-out scoring) and
# 1.4-1.6x in fine-tuning (host batches, the loop's bookkeeping; the steps there were
# host-bound), where the plan had assumed 1.1 and 1.2: that run was still fine-tuning at 1.2x
# its budget when its command was stopped. Measured on the one-step-per-call core; the run
# records what it meets (results.json "pretraining_loop_over_timed": the pre-training stage's
# wall per step, held-out points included and compiles left out, over the timed step) for the
# next plan.
LOOP_OVERHEAD = 1.6
REPORT_RESERVE_S = 15.0        # kept for the reports at the end
MIN_FINETUNE_FRACTION = 0.05
# Per evaluation batch, a predict step costs about 4/3 of a training step (forward only, 4x the
# batch).
PREDICT_OVER_TRAIN_STEP = 4 / 3

WINDOW_S = 900                 # a session's device time, start-ups and idle waits included
WARM_S = 30                    # a machine stays warm this long after a call
COMMAND_LIMIT_S = 570          # call 1: 9.5 minutes
# Spent by call 1 outside the run's clock: the machine's start-up and the copy of the checkout +
# bundle (~30 s on each GPU run so far: docs/GPU.md), installing the bundle's wheels and
# importing JAX and Keras, packing the compile cache at the end (not timed on a GPU yet).
OUTSIDE_BUDGET_S = {"start-up and copy": 30.0, "wheels and imports": 15.0,
                    "packing the compile cache": 15.0}
SLACK_S = 10.0
DEFAULT_BUDGET_S = COMMAND_LIMIT_S - sum(OUTSIDE_BUDGET_S.values()) - SLACK_S
# Call 2 on the warm machine: what the window leaves after call 1's start-up and limit, the wait
# between the calls and the idle wait after call 2 (both at most WARM_S).
SECOND_COMMAND_LIMIT_S = int(WINDOW_S - OUTSIDE_BUDGET_S["start-up and copy"] - COMMAND_LIMIT_S
                             - 2 * WARM_S)
SECOND_OUTSIDE_S = {"copy": 5.0, "wheels and imports": 15.0, "packing the compile cache": 15.0}
SECOND_BUDGET_S = SECOND_COMMAND_LIMIT_S - sum(SECOND_OUTSIDE_S.values()) - SLACK_S


def second_call_seconds(build_s, compile_s):
    """The fine-tuning seconds call 2 affords: its budget less its own build (as call 1's), its
    compile stage (reads of call 1's compile cache: a quarter of call 1's compile, an allowance
    until a GPU measures it) and the reports."""
    return max(0.0, SECOND_BUDGET_S - build_s - 0.25 * compile_s - REPORT_RESERVE_S)


def finetune_trial_seconds(task_sizes, step_seconds, recipe, models):
    """{(model, task): estimated wall of one full-length fine-tuning trial}: {task: (training
    examples, dev examples)} (MRPC and STS-B training examples in both sentence orders, as the
    features hold them), `step_seconds` {model: seconds per fine-tuning step}: training steps
    and predict steps (PREDICT_OVER_TRAIN_STEP) at that rate, times LOOP_OVERHEAD."""
    from finetune.finetuner import num_train_steps
    from reproduce.gpu_recipe import finetune_hparams
    out = {}
    for task, (num_train, num_dev) in task_sizes.items():
        hp = finetune_hparams(recipe, task)
        steps = num_train_steps(num_train, hp.train_batch_size, hp.num_train_epochs,
                                hp.max_train_steps)
        predict_batches = -(-num_dev // hp.eval_batch_size)
        for model in models:
            out[model, task] = LOOP_OVERHEAD * step_seconds[model] * (
                steps + predict_batches * PREDICT_OVER_TRAIN_STEP)
    return out


def finetune_seed_seconds(task_sizes, step_seconds, recipe, models):
    """Estimated wall of one full-length seed of every model x task (finetune_trial_seconds)."""
    return sum(finetune_trial_seconds(task_sizes, step_seconds, recipe, models).values())


def pretrain_seconds(steps, pretrain_step_s, heldout_s, recipe):
    """Estimated wall of pre-training both models for `steps`: the steps at LOOP_OVERHEAD times
    the timed steps (`pretrain_step_s`: both models' together), plus `recipe.evaluations` + 1
    held-out evaluations (the points and the final re-scoring; `heldout_s`: one of both)."""
    return steps * LOOP_OVERHEAD * pretrain_step_s + heldout_s * (recipe.evaluations + 1)


def plan_budget(left_s, finetune_seed_s, pretrain_step_s, recipe, heldout_s=0.0,
                second_call_s=0.0):
    """How the seconds left after building, compiling and timing are spent (see the module
    docstring); `second_call_s`: the fine-tuning seconds a second call affords (0: one call).
    {"steps" (pre-training steps per model), "seeds" (fine-tuning seeds planned, over both
    calls), "finetune_step_fraction" (of each task's official step count, the same for every
    model and task), "pretrain_seconds", "finetune_seconds" (what each stage may take in this
    call), "calls" ({call: what it runs}), "estimate" (what this call's planned stages take at
    the timed rates: {"pretrain_s", "finetune_s", "end_s" (seconds from now, reports
    included)})}."""
    if recipe.fixed_steps:
        return {"steps": recipe.fixed_steps, "seeds": recipe.num_trials,
                "finetune_step_fraction": 1.0, "pretrain_seconds": None,
                "finetune_seconds": None, "estimate": None,
                "calls": {"1": {"pretraining_steps": recipe.fixed_steps,
                                "seeds": list(range(1, recipe.num_trials + 1))}}}
    left = left_s - REPORT_RESERVE_S
    finetune_share = left * (1 - recipe.min_pretrain_share)
    two_calls = second_call_s > 0 and recipe.num_trials > 1
    if two_calls:
        # seed 1 here, the others in call 2: the shortest of the fractions each call affords
        seeds = recipe.num_trials
        fraction = max(MIN_FINETUNE_FRACTION, min(
            1.0, finetune_share / finetune_seed_s,
            second_call_s / ((recipe.num_trials - 1) * finetune_seed_s)))
        finetune_s = fraction * finetune_seed_s
    else:
        seeds = min(recipe.num_trials, int(finetune_share // finetune_seed_s))
        if seeds >= 1:
            fraction = 1.0
            finetune_s = seeds * finetune_seed_s
        else:
            seeds = 1
            fraction = max(MIN_FINETUNE_FRACTION, finetune_share / finetune_seed_s)
            finetune_s = fraction * finetune_seed_s
    pretrain_s = left - finetune_s
    training_s = pretrain_s - heldout_s * (recipe.evaluations + 1)
    steps = max(recipe.min_pretrain_steps,
                int(training_s / (LOOP_OVERHEAD * pretrain_step_s)) // 100 * 100)
    if recipe.max_pretrain_steps:
        steps = min(steps, recipe.max_pretrain_steps)
    estimate_pretrain = pretrain_seconds(steps, pretrain_step_s, heldout_s, recipe)
    if estimate_pretrain > pretrain_s:
        # the fewest pre-training steps do not fit pre-training's share: fine-tuning pays
        pretrain_s = estimate_pretrain
        finetune_s = max(left - pretrain_s, MIN_FINETUNE_FRACTION * finetune_seed_s)
        fraction = min(fraction, finetune_s / finetune_seed_s)
        if not two_calls:
            seeds = 1
    here = [1] if two_calls else list(range(1, seeds + 1))
    calls = {"1": {"pretraining_steps": steps, "seeds": here}}
    if two_calls:
        calls["2"] = {"seeds": list(range(2, seeds + 1)),
                      "finetune_s": round(fraction * finetune_seed_s * (seeds - 1), 1),
                      "affords_s": round(second_call_s, 1)}
    return {"steps": steps, "seeds": seeds, "finetune_step_fraction": round(fraction, 4),
            "pretrain_seconds": round(pretrain_s, 1), "finetune_seconds": round(finetune_s, 1),
            "calls": calls,
            "estimate": {"pretrain_s": round(estimate_pretrain, 1),
                         "finetune_s": round(finetune_s, 1),
                         "end_s": round(estimate_pretrain + finetune_s + REPORT_RESERVE_S, 1)}}
