"""The training core on Keras-on-JAX, without TensorFlow: what training/core.py is for tf.distribute.

    core = JaxTrainingCore(settings, log=print, label="")      # training/settings.py
    summary = core.fit(model, optimizer, schedule, loss_and_metrics, batches, ...)

An objective supplies its built Keras model and optimizer, a `loss_and_metrics(outputs, batch)`
function and a batch stream; the core owns the rest, as `TrainingCore` does on TensorFlow:

* the step: `model.stateless_call` + `jax.value_and_grad` + `optimizer.stateless_apply` in one
  `jax.jit`; RNG and other non-trainable state are threaded through it;
* devices: `keras.distribution.DataParallel` over the local devices (`use_devices`): the global
  batch is sharded along its batch axis, one SPMD program, the one-device loss;
* state: `<checkpoint_dir>/ckpt-<step>.safetensors` (every variable incl. optimizer and RNG state,
  the step and examples counters), written atomically through model/fileio.py, keep-N, restored
  exactly (the caller's batch stream skips the consumed batches);
* the loop: the non-finite guard, a progress line every `log_every` steps with the objective's
  window summary, lr, seq/s, elapsed and ETA (training/progress.py), history, the summary JSON.

Same `TrainSettings` as TensorFlow's core; not here: steps_per_loop, TensorBoard, loss scaling.
"""
import json
import os
import time

import numpy as np

from model import fileio
from training.progress import StepRate, format_duration


class JaxTrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, unreadable checkpoint); one-line message."""


def use_devices(num_devices=None, log=print):
    """DataParallel over the first `num_devices` local devices (all by default); their number."""
    import jax
    import keras
    devices = jax.devices()
    if num_devices:
        if num_devices > len(devices):
            raise JaxTrainingError(f"{num_devices} devices asked for, {len(devices)} present")
        devices = devices[:num_devices]
    if len(devices) > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    log(f"JAX: {len(devices)} {devices[0].platform} device(s)"
        + (" (DataParallel)" if len(devices) > 1 else ""))
    return len(devices)


# ------------------------------------------------------------------------------ checkpoints
def _checkpoints(directory):
    found = []
    for path in fileio.glob(os.path.join(directory, "ckpt-*.safetensors")):
        stem = os.path.basename(path)[len("ckpt-"):-len(".safetensors")]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def save_checkpoint(directory, named_state, step, examples, keep):
    """{name: array} + counters as one safetensors file (no pickle), atomically; keep-N."""
    from safetensors.numpy import save
    tensors = {"step": np.asarray([step], np.int64), "examples": np.asarray([examples], np.int64)}
    tensors.update({name: np.asarray(value) for name, value in named_state.items()})
    fileio.makedirs(directory)
    path = os.path.join(directory, f"ckpt-{step}.safetensors")
    fileio.write_bytes_atomic(path, save(tensors))
    for _, old in _checkpoints(directory)[:-keep]:
        fileio.remove(old)
    return path


def restore_checkpoint(directory, named_state):
    """({name: array}, step, examples, path) from the newest checkpoint, or None."""
    from safetensors.numpy import load
    found = _checkpoints(directory) if fileio.isdir(directory) else []
    if not found:
        return None
    path = found[-1][1]
    try:
        tensors = load(fileio.read_bytes(path))
        restored = {name: tensors[name].astype(np.asarray(value).dtype).reshape(np.shape(value))
                    for name, value in named_state.items()}
    except Exception as e:  # noqa: BLE001 -- a model of another shape, a damaged file
        raise JaxTrainingError(f"cannot restore {path}: {str(e).splitlines()[0]}") from None
    return restored, int(tensors["step"][0]), int(tensors["examples"][0]), path


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
            flat = {n: v for group_names, group in zip(names, state)
                    for n, v in zip(group_names, group)}
            restored = restore_checkpoint(checkpoint_dir, flat)
            if restored is not None:
                values, step, examples, last_saved = restored
                state = tuple([values[n] for n in group_names] for group_names in names)
                self.log(f"resumed from {last_saved} at step {step}")
        start_step = step
        batches = make_batches(examples // s.batch_size)
        train_step = self.make_step(model, optimizer, loss_and_metrics)
        rate = StepRate(step, s.total_steps)
        loop_start = time.time()
        history, window, window_steps, window_start = [], None, 0, time.time()
        label = f"{self.label}: " if self.label else ""
        while step < s.total_steps:
            state, metrics = train_step(state, next(batches), np.int64(step))
            values = {k: np.asarray(v) for k, v in metrics.items()}
            step += 1
            examples += s.batch_size
            rate.step_done(step)
            if not np.isfinite(values["loss"]):
                raise JaxTrainingError(
                    f"{label}non-finite loss ({float(values['loss'])}) at step {step}: stopped "
                    f"without saving; the last good checkpoint is {last_saved or 'none'}")
            window = values if window is None else {k: window[k] + values[k] for k in window}
            window_steps += 1
            if step % max(1, s.log_every) == 0 or step == s.total_steps:
                now = time.time()
                record = {"step": step, **summarize(window, window_steps)}
                record["learning_rate"] = float(np.asarray(schedule(step - 1)))
                record["grad_norm"] = float(window["grad_norm"]) / window_steps
                record["sequences_per_second"] = window_steps * s.batch_size / max(
                    now - window_start, 1e-9)
                history.append(record)
                self.log(f"{label}step {step}/{s.total_steps} "
                         f"({100.0 * step / s.total_steps:.1f}%) {describe(record)} | lr "
                         f"{record['learning_rate']:.3g} | "
                         f"{record['sequences_per_second']:.1f} seq/s | elapsed "
                         f"{format_duration(rate.elapsed())} | ETA "
                         f"{format_duration(rate.eta(step))}")
                window, window_steps, window_start = None, 0, now
            if checkpoint_dir is not None and (
                    (s.save_every and step % s.save_every == 0) or step == s.total_steps):
                flat = {n: v for group_names, group in zip(names, state)
                        for n, v in zip(group_names, group)}
                last_saved = save_checkpoint(checkpoint_dir, flat, step, examples,
                                             s.keep_checkpoints)
        for group, values in zip(variables, state):
            for variable, value in zip(group, values):
                variable.assign(value)
        if export is not None:
            export()
        train_seconds = time.time() - loop_start
        first = rate.first_step_seconds
        steps_run = step - start_step
        summary = {
            "global_step": step, "resumed_from_step": start_step, "steps_this_run": steps_run,
            "train_batch_size": s.batch_size, "precision": s.precision, "backend": "jax",
            "distribution": f"JAX {jax.default_backend()} x{len(jax.devices())}",
            "trainable_parameters": int(sum(np.prod(v.shape) for v in variables[0])),
            "last_checkpoint": last_saved, "wall_seconds": round(time.time() - started_at, 2),
            "train_seconds": round(train_seconds, 2), "first_step_seconds": round(first, 2),
            "sequences_per_second": round(steps_run * s.batch_size /
                                          max(train_seconds - first, 1e-9), 2)
            if steps_run > 1 else 0.0,
            "first": history[0] if history else None, "final": history[-1] if history else None,
            "history": history,
        }
        summary.update(summary_extra or {})
        if summary_path is not None:
            fileio.write_text_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
        return summary
