"""The one-GPU run's recipes (reproduce/gpu_budget.py): what is pre-trained and fine-tuned, on which
learning-rate schedule, and the hyper-parameters each stage hands the training core.

* `GPU_BUDGET`: ConvBERT-small and ELECTRA-small (conv_type none, head_ratio 1) pre-trained with
  the paper's small settings (batch 128 x 128, generator 1/4 wide, temperature 1, disc weight 50,
  bf16) for the number of steps the plan affords (reproduce/gpu_plan.py), then fine-tuned with
  the official settings (lr 3e-4, layer-wise decay 0.8, batch 32, 3 epochs, RTE/STS-B 10), SST-2
  capped at one epoch;
* `SMOKE`: a 1-layer, 32-wide model, 4 pre-training steps and 3 fine-tuning steps per task on the
  same code path (the CPU check in CI).

The pre-training schedule is the first steps of ELECTRA-small's official one (peak 5e-4, linear
warm-up over 10,000 steps, linear decay over 1M): a short run climbs the official warm-up and never
reaches the peak. Squeezing a whole schedule into the run (10% warm-up) took the lr to 5e-4 within
180 steps, and both discriminators collapsed to the prior (docs/RESULTS.md §12-§13).
"""
import dataclasses
import hashlib
import json

from reproduce.recipes import ELECTRA_ARCHITECTURE

PRETRAINED = ("convbert", "electra")
# ELECTRA-small's official pre-training: 1M steps of 128 sequences of 128 tokens.
OFFICIAL_SMALL_STEPS = 1_000_000
OFFICIAL_SMALL_TOKENS = OFFICIAL_SMALL_STEPS * 128 * 128


