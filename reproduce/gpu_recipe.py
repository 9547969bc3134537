"""The one-GPU run's recipes (reproduce/gpu_budget.py): what is pre-trained and fine-tuned, on which
learning-rate schedule, and the hyper-parameters each stage hands the training core.

* `GPU_BUDGET`: ConvBERT-small and ELECTRA-small (conv_type none, head_ratio 1) pre-trained with
  the paper's small settings (batch 128 x 128, generator 1/4 wide, temperature 1, disc weight 50,
  bf16) for the number of steps the plan affords (reproduce/gpu_plan.py), then fine-tuned with
  the official settings (lr 3e-4, layer-wise decay 0.8, batch 32, 3 epochs, RTE/STS-B 10), SST-2
  capped at one epoch;
* `REHEARSAL`: the GPU call's own path and structure (the plan from timed steps, 25-step blocks,
  eight held-out points, three seeds over two calls, task-major fine-tuning, the collapse stop)
  on a 1-layer, 32-wide model in fp32 with a 10-step warm-up, fine-tuning capped at 30 steps and
  32 dev examples a task: the CPU rehearsal in CI (`bash scripts/gpu_run.sh --rehearse`);
* `SMOKE`: the same tiny model, 4 pre-training steps and 3 fine-tuning steps per task, for the
  CPU checks of the side scripts (reproduce/gpu_random_finetune.py, gpu_rtd_probe.py).

The pre-training schedule is made for the budget: ELECTRA-small's official schedule (linear
warm-up over 10,000 steps towards 5e-4, times a linear decay to 0 at step 1,000,000:
training/optimization.py `LinearWarmupLinearDecay`), followed for the first (1 -
`cooldown_fraction`) of the run, then a linear cool-down to 0 at the planned last step over its
last `cooldown_fraction` (the "warm-up, stable, decay" form of budget-limited recipes). At every
step the rate is at or below the official schedule's, the one ramp the GPU probes found safe
(docs/RESULTS.md §13.1: 5e-4 reached within 180 steps collapsed both discriminators; a ramp 10x
faster than the official one learned, then lost AUC once the lr passed ~7e-5; §13.2: the official
ramp learned), and it reaches as high as that allows in the planned length: a run of N steps
shorter than the warm-up peaks where its cool-down starts, at 5e-4 x 0.8 N / 10,000 x (1 - 0.8 N /
1,000,000) (6,500 steps: 2.59e-4 at step 5,201; the earlier form, a decay from step 0 to the
planned end, peaked at 8.1e-5). `reproduce/gpu_rtd_probe.py` compares schedules at the planned
length on a GPU (docs/GPU.md): another one has to earn its place there.

A model whose held-out discriminator AUC falls to the prior stops pre-training and is not
fine-tuned (`collapse_margin`, reproduce/gpu_stages.collapse).
"""
import dataclasses
import hashlib
import json
from typing import Optional

from reproduce.recipes import Recipe

# ELECTRA-small's official pre-training: 1M steps of 128 sequences of 128 tokens.
OFFICIAL_SMALL_STEPS = 1_000_000
OFFICIAL_SMALL_TOKENS = OFFICIAL_SMALL_STEPS * 128 * 128


