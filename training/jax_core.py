"""The training core on Keras-on-JAX, without TensorFlow: what training/core.py is for tf.distribute.

    core = JaxTrainingCore(settings, log=print).build(task)    # training/task.py, settings.py
    summary = core.fit_task(checkpoint_dir=..., export_dir=..., summary_path=...)

It runs the same `Task` objects as TensorFlow's core: the task builds its models, names its
variables and computes its loss and metric sums with keras.ops; the core owns the rest, as
`TrainingCore` does on TensorFlow:

* the step: the task's `loss_denominators` + `compute` run inside a `keras.StatelessScope` that
  swaps every variable for the step's value, under `jax.value_and_grad`, then
  `optimizer.stateless_apply`, in one `jax.jit`; RNG and other state variables
  (`task.state_variables()`) are threaded through it. With `host_learning_rate=True` the
  learning rate is an argument of the step (written into the optimizer's `learning_rate`
  variable) instead of a schedule traced into it, so one compiled step serves any number of
  steps: fine-tuning reuses it across tasks and trials (`fit_task(train_step=...)`), and a run
  can choose its length after timing its first steps;
* the optimizer: training/settings.py `build_optimizer`, TensorFlow's core's (ELECTRA's AdamW,
  warm-up / decay, layer-wise LR decay, global-norm clipping);
* `steps_per_loop` > 1: that many steps are dispatched back to back and their metric sums added
  on the device, with one host sync per call, so the host prepares the next batches while the
  device computes;
* devices: `keras.distribution.DataParallel` over the local devices (`use_devices`): the global
  batch is sharded along its batch axis, one SPMD program, the one-device loss (so the task's
  denominators are the global ones without a collective of its own);
* state: `<checkpoint_dir>/ckpt-<step>.safetensors` (training/state.py; every variable incl.
  optimizer and RNG state, the step and examples counters), written atomically through
  base/fileio.py, keep-N, restored exactly (the task's `host_batches` skips the consumed
  batches);
* the loop: TensorFlow's own host loop, training/loop.py (non-finite guard, progress line with
  the task's window summary, lr, seq/s, elapsed and ETA, saves, history, the summary JSON).

`make_step` takes a Keras model and a `loss_and_metrics(outputs, batch)` function instead of a
Task: the same step, for benchmarks/gpu_pretrain.py. Same `TrainSettings` as TensorFlow's core;
not here: TensorBoard, loss scaling (mixed_float16).
"""
import os
import time

import numpy as np

from training.loop import TrainingError, run_loop, run_summary, steps_this_call
from training.state import (restore_safetensors_checkpoint, save_safetensors_checkpoint,
                            write_json_atomic)


def use_devices(num_devices=None, log=print):
    """DataParallel over the first `num_devices` local devices (all by default); their number."""
    import jax
    import keras
    devices = jax.devices()
    if num_devices:
        if num_devices > len(devices):
            raise TrainingError(f"{num_devices} devices asked for, {len(devices)} present")
        devices = devices[:num_devices]
    if len(devices) > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    log(f"JAX: {len(devices)} {devices[0].platform} device(s)"
        + (" (DataParallel)" if len(devices) > 1 else ""))
    return len(devices)


def set_precision(precision):
    """The global Keras dtype policy on JAX: fp32, or bf16 (`mixed_bfloat16`: bf16 compute, fp32
    weights and optimizer state, no loss scaling needed). mixed_float16 needs loss scaling,
    which only TensorFlow's core has."""
    import keras
    if precision == "mixed_float16":
        raise TrainingError("precision mixed_float16 (loss scaling) is TensorFlow-only; use bf16 "
                            "or fp32 on JAX")
    if precision not in ("fp32", "bf16"):
        raise TrainingError(f"unknown precision {precision!r}; one of fp32, bf16 on JAX")
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if precision == "bf16" else "float32")


def learning_rate_slot(optimizer):
    """Index of the optimizer's `learning_rate` variable in `optimizer.variables` (a Keras
    optimizer built with a float learning rate keeps it there; one built with a schedule has
    none): where a step with `host_learning_rate` writes the rate it is given."""
    slots = [i for i, v in enumerate(optimizer.variables) if v.name == "learning_rate"]
    if len(slots) != 1:
        raise TrainingError("host_learning_rate needs an optimizer built with a float "
                            "learning_rate (it keeps a `learning_rate` variable), not a schedule")
    return slots[0]