@dataclasses.dataclass(frozen=True)
class GpuRecipe:
    name: str
    pretrain: dict              # PretrainingHParams overrides (both models)
    finetune: dict              # FinetuneHParams overrides (every model, task)
    warmup_fraction: float = 0.1   # of the run's steps, when schedule_steps is 0
    # > 0: the lr schedule is that of a schedule_steps run warmed up over warmup_steps, of which
    # the run trains its planned first steps (the official schedule's beginning)
    schedule_steps: int = 0
    warmup_steps: int = 0
    sst_epochs: float = 1.0
    max_trials: int = 3            # fine-tuning seeds per model x task
    heldout_examples: int = 256
    evaluations: int = 8           # held-out points over the run
    throughput_rounds: int = 3
    throughput_steps: int = 10
    steps_per_loop: int = 25
    fixed_steps: int = 0           # smoke: no planning, this many steps
    min_pretrain_share: float = 0.5   # of the seconds left after compiling (gpu_plan)
    max_eval_examples: int = 0     # smoke: first N dev examples

    def warmup(self, steps):
        """The warm-up of a run of `steps` steps."""
        return self.warmup_steps if self.schedule_steps else int(self.warmup_fraction
                                                                 * max(1, steps))

    def lr_schedule(self):
        """The pre-training learning-rate schedule, as the reports state it."""
        if self.schedule_steps:
            return {"peak_lr": self.pretrain["learning_rate"], "warmup_steps": self.warmup_steps,
                    "schedule_steps": self.schedule_steps}
        return {"peak_lr": self.pretrain["learning_rate"], "warmup_fraction": self.warmup_fraction}

    def fingerprint(self):
        """A short hash of every field: what a work folder was made for (gpu_work.py)."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def model_summary(self):
        """The encoder the recipe trains, in words ("small" or its overrides)."""
        arch = self.pretrain.get("model_hparam_overrides")
        size = self.pretrain["model_size"]
        if not arch:
            return size
        return f"{size} with {arch.get('num_hidden_layers', '?')} layer(s) of width " \
               f"{arch.get('hidden_size', '?')}"


def schedule_text(schedule):
    """One sentence of results.md for `GpuRecipe.lr_schedule()`."""
    if "schedule_steps" in schedule:
        return (f"Pre-training learning rate: the first steps of a {schedule['schedule_steps']:,}"
                f"-step schedule (peak {schedule['peak_lr']:g}, linear warm-up over "
                f"{schedule['warmup_steps']:,} steps, then linear decay to 0).")
    return (f"Pre-training learning rate: peak {schedule['peak_lr']:g}, warm-up over "
            f"{100 * schedule['warmup_fraction']:g}% of the run, linear decay to 0 at its last "
            "step.")


GPU_BUDGET = GpuRecipe(
    name="gpu_budget",
    pretrain=dict(model_size="small", train_batch_size=128, max_seq_length=128,
                  learning_rate=5e-4, generator_hidden_size=0.25, temperature=1.0,
                  disc_weight=50.0, precision="bf16", log_every_n_steps=100),
    schedule_steps=1_000_000, warmup_steps=10_000,       # ELECTRA-small's (official code)
    finetune=dict(model_size="small", learning_rate=3e-4, layerwise_lr_decay=0.8,
                  train_batch_size=32, eval_batch_size=128, max_seq_length=128, precision="bf16",
                  log_every_steps=250, steps_per_loop=25))

_SMOKE_MODEL = dict(hidden_size=32, embedding_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, num_groups=1)
SMOKE = dataclasses.replace(
    GPU_BUDGET, name="smoke",
    pretrain=dict(GPU_BUDGET.pretrain, model_hparam_overrides=_SMOKE_MODEL, train_batch_size=8,
                  precision="fp32", log_every_n_steps=2),
    finetune=dict(GPU_BUDGET.finetune, model_hparam_overrides=_SMOKE_MODEL, train_batch_size=8,
                  eval_batch_size=16, precision="fp32", max_train_steps=3, log_every_steps=3,
                  steps_per_loop=3),
    max_trials=2, heldout_examples=16, evaluations=2, throughput_rounds=2, throughput_steps=2,
    steps_per_loop=2, fixed_steps=4, max_eval_examples=32)


def pretrain_hparams(recipe, bundle, model, steps, seed=0):
    """The pre-training hparams of `model` ("convbert" or "electra") for a run of `steps`."""
    from pretrain.hparams import make_hparams
    overrides = dict(recipe.pretrain)
    arch = dict(overrides.pop("model_hparam_overrides", {}))
    if model == "electra":
        arch.update(ELECTRA_ARCHITECTURE)
    steps = max(1, steps)
    return make_hparams(overrides={
        **overrides, "model_hparam_overrides": arch, "model_name": model,
        "num_train_steps": steps, "num_warmup_steps": recipe.warmup(steps),
        "lr_schedule_steps": recipe.schedule_steps,
        "vocab_size": bundle["vocab_size"], "seed": seed,
        "max_seq_length": bundle["max_seq_length"],
        "steps_per_loop": recipe.steps_per_loop,
        "save_checkpoints_steps": max(1, steps // recipe.evaluations),
        "keep_checkpoint_max": 1,
        # ~20 points on the training curves whatever the run's length
        "log_every_n_steps": max(1, min(overrides.get("log_every_n_steps", 100), steps // 20))})


def finetune_hparams(recipe, task, seed=0, fraction=1.0, num_train_examples=None):
    """The fine-tuning hparams of `task` (seed: the pre-training seed; trials start at seed + 1);
    with `num_train_examples` and `fraction` < 1, its steps capped at that fraction of the
    official count."""
    from finetune.hparams import FinetuneHParams
    from finetune.trainer import num_train_steps
    values = dict(recipe.finetune)
    arch = values.pop("model_hparam_overrides", {})
    hp = FinetuneHParams(**values, model_hparam_overrides=dict(arch),
                         num_trials=recipe.max_trials, seed=seed + 1)
    if task == "sst":
        hp.num_train_epochs = recipe.sst_epochs
    hp = hp.for_task(task)
    if num_train_examples is not None and fraction < 1.0:
        full = num_train_steps(num_train_examples, hp.train_batch_size, hp.num_train_epochs,
                               hp.max_train_steps)
        hp.max_train_steps = max(1, int(full * fraction))
    return hp


def head_tasks(tasks):
    """One task per head shape among `tasks` (binary classification; STS-B regression): the
    fine-tuning programs to compile."""
    from finetune.glue.tasks import get_task
    shapes = {}
    for task in tasks:
        spec = get_task(task)
        shapes.setdefault((spec.num_labels, spec.is_regression), task)
    return list(shapes.values())
