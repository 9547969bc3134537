"""Training / evaluation / prediction loop for one fine-tuning task and one trial.

    trainer = Trainer(encoder, head, forward_fn, loss_fn, hp, task_name="mrpc",
                      log_dir=".../tensorboard/mrpc")
    trainer.train(train_features)          # dict of numpy arrays, one row per example
    outputs = trainer.predict(dev_features, output_keys=("logits",))

* input: `tf.data` from numpy features (shuffled with the trial seed, repeated, fixed batch
  shape with drop_remainder as ELECTRA's TPU input_fn, so the step is traced once);
* optimiser: ELECTRA's AdamW (`model/optimization.py`): weight decay 0.01 except LayerNorm /
  bias, gradients clipped to global norm 1.0, linear warm-up over `warmup_proportion` of the
  steps then linear decay to 0, and layer-wise LR decay: a variable at depth d gets
  lr * decay^(L + 2 - d) with d = 0 for the embeddings (and embeddings_project), i + 1 for
  encoder layer i and L + 2 for the task head (`task_specific/...`);
* logging: a progress line every `log_every_steps` steps (loss, lr, steps/s, elapsed, ETA) and
  TensorBoard scalars (train/loss, train/learning_rate, then eval metrics) under `log_dir`.

`forward_fn(encoder, head, batch, training) -> dict of tensors` and
`loss_fn(outputs, batch) -> scalar` make it task-agnostic (GLUE: finetune/glue heads; SQuAD:
finetune/squad_task.py). Requires the TensorFlow Keras backend (tf.data + tf.function).
"""
from __future__ import annotations

import datetime
import logging
import math
import os
import time
from typing import Callable, Dict, Iterable, NamedTuple, Optional

import numpy as np

log = logging.getLogger("finetune")


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=int(round(max(0.0, seconds)))))


def num_train_steps(num_examples: int, batch_size: int, epochs: float,
                    max_steps: Optional[int] = None) -> int:
    """ELECTRA: int(num_examples * epochs / batch_size), at least 1, capped by max_steps."""
    steps = max(1, int(num_examples * epochs / batch_size))
    if max_steps:
        steps = min(steps, int(max_steps))
    return steps


class Trial(NamedTuple):
    """One fine-tuning trial of a task: its number (1-based), seed, display label, file-name
    suffix ("" for a single trial, "_trial<k>" otherwise) and TensorBoard directory."""
    number: int
    seed: int
    label: str
    suffix: str
    log_dir: str

    def record_number(self, num_trials: int) -> Optional[int]:
        """The trial number for result records: None when there is only one trial."""
        return None if num_trials == 1 else self.number


def trials(hp, task: str, model_dir: str) -> Iterable[Trial]:
    """The `hp.num_trials` trials of `task` (trial k uses seed hp.seed + k - 1). The global Keras
    seed is set to each trial's seed just before the trial is yielded, so the head initialisation
    and dropout of trial k do not depend on what earlier trials did."""
    import keras
    several = hp.num_trials > 1
    for number in range(1, hp.num_trials + 1):
        seed = hp.seed + number - 1
        keras.utils.set_random_seed(seed)
        suffix = f"_trial{number}" if several else ""
        label = f"{task} trial {number}/{hp.num_trials}" if several else task
        yield Trial(number, seed, label, suffix,
                    os.path.join(model_dir, "tensorboard", task + suffix))


def _scalar_metadata():
    from tensorflow.core.framework import summary_pb2
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar(name: str, value: float, step: int):
    """A TensorBoard scalar (same record as tf.summary.scalar, which needs the tensorboard
    package; this only needs TensorFlow)."""
    import tensorflow as tf
    tf.summary.write(name, tf.constant(float(value), tf.float32), step=int(step),
                     metadata=_scalar_metadata())


def build_optimizer(named_variables: Dict[str, object], num_layers: int, hp, total_steps: int):
    """(optimizer, lr_schedule) for `named_variables` {official name: variable}: ELECTRA's AdamW
    (model/optimization.py) with the linear warm-up / decay schedule and layer-wise LR decay."""
    from model import optimization
    warmup_steps = int(total_steps * hp.warmup_proportion)
    schedule = optimization.linear_warmup_linear_decay(hp.learning_rate, warmup_steps,
                                                       total_steps)
    multipliers = None
    if hp.layerwise_lr_decay and hp.layerwise_lr_decay != 1.0:
        multipliers = optimization.layerwise_lr_multipliers(list(named_variables), num_layers,
                                                            hp.layerwise_lr_decay)
    optimizer = optimization.AdamWeightDecay(
        schedule, weight_decay_rate=hp.weight_decay_rate, clip_norm=hp.clip_norm,
        name_map=named_variables, lr_multipliers=multipliers)
    return optimizer, schedule


