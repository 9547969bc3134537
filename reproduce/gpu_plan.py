"""The one-GPU run's plan: how the seconds of one device call are spent.

The run is one command of at most `COMMAND_LIMIT_S` (9 minutes) on a GPU machine started cold.
Outside the run's own clock (`--budget_s`) that command also pays the machine's start-up and the
copy of the checkout and bundle, the wheels and imports, and the packing of the compile cache
(`OUTSIDE_BUDGET_S`); the default budget is what is left of the limit after those and a slack.
Inside it, the run first builds, compiles and times its programs (measured, not planned), then
decides, once, with `plan_budget` (reproduce/gpu_budget.py keeps the result in the work folder's
plan.json, so that a resumed run trains on the same schedule):

* fine-tuning first: ConvBERT, ELECTRA and random init on every task at the official length
  (SST-2 one epoch), as many seeds (at most `recipe.max_trials`) as leave pre-training
  `recipe.min_pretrain_share` of the time left; when not even one seed does, one seed with every
  run shortened by the same stated fraction;
* pre-training gets the rest: the held-out points (one evaluation of both models, timed) are
  paid first, the steps (the same number for both models) get the remainder at `LOOP_OVERHEAD`
  times the timed step, in hundreds, at least MIN_PRETRAIN_STEPS (fine-tuning is shortened to
  pay for those when they do not fit).

Seeds beyond the planned ones still run when the time left covers them (the estimates are
margins, not measurements of this core: reproduce/gpu_stages.Finetuning), and a trial whose
estimate exceeds the time left is not started.

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
# wall per step, held-out points included, over the timed step) for the next plan.
LOOP_OVERHEAD = 1.6
REPORT_RESERVE_S = 15.0        # kept for the reports at the end
MIN_PRETRAIN_STEPS = 100
MIN_FINETUNE_FRACTION = 0.05
# Per evaluation batch, a predict step costs about 4/3 of a training step (forward only, 4x the
# batch).
PREDICT_OVER_TRAIN_STEP = 4 / 3

COMMAND_LIMIT_S = 540          # one device call: 9 minutes (issue #49)
# Spent by the command outside the run's clock: the machine's start-up and the copy of the
# checkout + bundle (~30 s on each GPU run so far: docs/GPU.md), installing the bundle's wheels
# and importing JAX and Keras, packing the compile cache at the end (not timed on a GPU yet).
OUTSIDE_BUDGET_S = {"start-up and copy": 30.0, "wheels and imports": 15.0,
                    "packing the compile cache": 15.0}
SLACK_S = 10.0
DEFAULT_BUDGET_S = COMMAND_LIMIT_S - sum(OUTSIDE_BUDGET_S.values()) - SLACK_S


def finetune_trial_seconds(task_sizes, step_seconds, recipe, models):
    """{(model, task): estimated wall of one full-length fine-tuning trial}: {task: (training
    examples, dev examples)} (MRPC and STS-B training examples in both sentence orders, as the
    features hold them), `step_seconds` {model: seconds per fine-tuning step}: training steps
    and predict steps (PREDICT_OVER_TRAIN_STEP) at that rate, times LOOP_OVERHEAD."""
    from finetune.trainer import num_train_steps
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


def plan_budget(left_s, finetune_seed_s, pretrain_step_s, recipe, heldout_s=0.0):
    """How the seconds left after building, compiling and timing are spent (see the module
    docstring): {"steps" (pre-training steps per model), "seeds" (fine-tuning seeds planned),
    "finetune_step_fraction" (of each task's official step count, the same for every model and
    task), "pretrain_seconds", "finetune_seconds" (what each stage may take), "estimate" (what
    the planned stages take at the timed rates: {"pretrain_s", "finetune_s", "end_s" (seconds
    from now, reports included)})}."""
    if recipe.fixed_steps:
        return {"steps": recipe.fixed_steps, "seeds": recipe.max_trials,
                "finetune_step_fraction": 1.0, "pretrain_seconds": None,
                "finetune_seconds": None, "estimate": None}
    left = left_s - REPORT_RESERVE_S
    finetune_share = left * (1 - recipe.min_pretrain_share)
    seeds = min(recipe.max_trials, int(finetune_share // finetune_seed_s))
    if seeds >= 1:
        fraction = 1.0
        finetune_s = seeds * finetune_seed_s
    else:
        seeds = 1
        fraction = max(MIN_FINETUNE_FRACTION, finetune_share / finetune_seed_s)
        finetune_s = fraction * finetune_seed_s
    pretrain_s = left - finetune_s
    training_s = pretrain_s - heldout_s * (recipe.evaluations + 1)
    steps = max(MIN_PRETRAIN_STEPS,
                int(training_s / (LOOP_OVERHEAD * pretrain_step_s)) // 100 * 100)
    estimate_pretrain = pretrain_seconds(steps, pretrain_step_s, heldout_s, recipe)
    if estimate_pretrain > pretrain_s:
        # MIN_PRETRAIN_STEPS do not fit pre-training's share: fine-tuning pays for them
        pretrain_s = estimate_pretrain
        finetune_s = max(left - pretrain_s, MIN_FINETUNE_FRACTION * finetune_seed_s)
        seeds, fraction = 1, min(fraction, finetune_s / finetune_seed_s)
    return {"steps": steps, "seeds": seeds, "finetune_step_fraction": round(fraction, 4),
            "pretrain_seconds": round(pretrain_s, 1), "finetune_seconds": round(finetune_s, 1),
            "estimate": {"pretrain_s": round(estimate_pretrain, 1),
                         "finetune_s": round(finetune_s, 1),
                         "end_s": round(estimate_pretrain + finetune_s + REPORT_RESERVE_S, 1)}}