@dataclasses.dataclass(frozen=True)
class GpuRecipe(Recipe):
    """A reproduction recipe (reproduce/recipes.py `Recipe`: the models, the encoder, the
    pre-training and fine-tuning settings, the seeds) and how the GPU call fits it in its
    window: the schedule made for the planned length, the plan's bounds, the timed blocks."""
    # The pre-training schedule: linear warm-up over warmup_steps (0: warmup_fraction of the
    # run) times a linear decay to 0 at step schedule_steps (0: the run's planned last step),
    # times a linear cool-down to 0 at the planned last step over its last cooldown_fraction.
    warmup_steps: int = 10_000
    warmup_fraction: float = 0.1
    schedule_steps: int = 1_000_000
    cooldown_fraction: float = 0.2
    sst_epochs: float = 1.0
    evaluations: int = 8           # held-out points over the run
    throughput_rounds: int = 3
    throughput_steps: int = 10
    steps_per_loop: int = 25
    fixed_steps: int = 0           # smoke: no planning, this many steps
    min_pretrain_steps: int = 100  # the plan never gives pre-training fewer (gpu_plan)
    max_pretrain_steps: int = 0    # ... nor more (0: no cap; the rehearsal's CPU time)
    min_pretrain_share: float = 0.5   # of the seconds left after compiling (gpu_plan)
    max_eval_examples: int = 0     # smoke, rehearsal: first N dev examples
    # What a run must reach before its results.md may read as an answer (gpu_report): below
    # these, its first line says its numbers answer nothing.
    answers_from: tuple = (("pretraining steps", 1000), ("seeds", 3), ("dev examples", 250))
    # Collapse stop (reproduce/gpu_stages.collapse): a held-out point whose discriminator AUC is
    # at most 0.5 + collapse_margin after an earlier point reached learned_auc, or at or past
    # the run's middle, stops that model's pre-training. None: no check.
    collapse_margin: Optional[float] = 0.02
    learned_auc: float = 0.6

    def warmup(self, steps):
        """The warm-up of a run of `steps` steps."""
        return self.warmup_steps or int(self.warmup_fraction * max(1, steps))

    def schedule_length(self, steps):
        """The step at which the schedule's decay reaches 0 in a run of `steps` steps."""
        return self.schedule_steps or max(1, steps)

    def cooldown(self, steps):
        """The steps of the cool-down that ends a run of `steps` steps (0: none)."""
        return int(round(self.cooldown_fraction * max(1, steps))) if self.cooldown_fraction \
            else 0

    def lr_at(self, step, steps):
        """The learning rate of update `step` (0-based) in a run of `steps` steps: what
        training/optimization.py `LinearWarmupLinearDecay` computes for pretrain_hparams'
        settings (a test checks them against each other at every step)."""
        warmup, total, cool = self.warmup(steps), self.schedule_length(steps), \
            self.cooldown(steps)
        ramp = min(1.0, step / warmup) if warmup else 1.0
        fall = min(1.0, max(0.0, (steps - step) / cool)) if cool else 1.0
        return self.pretrain["learning_rate"] * ramp * max(0.0, 1 - step / total) * fall

    def lr_schedule(self, steps):
        """The pre-training learning-rate schedule of a run of `steps` steps, as the reports
        state it: {"peak_lr", "warmup_steps", "schedule_steps" (where the decay reaches 0),
        "cooldown_steps", "highest_lr" (what the run reaches), "highest_at" (the step, counted
        from 1, whose update uses it: the held-out table's convention)}."""
        steps = max(1, int(steps))
        rates = [self.lr_at(s, steps) for s in range(steps)]
        at = max(range(steps), key=rates.__getitem__)
        return {"peak_lr": self.pretrain["learning_rate"], "warmup_steps": self.warmup(steps),
                "schedule_steps": self.schedule_length(steps),
                "cooldown_steps": self.cooldown(steps),
                "highest_lr": float(f"{rates[at]:.3g}"), "highest_at": at + 1}

    def fingerprint(self):
        """A short hash of every field: what a work folder was made for (gpu_work.py)."""
        text = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def model_summary(self):
        """The encoder the recipe trains, in words ("small" or its overrides)."""
        arch = self.model_overrides
        if not arch:
            return self.model_size
        return f"{self.model_size} with {arch.get('num_hidden_layers', '?')} layer(s) of width " \
               f"{arch.get('hidden_size', '?')}"


def schedule_text(schedule, steps):
    """One sentence of results.md for `GpuRecipe.lr_schedule(steps)`."""
    if schedule["schedule_steps"] == steps:
        end = f"reaching 0 at the run's last step ({steps:,})"
    else:
        end = f"reaching 0 at step {schedule['schedule_steps']:,}"
    cool = (f", then a linear cool-down to 0 over the run's last {schedule['cooldown_steps']:,} "
            f"steps (it trains {steps:,})" if schedule.get("cooldown_steps") else
            ("" if schedule["schedule_steps"] == steps else f" (the run trains its first "
                                                            f"{steps:,} steps)"))
    return (f"Pre-training learning rate: linear warm-up over {schedule['warmup_steps']:,} steps "
            f"towards {schedule['peak_lr']:g}, times a linear decay {end}{cool}; the highest "
            f"rate reached is {schedule['highest_lr']:.3g}, at step {schedule['highest_at']:,}.")


GPU_BUDGET = GpuRecipe(
    scale="gpu_budget", model_size="small", model_overrides={},
    pretrain=dict(train_batch_size=128, max_seq_length=128, learning_rate=5e-4,
                  generator_hidden_size=0.25, temperature=1.0, disc_weight=50.0,
                  precision="bf16", log_every_n_steps=100),
    finetune=dict(learning_rate=3e-4, layerwise_lr_decay=0.8, train_batch_size=32,
                  eval_batch_size=128, max_seq_length=128, precision="bf16",
                  log_every_steps=250, steps_per_loop=25),
    num_trials=3)

