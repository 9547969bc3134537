"""What a training core needs to train one task (TensorFlow's `training/core.py` and JAX's
`training/jax_core.py` alike), and what both cores do the same way: the precision policy
(`set_precision`), the optimizer (`build_optimizer`) and a trial's zeroed optimizer state
(`zero_optimizer_state`). Pure Python, so the JAX path imports it without TensorFlow."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class TrainSettings:
    """What the core needs to train one task; the drivers fill it from their hparams."""
    total_steps: int
    batch_size: int                        # GLOBAL batch, split over the replicas
    learning_rate: float
    warmup_steps: int = 0
    warmup_proportion: float = 0.0         # fine-tuning: warm-up = proportion * total_steps
    lr_decay_power: float = 1.0
    weight_decay_rate: float = 0.01
    clip_norm: Optional[float] = 1.0
    layerwise_lr_decay: Optional[float] = None   # fine-tuning: decay ** (L + 2 - depth)
    num_layers: Optional[int] = None             # ... over this many encoder layers
    precision: str = "fp32"
    jit_compile: Optional[bool] = None           # None: on for one GPU, else off
    log_every: int = 100
    steps_per_loop: int = 1                      # steps inside one compiled call (TPU: ~200)
    save_every: Optional[int] = None
    keep_checkpoints: int = 5
    export_on_save: bool = True
    # The learning-rate schedule's length when the run stops before its end (a short run on the
    # first steps of a long run's schedule, e.g. the official 10,000-step warm-up); None: total_steps
    schedule_steps: Optional[int] = None
    # > 0: the rate also falls linearly to 0 over the run's last cooldown_steps steps (ending at
    # total_steps), on top of the schedule above: a run far shorter than its schedule still ends
    # at 0 (the GPU run: reproduce/gpu_recipe.py)
    cooldown_steps: int = 0

    def warmup(self, total_steps):
        return max(int(self.warmup_steps), int(total_steps * self.warmup_proportion))

    @property
    def schedule_length(self):
        """The steps the learning-rate schedule spans: schedule_steps when set, else the run's."""
        return self.schedule_steps or self.total_steps

    def schedule(self, total_steps=None):
        """The linear warm-up / decay schedule of both cores over `total_steps` (default:
        schedule_length)."""
        from training import optimization
        total_steps = int(self.schedule_length if total_steps is None else total_steps)
        return optimization.linear_warmup_linear_decay(
            self.learning_rate, self.warmup(total_steps), total_steps, power=self.lr_decay_power,
            cooldown_steps=int(self.cooldown_steps or 0),
            cooldown_end=int(self.total_steps) if self.cooldown_steps else 0)


def build_optimizer(settings, named_variables, total_steps=None, learning_rate_variable=False):
    """(optimizer, schedule) of both training cores: ELECTRA's AdamW without bias correction
    (training/optimization.py), the linear warm-up / decay schedule over `total_steps` (default
    `settings.schedule()`'s), weight decay off for LayerNorm / bias (matched on the official
    names of `named_variables`), optional layer-wise LR decay, gradients clipped to global norm
    `clip_norm`. With `learning_rate_variable` the optimizer keeps a float learning rate in a
    variable that the JAX core's program overwrites each step with `schedule`'s value, computed
    on the device from its `arguments()` (training/jax_core.py); otherwise the schedule is traced
    into the optimizer. Not built yet: TensorFlow's core wraps it for loss
    scaling first."""
    from training import optimization
    s = settings
    schedule = s.schedule(total_steps)
    named_variables = dict(named_variables)
    multipliers = None
    if s.layerwise_lr_decay and s.layerwise_lr_decay != 1.0:
        multipliers = optimization.layerwise_lr_multipliers(
            list(named_variables), s.num_layers, s.layerwise_lr_decay)
    optimizer = optimization.AdamWeightDecay(
        float(s.learning_rate) if learning_rate_variable else schedule,
        weight_decay_rate=s.weight_decay_rate, clip_norm=s.clip_norm,
        name_map=named_variables, lr_multipliers=multipliers)
    return optimizer, schedule


# --precision -> the global Keras dtype policy: bf16 computes in bfloat16 with float32 weights
# and optimizer state (no loss scaling needed); mixed_float16 needs loss scaling, which only
# TensorFlow's core has.
PRECISION_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16",
                      "mixed_float16": "mixed_float16"}


def set_precision(precision):
    """The global Keras dtype policy of `precision` (fp32, bf16; mixed_float16 on TensorFlow):
    models built after this call compute in it. A TrainingError for any other value, and for
    mixed_float16 on JAX."""
    import keras
    from training.loop import TrainingError
    jax = keras.backend.backend() == "jax"
    if precision == "mixed_float16" and jax:
        raise TrainingError("precision mixed_float16 (loss scaling) is TensorFlow-only; use bf16 "
                            "or fp32 on JAX")
    if precision not in PRECISION_POLICIES:
        raise TrainingError(f"unknown precision {precision!r}; one of "
                            f"{', '.join(p for p in PRECISION_POLICIES if not jax or p[0] != 'm')}"
                            + (" on JAX" if jax else ""))
    keras.mixed_precision.set_global_policy(PRECISION_POLICIES[precision])


def zero_optimizer_state(optimizer):
    """Every variable of a built optimizer but its learning rate back to zero (Adam moments,
    iterations), on the same variables, so a compiled or traced step is reused (fine-tuning
    trials)."""
    import numpy as np
    for variable in optimizer.variables:
        if variable.name != "learning_rate":
            variable.assign(np.zeros(tuple(variable.shape), dtype=variable.dtype))
