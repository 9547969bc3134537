"""The training core on Keras-on-JAX, without TensorFlow: what training/core.py is for tf.distribute.

    core = JaxTrainingCore(settings, log=print, label="")      # training/settings.py
    summary = core.fit(model, optimizer, schedule, loss_and_metrics, batches, ...)

An objective supplies its built Keras model and optimizer, a `loss_and_metrics(outputs, batch)`
function and a batch stream; the core owns the rest, as `TrainingCore` does on TensorFlow:

* the step: `model.stateless_call` + `jax.value_and_grad` + `optimizer.stateless_apply` in one
  `jax.jit`; RNG and other non-trainable state are threaded through it;
* devices: `keras.distribution.DataParallel` over the local devices (`use_devices`): the global
  batch is sharded along its batch axis, one SPMD program, the one-device loss;
* state: `<checkpoint_dir>/ckpt-<step>.safetensors` (training/state.py; every variable incl. optimizer and RNG state,
  the step and examples counters), written atomically through model/fileio.py, keep-N, restored
  exactly (the caller's batch stream skips the consumed batches);
* the loop: TensorFlow's own host loop, training/loop.py (non-finite guard, progress line with
  the objective's window summary, lr, seq/s, elapsed and ETA, saves, history, the summary JSON).

Same `TrainSettings` as TensorFlow's core; not here: steps_per_loop, TensorBoard, loss scaling.
"""
import time

import numpy as np

from training.loop import TrainingError, run_loop, run_summary
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


# ------------------------------------------------------------------------------ the core
class JaxTrainingCore:
    GROUPS = ("trainable", "non_trainable", "optimizer")

    def __init__(self, settings, log=print, label=""):
        self.settings = settings
        self.log = log
        self.label = label

    def _variables(self, model, optimizer):
        return (model.trainable_variables, model.non_trainable_variables, optimizer.variables)

    def _names(self, model, optimizer):
        return [[f"{group}/{i}/{v.path}" for i, v in enumerate(variables)]
                for group, variables in zip(self.GROUPS, self._variables(model, optimizer))]

    def make_step(self, model, optimizer, loss_and_metrics):
        """The jitted step: (state, batch, step) -> (state, metric sums incl. loss, grad_norm)."""
        import jax
        import jax.numpy as jnp

        def loss_fn(trainable, non_trainable, batch, step):
            outputs, non_trainable = model.stateless_call(trainable, non_trainable, batch,
                                                          step=step, training=True)
            loss, metrics = loss_and_metrics(outputs, batch)
            loss = loss.astype(jnp.float32)
            return loss, ({**metrics, "loss": loss}, non_trainable)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        @jax.jit
        def train_step(state, batch, step):
            trainable, non_trainable, optimizer_vars = state
            (_, (metrics, non_trainable)), grads = grad_fn(trainable, non_trainable, batch, step)
            metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in grads))
            trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads,
                                                                  trainable)
            return (trainable, non_trainable, optimizer_vars), metrics

        return train_step

    def fit(self, model, optimizer, schedule, loss_and_metrics, make_batches, summarize,
            describe, checkpoint_dir=None, export=None, summary_path=None, summary_extra=None,
            started_at=None):
        """Train from the newest checkpoint of `checkpoint_dir` (or step 0) to total_steps.

        make_batches(skip_batches) -> iterator of global batches; summarize(sums, num_steps) ->
        the window record; describe(record) -> the progress line's objective part; export() is
        called at the end with the trained values assigned back to the variables."""
        import jax
        s = self.settings
        started_at = time.time() if started_at is None else started_at
        variables = self._variables(model, optimizer)
        names = self._names(model, optimizer)
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
        train_step = self.make_step(model, optimizer, loss_and_metrics)

        def run_steps(step):
            nonlocal state
            state, metrics = train_step(state, next(batches), np.int64(step))
            return 1, {k: np.asarray(v) for k, v in metrics.items()}

        start_step, start_examples = step, examples

        def save(step):
            consumed = start_examples + (step - start_step) * s.batch_size
            return save_safetensors_checkpoint(checkpoint_dir, self._flat(names, state), step, consumed,
                                   s.keep_checkpoints)

        result = run_loop(s, start_step, run_steps, summarize=summarize, describe=describe,
                          schedule=schedule, save=None if checkpoint_dir is None else save,
                          last_saved=last_saved, log=self.log, label=self.label)
        for group, values in zip(variables, state):
            for variable, value in zip(group, values):
                variable.assign(value)
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
    def _flat(names, state):
        return {n: v for group_names, group in zip(names, state)
                for n, v in zip(group_names, group)}