class PrecompilableStep:
    """A jitted function that can be compiled ahead of its first call (`precompile`: several at
    once, in parallel) and then runs the compiled executable; `host_learning_rate` marks a train
    step fed its learning rate by the host. Arguments that do not match what was compiled (another
    batch shape) fall back to the jitted function, which compiles them as usual."""

    def __init__(self, jitted, log=print, host_learning_rate=False):
        self.jitted, self.log = jitted, log
        self.host_learning_rate = host_learning_rate
        self.compiled = None

    def lower(self, *args):
        return self.jitted.lower(*args)

    def __call__(self, *args):
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except (TypeError, ValueError) as e:   # other shapes / dtypes than compiled
                self.log(f"note: precompiled step not used ({str(e).splitlines()[0][:120]})")
                self.compiled = None
        return self.jitted(*args)


def precompile(jobs, log=print, workers=None):
    """Compile `[(name, PrecompilableStep, example args)]` ahead of time: traced and lowered one
    after another (Python), compiled in parallel threads (XLA compiles without the GIL), so a run
    with many steps to compile (two pre-training objectives, four fine-tuning heads and their
    predict steps) waits for the slowest compile rather than for their sum. Returns
    {name: seconds from the start until that step was compiled}."""
    from concurrent.futures import ThreadPoolExecutor
    start = time.time()
    lowered = []
    for name, step, args in jobs:
        lowered.append((name, step, step.lower(*args)))
    log(f"precompile: {len(lowered)} steps traced and lowered in {time.time() - start:.1f}s")
    done = {}

    def compile_one(item):
        name, step, low = item
        step.compiled = low.compile()
        done[name] = round(time.time() - start, 1)

    workers = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max(1, min(workers, len(lowered)))) as pool:
        list(pool.map(compile_one, lowered))
    log(f"precompile: all compiled in {time.time() - start:.1f}s ("
        + ", ".join(f"{k} {v:.0f}s" for k, v in done.items()) + ")")
    return done


def host_learning_rate(schedule, step):
    """schedule(step) as a NumPy float32 computed on the host (no device round trip)."""
    value = getattr(schedule, "host_value", None)
    return np.float32(value(step) if value is not None else np.asarray(schedule(step)))