_SMOKE_MODEL = dict(hidden_size=32, embedding_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, num_groups=1)
SMOKE = dataclasses.replace(
    GPU_BUDGET, scale="smoke", model_overrides=_SMOKE_MODEL,
    pretrain=dict(GPU_BUDGET.pretrain, train_batch_size=8, precision="fp32", log_every_n_steps=2),
    finetune=dict(GPU_BUDGET.finetune, train_batch_size=8, eval_batch_size=16, precision="fp32",
                  max_train_steps=3, log_every_steps=3, steps_per_loop=3),
    num_trials=2, heldout_examples=16, evaluations=2, throughput_rounds=2, throughput_steps=2,
    steps_per_loop=2, fixed_steps=4, max_eval_examples=32,
    collapse_margin=None)     # 4 steps on 16 held-out sequences: an AUC near 0.5 says nothing
# The GPU call's structure at a size the CPU affords: the plan from timed steps, 25-step blocks,
# 8 held-out points, 3 seeds over two calls, task-major fine-tuning, the collapse stop, the
# official schedule's form. Smaller: the model, the batch (pre-training 4: on the CPU its step is
# mostly the Gumbel noise over the 30,522-word vocabulary at every masked position, ~60 ms of
# the 82-ms step at batch 8, so the batch sets its time; the rehearsal's test 168.6 / 159.1 s at
# 8 -> 155.0 / 140.1 s at 4, interleaved, 2026-11-29), fine-tuning (30 steps a trial, 32 dev
# examples), 50 pre-training steps (two blocks, two held-out points), one throughput round, fp32 (XLA's CPU bf16 code compiles and runs ~2x slower: the
# precision changes the programs' numbers, not their structure) and a 10-step warm-up, so that
# the tiny model learns something in its 50 steps and the collapse stop has a real curve to
# judge, not the prior.
REHEARSAL = dataclasses.replace(
    GPU_BUDGET, scale="rehearsal", model_overrides=_SMOKE_MODEL,
    pretrain=dict(GPU_BUDGET.pretrain, train_batch_size=4, precision="fp32"),
    finetune=dict(GPU_BUDGET.finetune, train_batch_size=8, eval_batch_size=16, max_train_steps=30,
                  precision="fp32"),
    warmup_steps=10, heldout_examples=32, throughput_rounds=1, max_eval_examples=32,
    min_pretrain_steps=50, max_pretrain_steps=50)


def pretrain_hparams(recipe, bundle, model, steps, seed=0):
    """The pre-training hparams of `model` ("convbert" or "electra") for a run of `steps`."""
    from pretrain.hparams import make_hparams
    overrides = recipe.pretrain_hparams(model)      # the encoder: ConvBERT's or ELECTRA's
    steps = max(1, steps)
    # Log and save intervals are whole blocks of steps_per_loop steps, whatever the run's length:
    # the program is compiled for blocks of that many (training/loop.py largest_call) before the
    # plan chooses the length, and serves every length from then on.
    block = max(1, recipe.steps_per_loop)
    log_every = min(overrides.get("log_every_n_steps", 100), steps // 20)  # ~20 log lines
    return make_hparams(overrides={
        **overrides, "model_size": recipe.model_size, "model_name": model,
        "num_train_steps": steps, "num_warmup_steps": recipe.warmup(steps),
        "lr_schedule_steps": recipe.schedule_steps, "lr_cooldown_steps": recipe.cooldown(steps),
        "vocab_size": bundle["vocab_size"], "seed": seed,
        "max_seq_length": bundle["max_seq_length"],
        "steps_per_loop": block,
        "save_checkpoints_steps": block * max(1, steps // (recipe.evaluations * block)),
        "keep_checkpoint_max": 1,
        "log_every_n_steps": block * max(1, log_every // block)})


def finetune_hparams(recipe, task, seed=0, fraction=1.0, num_train_examples=None):
    """The fine-tuning hparams of `task` (seed: the pre-training seed; trials start at seed + 1);
    with `num_train_examples` and `fraction` < 1, its steps capped at that fraction of the
    official count."""
    from finetune.hparams import FinetuneHParams
    from finetune.finetuner import num_train_steps
    hp = FinetuneHParams(**recipe.finetune, model_size=recipe.model_size,
                         model_hparam_overrides=dict(recipe.model_overrides),
                         num_trials=recipe.num_trials, seed=seed + 1)
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
