"""ELECTRA / ConvBERT optimisation: AdamW without bias correction, the linear schedule, layer-wise LR.

    schedule = linear_warmup_linear_decay(5e-4, warmup_steps=10_000, total_steps=1_000_000)
    opt = AdamWeightDecay(schedule, weight_decay_rate=0.01, name_map=model.weight_map())

`AdamWeightDecay` is the official `AdamWeightDecayOptimizer` (google-research/electra, the
optimization.py of its model package) as a Keras 3 optimizer, so `model.fit`, `optimizer.apply`
and JAX's `stateless_apply` all work:

    m <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2          (no bias correction)
    update = m / (sqrt(v) + eps) + wd * param                   (wd only for decayed variables)
    param <- param - lr * multiplier(param) * update

Gradients are first clipped to global norm `clip_norm` (1.0). Under `tf.distribute` the clipping is
applied to the all-reduced (summed) gradients, so R replicas clip exactly like one device.

Variable names: exclusion from weight decay (`exclude_from_weight_decay`, regex search as the
official code, default "LayerNorm", "layer_norm", "bias") and LR multipliers are looked up by the
variable's official TF1 name when `name_map` ({TF1 name: variable}, e.g. `model.weight_map()`)
covers it, else by its Keras path (e.g. "electra/layer_0/attention_LayerNorm/gamma",
"generator_predictions/output_bias"). Variables named `gamma` / `beta` (every Keras
LayerNormalization weight, whatever the layer is called) are never decayed either.
"""
import collections
import re

import keras
import numpy as np
from keras import ops

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


