"""The one-GPU run's plan: how the seconds left after building, compiling and timing are spent
(reproduce/gpu_budget.py decides it once, after its throughput stage, and keeps it in the work
folder's plan.json so that a resumed run trains on the same schedule).

Inputs are times the run measured: the RTD step of each pre-trained model and the fine-tuning
step of each encoder, timed in the throughput stage on the compiled programs that train, and one
held-out evaluation of both models. The plan turns them into estimates with the margins below
and returns the number of pre-training steps (the same for both models) and the fraction of the
official fine-tuning steps that every run gets.
"""

# What the training loop takes per step over the step timed alone, for the plan: the H100 run of
# docs/RESULTS.md §12 measured 1.3-1.7x in pre-training (windows without held-out scoring) and
# 1.4-1.6x in fine-tuning (host batches, the loop's bookkeeping; the steps there were
# host-bound), where the plan had assumed 1.1 and 1.2: that run was still fine-tuning at 1.2x
# its budget when its command was stopped.
LOOP_OVERHEAD = 1.6
REPORT_RESERVE_S = 15.0        # kept for the reports at the end
MIN_PRETRAIN_STEPS = 100
MIN_FINETUNE_FRACTION = 0.05


def finetune_seed_seconds(task_sizes, step_seconds, recipe, models):
    """Estimated wall of one seed of every model x task: {task: (training examples, dev
    examples)} (MRPC and STS-B training examples in both sentence orders, as the features hold
    them), `step_seconds` {model: seconds per fine-tuning step}: training steps at that rate,
    prediction at about 4/3 of a training step per evaluation batch (forward only, 4x batch),
    times LOOP_OVERHEAD for the host loop."""
    from finetune.trainer import num_train_steps
    from reproduce.gpu_recipe import finetune_hparams
    total = 0.0
    for task, (num_train, num_dev) in task_sizes.items():
        hp = finetune_hparams(recipe, task)
        steps = num_train_steps(num_train, hp.train_batch_size, hp.num_train_epochs,
                                hp.max_train_steps)
        predict_batches = -(-num_dev // hp.eval_batch_size)
        for model in models:
            total += (steps + predict_batches * 4 / 3) * step_seconds[model]
    return LOOP_OVERHEAD * total


def plan_budget(left_s, finetune_round_s, pretrain_step_s, recipe, heldout_s=0.0):
    """How the seconds left after building and compiling are spent: {"steps" (pre-training
    steps per model), "finetune_step_fraction" (of each task's official step count, the same
    for every model and task), "pretrain_seconds"}.

    REPORT_RESERVE_S are kept for reports. One fine-tuning seed of every model x task runs at
    full length when it leaves pre-training at least `recipe.min_pretrain_share` of the rest;
    otherwise pre-training gets that share and every fine-tuning run is shortened by the same
    fraction (a comparison of encoders after 100 steps of pre-training, which the first GPU run
    showed collapse to the prior, says nothing). Of the pre-training seconds, the held-out
    scoring (`heldout_s`: one evaluation of both models, timed) is paid `recipe.evaluations` + 1
    times (the points and the final re-scoring); the steps get the rest at `LOOP_OVERHEAD` times
    the timed step (`pretrain_step_s`: both models' steps together)."""
    if recipe.fixed_steps:
        return {"steps": recipe.fixed_steps, "finetune_step_fraction": 1.0,
                "pretrain_seconds": None}
    left = left_s - REPORT_RESERVE_S
    if finetune_round_s <= left * (1 - recipe.min_pretrain_share):
        fraction, pretrain_s = 1.0, left - finetune_round_s
    else:
        pretrain_s = left * recipe.min_pretrain_share
        fraction = max(MIN_FINETUNE_FRACTION, (left - pretrain_s) / finetune_round_s)
    training_s = pretrain_s - heldout_s * (recipe.evaluations + 1)
    steps = max(MIN_PRETRAIN_STEPS,
                int(training_s / (LOOP_OVERHEAD * pretrain_step_s)) // 100 * 100)
    return {"steps": steps, "finetune_step_fraction": round(fraction, 4),
            "pretrain_seconds": round(pretrain_s, 1)}