# ------------------------------------------------------------------------------ the core
class JaxTrainingCore:
    GROUPS = ("trainable", "non_trainable", "optimizer")

    def __init__(self, settings, log=print, label=""):
        self.settings = settings
        self.log = log
        self.label = label
        self.task = self.optimizer = self.schedule = None

    # ------------------------------------------------------------------ a Task
    def build(self, task, host_learning_rate=False):
        """Precision, the task's models, its variables and the optimizer (training/settings.py
        `build_optimizer`; with `host_learning_rate` one that a `task_step(host_learning_rate=
        True)` feeds each step's rate). Returns self."""
        from training.settings import build_optimizer
        set_precision(self.settings.precision)
        self.task = task
        self.model = task.build()
        named = dict(task.named_variables())
        self.trainable = list(named.values())
        self.state = list(task.state_variables())
        self.optimizer, self.schedule = build_optimizer(self.settings, named,
                                                        host_learning_rate=host_learning_rate)
        self.optimizer.build(self.trainable)
        self.num_params = int(sum(np.prod(v.shape) for v in self.trainable))
        return self

    def task_variables(self):
        """(trainable, state, optimizer variables) of the built task: the step's state."""
        return self.trainable, self.state, self.optimizer.variables

    def task_state(self):
        """The current values of `task_variables()`: a step's first argument."""
        return tuple([v.value for v in group] for group in self.task_variables())

    def task_step(self, host_learning_rate=False):
        """The jitted step of the built task (see `make_step` for its signature)."""
        import keras
        task, trainable_vars, state_vars = self.task, self.trainable, self.state

        def forward(trainable, state, batch, step):
            mapping = list(zip(trainable_vars, trainable)) + list(zip(state_vars, state))
            with keras.StatelessScope(state_mapping=mapping) as scope:
                loss, metrics = task.compute(batch, step, task.loss_denominators(batch))
            new_state = []
            for variable, value in zip(state_vars, state):
                current = scope.get_current_value(variable)
                new_state.append(value if current is None else current)
            return loss, metrics, new_state

        return self._step(forward, self.optimizer, host_learning_rate)

    def predict_step(self, fn):
        """A jitted (trainable values, state values, batch) -> fn(batch), run with the built
        task's variables swapped for those values (inference: nothing is updated); a
        PrecompilableStep. Its first two arguments are `task_state()[:2]`."""
        import jax
        import keras
        trainable_vars, state_vars = self.trainable, self.state

        @jax.jit
        def predict(trainable, state, batch):
            mapping = list(zip(trainable_vars, trainable)) + list(zip(state_vars, state))
            with keras.StatelessScope(state_mapping=mapping):
                return fn(batch)

        return PrecompilableStep(predict, log=self.log)

    def set_settings(self, settings):
        """Other settings for the built task (a run's length, peak learning rate, warm-up, log
        and save intervals), with the schedule they make. A step with a host learning rate
        stays valid; what is compiled into it (weight decay, clipping, layer-wise decay,
        precision) must not change."""
        self.settings = settings
        self.schedule = settings.schedule()

    def reset(self):
        """Optimizer state (Adam moments, iterations) back to zero on the same variables, so the
        compiled step is reused (fine-tuning trials)."""
        for variable in self.optimizer.variables:
            if variable.name != "learning_rate":
                variable.assign(np.zeros(tuple(variable.shape), dtype=variable.dtype))

    def fit_task(self, checkpoint_dir=None, export_dir=None, summary_path=None,
                 summary_extra=None, started_at=None, train_step=None, after_save=None,
                 checkpoint_every=None):
        """Train the built task from the newest checkpoint of `checkpoint_dir` (or step 0) to
        settings.total_steps; `task.export(export_dir)` at the end, with the trained values
        assigned back to the variables. train_step: a `task_step()` to reuse (one is compiled
        otherwise); one made with `host_learning_rate` is fed `schedule(step)` each step.
        after_save(step): called at every save point (every `save_every` steps and at the end,
        with or without a `checkpoint_dir`) with the current values assigned to the variables
        (held-out curves). checkpoint_every: write the checkpoint only at save points that are
        a multiple of it (and at the end); after_save still sees every save point."""
        task = self.task
        export = None if export_dir is None else (lambda: task.export(export_dir))
        return self._fit(self.task_variables(), self.schedule, task.host_batches,
                         task.summarize, task.describe,
                         train_step or self.task_step(), checkpoint_dir=checkpoint_dir,
                         export=export, summary_path=summary_path,
                         summary_extra=summary_extra, started_at=started_at,
                         after_save=after_save, checkpoint_every=checkpoint_every,
                         label=task.label or self.label)

    # ------------------------------------------------------------------ a model + loss function
    def make_step(self, model, optimizer, loss_and_metrics, host_learning_rate=False):
        """The jitted step: (state, batch, step) -> (state, metric sums incl. loss, grad_norm);
        with `host_learning_rate`, (state, batch, step, learning_rate) -> the same (the optimizer
        must have been built with a float learning rate: see `learning_rate_slot`). state =
        (trainable, non-trainable, optimizer variable values)."""

        def forward(trainable, non_trainable, batch, step):
            outputs, non_trainable = model.stateless_call(trainable, non_trainable, batch,
                                                          step=step, training=True)
            loss, metrics = loss_and_metrics(outputs, batch)
            return loss, metrics, non_trainable

        return self._step(forward, optimizer, host_learning_rate)

    # ------------------------------------------------------------------ shared
    def _step(self, forward, optimizer, host_learning_rate):
        """jit(forward + backward + AdamW); forward(trainable, non_trainable, batch, step) ->
        (loss, metric sums, new non_trainable values)."""
        import jax
        import jax.numpy as jnp
        lr_slot = learning_rate_slot(optimizer) if host_learning_rate else None

        def loss_fn(trainable, non_trainable, batch, step):
            loss, metrics, non_trainable = forward(trainable, non_trainable, batch, step)
            loss = loss.astype(jnp.float32)
            metrics = {k: jnp.asarray(v).astype(jnp.float32) for k, v in metrics.items()}
            return loss, ({**metrics, "loss": loss}, non_trainable)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        @jax.jit
        def train_step(state, batch, step, learning_rate=None):
            trainable, non_trainable, optimizer_vars = state
            if lr_slot is not None:
                optimizer_vars = list(optimizer_vars)
                optimizer_vars[lr_slot] = jnp.asarray(
                    learning_rate, optimizer_vars[lr_slot].dtype).reshape(
                        optimizer_vars[lr_slot].shape)
            (_, (metrics, non_trainable)), grads = grad_fn(trainable, non_trainable, batch, step)
            metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in grads))
            trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads,
                                                                  trainable)
            return (trainable, non_trainable, optimizer_vars), metrics

        if lr_slot is None:
            return train_step
        return PrecompilableStep(train_step, log=self.log, host_learning_rate=True)

    def _fit(self, variables, schedule, make_batches, summarize, describe, train_step,
             checkpoint_dir=None, export=None, summary_path=None, summary_extra=None,
             started_at=None, after_save=None, checkpoint_every=None, label=""):
        import jax
        import jax.numpy as jnp
        s = self.settings
        started_at = time.time() if started_at is None else started_at
        names = [[f"{group}/{i}/{v.path}" for i, v in enumerate(group_vars)]
                 for group, group_vars in zip(self.GROUPS, variables)]
        state = tuple([v.value for v in group] for group in variables)
        step = examples = 0
        last_saved = None
        if checkpoint_dir is not None:
            restored = restore_safetensors_checkpoint(checkpoint_dir, self._flat(names, state))
            if restored is not None:
                values, step, examples, last_saved = restored
                state = tuple([values[n] for n in group_names] for group_names in names)
                self.log(f"resumed from {last_saved} at step {step}")
        batches = make_batches(examples // s.batch_size)
        host_lr = getattr(train_step, "host_learning_rate", False)
        add = jax.jit(lambda a, b: jax.tree_util.tree_map(jnp.add, a, b))

        def run_steps(step):
            # steps_per_loop steps dispatched back to back, sums kept on the device: one host sync
            # per call (never past a log or save boundary: training/loop.py).
            nonlocal state
            sums = None
            num = steps_this_call(s, step)
            for i in range(num):
                args = (state, next(batches), np.int64(step + i))
                if host_lr:
                    args += (host_learning_rate(schedule, step + i),)
                state, metrics = train_step(*args)
                sums = metrics if sums is None else add(sums, metrics)
            return num, {k: np.asarray(v) for k, v in sums.items()}

        start_step, start_examples = step, examples

        def save(step):
            path = None
            due = (not checkpoint_every or step % checkpoint_every == 0
                   or step == s.total_steps)
            if checkpoint_dir is not None and due:
                consumed = start_examples + (step - start_step) * s.batch_size
                path = save_safetensors_checkpoint(checkpoint_dir, self._flat(names, state), step,
                                                   consumed, s.keep_checkpoints)
            if after_save is not None:
                self._assign(variables, state)
                after_save(step)
            return path

        saving = checkpoint_dir is not None or after_save is not None
        result = run_loop(s, start_step, run_steps, summarize=summarize, describe=describe,
                          schedule=schedule, save=save if saving else None,
                          last_saved=last_saved, log=self.log, label=label)
        self._assign(variables, state)
        if export is not None:
            export()
        num_params = sum(np.prod(v.shape) for v in variables[0])
        summary = run_summary(s, result, started_at, num_params, extra={
            "backend": "jax", "distribution": f"JAX {jax.default_backend()} x{len(jax.devices())}",
            **(summary_extra or {})})
        if summary_path is not None:
            write_json_atomic(summary, summary_path)
        return summary

    @staticmethod
    def _assign(variables, state):
        for group, values in zip(variables, state):
            for variable, value in zip(group, values):
                variable.assign(value)

    @staticmethod
    def _flat(names, state):
        return {n: v for group_names, group in zip(names, state)
                for n, v in zip(group_names, group)}