@keras.saving.register_keras_serializable(package="convbert")
class LinearWarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = peak * max(0, 1 - step / total) * min(1, step / warmup) * cooldown(step).

    Like the official code the linear decay runs from step 0 (it is not delayed by the warm-up),
    and the step is the number of updates already applied (the first update uses step 0).
    `power` != 1 gives the official polynomial decay (`lr_decay_power`). `cooldown_steps` > 0
    adds a linear fall to 0 over the `cooldown_steps` steps before `cooldown_end` (a run that
    stops long before `total_steps` and should still end at 0: the budget-limited GPU run):
    cooldown(step) = clip((cooldown_end - step) / cooldown_steps, 0, 1); 1 without it.
    """

    def __init__(self, peak_lr, warmup_steps, total_steps, power=1.0, end_lr=0.0,
                 cooldown_steps=0, cooldown_end=0):
        self.peak_lr = float(peak_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.power = float(power)
        self.end_lr = float(end_lr)
        self.cooldown_steps = int(cooldown_steps)
        self.cooldown_end = int(cooldown_end)
        if self.total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        if self.cooldown_steps < 0 or (self.cooldown_steps and self.cooldown_end <= 0):
            raise ValueError(f"cooldown_steps must be >= 0 and end at a positive step, got "
                             f"{cooldown_steps} ending at {cooldown_end}")

    def __call__(self, step):
        step = ops.cast(step, "float32")
        frac = ops.minimum(step, float(self.total_steps)) / float(self.total_steps)
        lr = (self.peak_lr - self.end_lr) * ops.power(1.0 - frac, self.power) + self.end_lr
        if self.warmup_steps > 0:
            lr = lr * ops.minimum(1.0, step / float(self.warmup_steps))
        if self.cooldown_steps > 0:
            lr = lr * ops.clip((float(self.cooldown_end) - step) / float(self.cooldown_steps),
                               0.0, 1.0)
        return lr

    def host_value(self, step):
        """`self(step)` in NumPy float32 on the host, the same float32 operations: what a step
        that takes its learning rate as an argument (training/jax_core.py) is fed."""
        f32 = np.float32
        step = f32(step)
        total = f32(self.total_steps)
        frac = np.minimum(step, total) / total
        lr = (f32(self.peak_lr) - f32(self.end_lr)) * np.power(f32(1.0) - frac, f32(self.power)) \
            + f32(self.end_lr)
        if self.warmup_steps > 0:
            lr = lr * np.minimum(f32(1.0), step / f32(self.warmup_steps))
        if self.cooldown_steps > 0:
            lr = lr * np.clip((f32(self.cooldown_end) - step) / f32(self.cooldown_steps),
                              f32(0.0), f32(1.0))
        return f32(lr)

    def arguments(self):
        """The schedule as data: float32 [peak, end, warm-up, total, power, cool-down steps,
        cool-down end], for `value_at`. A compiled step that takes these as an argument serves
        any run length and peak (the JAX core computes each step's rate on the device from its
        step counter)."""
        return np.array([self.peak_lr, self.end_lr, self.warmup_steps, self.total_steps,
                         self.power, self.cooldown_steps, self.cooldown_end], np.float32)

    @staticmethod
    def value_at(step, arguments):
        """`self(step)` from `arguments()` (traced: keras.ops), the same float32 operations as
        `host_value`; a power of 1 is not raised (pow(x, 1) need not return x exactly)."""
        peak, end, warmup, total, power, cooldown, cooldown_end = (arguments[i]
                                                                   for i in range(7))
        step = ops.cast(step, "float32")
        frac = ops.minimum(step, total) / total
        base = 1.0 - frac
        lr = (peak - end) * ops.where(power == 1.0, base, ops.power(base, power)) + end
        ramp = ops.minimum(1.0, step / ops.maximum(warmup, 1.0))
        lr = lr * ops.where(warmup > 0, ramp, 1.0)
        fall = ops.clip((cooldown_end - step) / ops.maximum(cooldown, 1.0), 0.0, 1.0)
        return lr * ops.where(cooldown > 0, fall, 1.0)

    def get_config(self):
        return {"peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "power": self.power, "end_lr": self.end_lr,
                "cooldown_steps": self.cooldown_steps, "cooldown_end": self.cooldown_end}


def linear_warmup_linear_decay(peak_lr, warmup_steps, total_steps, power=1.0, cooldown_steps=0,
                               cooldown_end=0):
    """The official pre-training / fine-tuning schedule (see `LinearWarmupLinearDecay`), with an
    optional linear cool-down to 0 over the `cooldown_steps` steps before `cooldown_end`."""
    return LinearWarmupLinearDecay(peak_lr, warmup_steps, total_steps, power=power,
                                   cooldown_steps=cooldown_steps, cooldown_end=cooldown_end)


def layerwise_depths(names, num_layers):
    """{TF1 name: depth}: 0 for `/embeddings/` and `/embeddings_project/`, i+1 for
    `encoder/layer_i/`, num_layers+2 for `task_specific/` (the official `_get_layer_lrs` keys).
    A name matching no key raises, as in the official code."""
    keys = collections.OrderedDict([("/embeddings/", 0), ("/embeddings_project/", 0),
                                    ("task_specific/", num_layers + 2)])
    for i in range(num_layers):
        keys[f"encoder/layer_{i}/"] = i + 1
    depths = {}
    for name in names:
        matched = [depth for key, depth in keys.items() if key in name]
        if not matched:
            raise ValueError(f"no layer-wise learning rate for variable {name!r} (expected a name "
                             "under /embeddings/, /embeddings_project/, encoder/layer_<i>/ or "
                             "task_specific/)")
        depths[name] = max(matched)
    return depths


def layerwise_lr_multipliers(model_variables_by_tf1_name, num_layers, decay=0.8):
    """{TF1 name: decay ** (num_layers + 2 - depth)} for fine-tuning with layer-wise LR decay.

    Pass the result as `AdamWeightDecay(lr_multipliers=..., name_map=model_variables_by_tf1_name)`.
    """
    return {name: float(decay) ** (num_layers + 2 - depth)
            for name, depth in layerwise_depths(model_variables_by_tf1_name, num_layers).items()}


def _global_norm_clip(grads, clip_norm):
    present = [g for g in grads if g is not None]
    if not present:
        return grads
    norm = ops.sqrt(sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in present))
    scale = clip_norm / ops.maximum(norm, clip_norm)  # = tf.clip_by_global_norm
    return [None if g is None else g * ops.cast(scale, g.dtype) for g in grads]


@keras.saving.register_keras_serializable(package="convbert")
class AdamWeightDecay(keras.optimizers.Optimizer):
    """ELECTRA's Adam with decoupled weight decay and no bias correction (see module doc).

    Args:
      learning_rate: float or LearningRateSchedule (called with `iterations`).
      weight_decay_rate: decoupled decay (0.01), skipped for names matching
        `exclude_from_weight_decay` and for LayerNormalization weights.
      clip_norm: global-norm gradient clipping (1.0; None or 0 disables).
      name_map: optional {TF1 name: variable} used to name variables (else `variable.path`).
      lr_multipliers: optional {name: float}, names as above; with `strict_lr_multipliers` every
        trained variable must have one (the official layer-wise LR raises otherwise), else
        missing ones get 1.0.
    """

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, clip_norm=1.0, exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                 name_map=None, lr_multipliers=None, strict_lr_multipliers=True,
                 name="adam_weight_decay", **kwargs):
        for reserved in ("weight_decay", "global_clipnorm", "clipnorm", "clipvalue"):
            if kwargs.get(reserved) is not None:
                raise ValueError(f"AdamWeightDecay: use weight_decay_rate / clip_norm, not {reserved}")
            kwargs.pop(reserved, None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.clip_norm = float(clip_norm) if clip_norm else None
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self._name_by_id = {id(v): n for n, v in (name_map or {}).items() if v is not None}
        self.lr_multipliers = dict(lr_multipliers) if lr_multipliers else None
        self.strict_lr_multipliers = bool(strict_lr_multipliers)

    # ----------------------------------------------------------------------- variable naming
    def variable_name(self, variable):
        return self._name_by_id.get(id(variable), getattr(variable, "path", None) or variable.name)

    def uses_weight_decay(self, variable):
        """False for names matching `exclude_from_weight_decay` and for normalisation weights."""
        if not self.weight_decay_rate:
            return False
        path = getattr(variable, "path", None) or variable.name
        # Keras' LayerNormalization (and BatchNormalization) weights are named gamma / beta.
        if path.split("/")[-1] in ("gamma", "beta"):
            return False
        if id(variable) in self._name_by_id:  # official semantics: search the TF1 name
            names = [self._name_by_id[id(variable)]]
        else:
            names = [path, variable.name]
        return not any(re.search(p, n) for p in self.exclude_patterns for n in names if n)

    def lr_multiplier(self, variable):
        if not self.lr_multipliers:
            return 1.0
        name = self.variable_name(variable)
        if name in self.lr_multipliers:
            return float(self.lr_multipliers[name])
        path = getattr(variable, "path", None)
        if path in self.lr_multipliers:
            return float(self.lr_multipliers[path])
        if self.strict_lr_multipliers:
            raise ValueError(f"no learning-rate multiplier for variable {name!r}")
        return 1.0

    # ----------------------------------------------------------------------- keras hooks
    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["m", "v"])
        self._decay_flags = [self.uses_weight_decay(v) for v in var_list]
        self._multipliers = [self.lr_multiplier(v) for v in var_list]

    def _clip_gradients(self, grads):
        if not self.clip_norm:
            return grads
        if keras.backend.backend() == "tensorflow":
            return grads  # clipped after the cross-replica sum, in _all_reduce_sum_gradients
        return _global_norm_clip(grads, self.clip_norm)

    def _all_reduce_sum_gradients(self, grads_and_vars):  # TensorFlow backend only
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.clip_norm:
            return grads_and_vars
        grads = _global_norm_clip([g for g, _ in grads_and_vars], self.clip_norm)
        return [(g, v) for g, (_, v) in zip(grads, grads_and_vars)]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        if hasattr(gradient, "indices"):
            # An embedding's IndexedSlices (TensorFlow) without clipping, which densifies them
            # otherwise: the update below is dense.
            import tensorflow as tf
            gradient = tf.convert_to_tensor(gradient)
        gradient = ops.cast(gradient, dtype)
        lr = ops.cast(learning_rate, dtype) * self._multipliers[index]
        m = self._momentums[index]
        v = self._velocities[index]
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient)
        update = next_m / (ops.sqrt(next_v) + self.epsilon)
        if self._decay_flags[index]:
            update = update + self.weight_decay_rate * variable
        self.assign(m, next_m)
        self.assign(v, next_v)
        self.assign_sub(variable, lr * update)

    def get_config(self):
        config = super().get_config()
        for key in ("weight_decay", "clipnorm", "global_clipnorm", "clipvalue"):
            config.pop(key, None)
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1,
                      beta_2=self.beta_2, epsilon=self.epsilon, clip_norm=self.clip_norm,
                      exclude_from_weight_decay=list(self.exclude_patterns),
                      lr_multipliers=self.lr_multipliers,
                      strict_lr_multipliers=self.strict_lr_multipliers)
        return config


def create_optimizer(learning_rate, num_train_steps, weight_decay_rate=0.01, warmup_steps=0,
                     warmup_proportion=0.0, lr_decay_power=1.0, layerwise_lr_decay_power=-1,
                     n_transformer_layers=None, name_map=None, clip_norm=1.0):
    """The official `create_optimizer`: schedule + AdamWeightDecay (+ layer-wise LR decay when
    `layerwise_lr_decay_power` > 0, which needs `name_map` and `n_transformer_layers`)."""
    warmup = max(int(warmup_steps), int(warmup_proportion * num_train_steps))
    schedule = LinearWarmupLinearDecay(learning_rate, warmup, num_train_steps, power=lr_decay_power)
    multipliers = None
    if layerwise_lr_decay_power > 0:
        if name_map is None or n_transformer_layers is None:
            raise ValueError("layer-wise LR decay needs name_map and n_transformer_layers")
        multipliers = layerwise_lr_multipliers(name_map, n_transformer_layers,
                                               layerwise_lr_decay_power)
    return AdamWeightDecay(schedule, weight_decay_rate=weight_decay_rate, clip_norm=clip_norm,
                           name_map=name_map, lr_multipliers=multipliers)