class Trainer:
    """Fine-tunes `encoder` + `head` with `loss_fn`; see the module docstring."""

    def __init__(self, encoder, head, forward_fn: Callable, loss_fn: Callable, hp,
                 task_name: str, named_variables: Dict[str, object],
                 log_dir: Optional[str] = None, trial_label: str = "", printer=print):
        import tensorflow as tf
        self.tf = tf
        self.encoder, self.head = encoder, head
        self.forward_fn, self.loss_fn = forward_fn, loss_fn
        self.hp = hp
        self.task_name = task_name
        self.named_variables = dict(named_variables)
        self.variables = list(self.named_variables.values())
        self._check_variables_covered()
        self.log_dir = log_dir
        self.trial_label = trial_label or task_name
        self.printer = printer
        self.writer = tf.summary.create_file_writer(log_dir) if log_dir else None
        self.history: list = []
        self._predict_steps: dict = {}
        self._train_step = None
        self._train_step_total = None
        self.optimizer = self.schedule = None

    def _check_variables_covered(self):
        """Every trainable variable of encoder + head must have an official name (and an LR)."""
        named = {id(v) for v in self.variables}
        trainable = list(self.encoder.trainable_variables) + list(self.head.trainable_variables)
        missing = [v.path for v in trainable if id(v) not in named]
        if missing:
            raise RuntimeError(f"variables without an official name (no layer-wise LR): "
                               f"{', '.join(missing[:5])}")

    # ------------------------------------------------------------------ data
    def _dataset(self, features: Dict[str, np.ndarray], batch_size: int, training: bool,
                 seed: int = 0):
        tf = self.tf
        ds = tf.data.Dataset.from_tensor_slices(dict(features))
        if training:
            n = len(next(iter(features.values())))
            ds = ds.shuffle(min(n, 100_000), seed=seed, reshuffle_each_iteration=True).repeat()
            ds = ds.batch(batch_size, drop_remainder=True)
        else:
            ds = ds.batch(batch_size)
        return ds.prefetch(2)

    # ------------------------------------------------------------------ trials
    def start_trial(self, encoder_weights: Dict[str, np.ndarray], log_dir: Optional[str] = None,
                    trial_label: Optional[str] = None):
        """Reset for another trial on the same variables, so the traced steps are reused:
        encoder weights <- `encoder_weights` ({official name: array}, the checkpoint), a fresh
        head initialisation (from the global Keras seed; call keras.utils.set_random_seed
        first) and a zeroed optimizer state (step 0, Adam moments 0)."""
        import keras
        encoder_vars = self.encoder.weight_map()
        missing = sorted(set(encoder_vars) - set(encoder_weights))
        if missing:
            raise ValueError(f"start_trial: no weights for {', '.join(missing[:3])}")
        for name, variable in encoder_vars.items():
            variable.assign(np.asarray(encoder_weights[name], dtype=variable.dtype))
        for layer in self.head._flatten_layers(include_self=False, recursive=True):
            if isinstance(layer, keras.layers.Dense) and layer.built:
                layer.kernel.assign(layer.kernel_initializer(tuple(layer.kernel.shape)))
                if layer.bias is not None:
                    layer.bias.assign(layer.bias_initializer(tuple(layer.bias.shape)))
        if self.optimizer is not None:
            for variable in self.optimizer.variables:  # iterations, Adam m and v
                if variable.name != "learning_rate":
                    variable.assign(np.zeros(tuple(variable.shape), dtype=variable.dtype))
        if trial_label:
            self.trial_label = trial_label
        if self.writer is not None:
            self.writer.close()
        self.log_dir = log_dir
        self.writer = self.tf.summary.create_file_writer(log_dir) if log_dir else None
        self.history = []

    # ------------------------------------------------------------------ training
    def train_epochs(self, features: Optional[Dict[str, np.ndarray]], seed: int = 0) -> int:
        """Train on `features` for hp.num_train_epochs (capped by hp.max_train_steps), as
        ELECTRA counts steps; returns the number of steps (0, and nothing done, without
        features)."""
        if features is None:
            return 0
        steps = num_train_steps(len(features["input_ids"]), self.hp.train_batch_size,
                                self.hp.num_train_epochs, self.hp.max_train_steps)
        self.train(features, steps, seed=seed)
        return steps

    def train(self, features: Dict[str, np.ndarray], total_steps: int, seed: int = 0,
              num_layers: Optional[int] = None) -> dict:
        tf = self.tf
        hp = self.hp
        if num_layers is None:
            num_layers = self.encoder.config.num_hidden_layers
        if self._train_step is not None and self._train_step_total == total_steps:
            # A later trial on the same variables (see `start_trial`): same optimizer (its
            # state was reset) and the already traced step.
            optimizer, schedule, train_step = self.optimizer, self.schedule, self._train_step
        else:
            optimizer, schedule = build_optimizer(self.named_variables, num_layers, hp,
                                                  total_steps)
            variables = self.variables
            forward_fn, loss_fn = self.forward_fn, self.loss_fn
            encoder, head = self.encoder, self.head

            @tf.function(jit_compile=False, reduce_retracing=True)
            def train_step(batch):
                with tf.GradientTape() as tape:
                    outputs = forward_fn(encoder, head, batch, True)
                    loss = loss_fn(outputs, batch)
                grads = tape.gradient(loss, variables)
                grad_norm = tf.linalg.global_norm([g for g in grads if g is not None])
                optimizer.apply_gradients(zip(grads, variables))
                return loss, grad_norm

            self.optimizer, self.schedule = optimizer, schedule
            self._train_step, self._train_step_total = train_step, total_steps

        dataset = self._dataset(features, hp.train_batch_size, True, seed)
        every = max(1, int(hp.log_every_steps))
        start = last_time = time.time()
        losses = []
        window = []
        first_step_time = None
        self.printer(f"{self.trial_label}: training {total_steps} steps (batch "
                     f"{hp.train_batch_size}, peak lr {hp.learning_rate:g}, warm-up "
                     f"{int(total_steps * hp.warmup_proportion)} steps, layer-wise decay "
                     f"{hp.layerwise_lr_decay})")
        for step, batch in enumerate(dataset.take(total_steps), start=1):
            loss, grad_norm = train_step(batch)
            loss = float(loss)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{self.trial_label}: loss is {loss} at step {step}; "
                                         f"lower the learning rate (now {hp.learning_rate:g})")
            if first_step_time is None:
                first_step_time = time.time() - start  # includes tracing
            losses.append(loss)
            window.append(loss)
            if step % every == 0 or step == total_steps:
                now = time.time()
                elapsed = now - start
                # Rate from the steps after the first (tracing) step when possible.
                timed = step - 1
                rate = timed / (elapsed - first_step_time) if timed and elapsed > first_step_time \
                    else step / max(elapsed, 1e-9)
                eta = (total_steps - step) / rate if rate > 0 else float("inf")
                lr = float(schedule(step - 1)) if callable(schedule) else float(hp.learning_rate)
                mean_loss = float(np.mean(window))
                self.printer(f"{self.trial_label}: step {step}/{total_steps} "
                             f"({100.0 * step / total_steps:.1f}%) loss {mean_loss:.4f} "
                             f"lr {lr:.3g} {rate:.2f} steps/s elapsed "
                             f"{format_duration(elapsed)} ETA {format_duration(eta)}")
                if self.writer is not None:
                    with self.writer.as_default():
                        write_scalar("train/loss", mean_loss, step)
                        write_scalar("train/learning_rate", lr, step)
                        write_scalar("train/grad_norm", float(grad_norm), step)
                        write_scalar("train/steps_per_second", rate, step)
                    self.writer.flush()
                self.history.append({"step": step, "loss": mean_loss, "lr": lr})
                window = []
                last_time = now
        del last_time
        elapsed = time.time() - start
        return {"steps": total_steps, "final_loss": losses[-1] if losses else float("nan"),
                "mean_loss": float(np.mean(losses)) if losses else float("nan"),
                "seconds": elapsed}

    # ------------------------------------------------------------------ inference
    def predict(self, features: Dict[str, np.ndarray], output_keys: Iterable[str],
                batch_size: Optional[int] = None) -> Dict[str, np.ndarray]:
        """Run the model in inference mode; {key: numpy array with one row per example}.

        The last batch is padded to the full batch size (rows of padding, dropped from the
        outputs), so every batch has one shape and the step is traced once."""
        tf = self.tf
        keys = tuple(output_keys)
        batch_size = int(batch_size or self.hp.eval_batch_size)
        model_keys = ("input_ids", "input_mask", "segment_ids")
        inputs = {k: np.asarray(v) for k, v in features.items() if k in model_keys}
        n = len(inputs["input_ids"])
        if n == 0:
            raise ValueError(f"{self.task_name}: no examples to predict")
        pad = (-n) % batch_size
        if pad:
            inputs = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                      for k, v in inputs.items()}
        if keys not in self._predict_steps:
            forward_fn, encoder, head = self.forward_fn, self.encoder, self.head

            @tf.function
            def predict_step(batch):
                outputs = forward_fn(encoder, head, batch, False)
                return {k: outputs[k] for k in keys}
            self._predict_steps[keys] = predict_step
        predict_step = self._predict_steps[keys]
        collected = {k: [] for k in keys}
        for batch in self._dataset(inputs, batch_size, False):
            out = predict_step(batch)
            for k in keys:
                collected[k].append(out[k].numpy())
        return {k: np.concatenate(v, axis=0)[:n] for k, v in collected.items()}

    def write_scalars(self, prefix: str, metrics: dict, step: int):
        if self.writer is None:
            return
        with self.writer.as_default():
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    write_scalar(f"{prefix}/{name}", float(value), step)
        self.writer.flush()
