"""What fine-tuning on either backend shares: the finetuner contract, trials, the task, settings.

A finetuner trains one encoder + task head; TensorFlow's is finetune/trainer.py `Trainer`,
Keras-on-JAX's finetune/jax_trainer.py `JaxFinetuner` (and `JaxQAFinetuner`). Both offer

    finetuner.start(encoder_weights, seed)     # a trial: encoder <- weights, head from seed,
                                               # optimizer state zeroed
    finetuner.train(features, hp, seed=, label=, writer=)   # -> {steps, final_loss, seconds}
    finetuner.predict(features, batch_size)    # -> {output key: array, one row per example}
    finetuner.encoder, finetuner.head          # what a trial saves
    finetuner.writes                           # False on the processes that do not write

and the one GLUE trial loop (finetune/glue_task.py `run_glue_task`) and the one SQuAD trial loop
(finetune/squad_task.py `run_squad_task`) drive either: trials, results files, TensorBoard
scalars and the saved models are written there, the same for both backends.

Here: `trials` (trial k uses seed hp.seed + k - 1), `num_train_steps` (ELECTRA's count),
`named_variables`
(the official names, the head's under `task_specific/<task>/`), `FinetuneTask` (the training
cores' Task for an encoder + head), and what a trial resets (`assign_encoder_weights`,
`reinitialize_head`).
"""
from __future__ import annotations

import os
from typing import Iterable, NamedTuple, Optional

import numpy as np

from training.task import Task

# The model inputs of every fine-tuning task (the labels are the task's).
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


def num_train_steps(num_examples: int, batch_size: int, epochs: float,
                    max_steps: Optional[int] = None) -> int:
    """ELECTRA: int(num_examples * epochs / batch_size), at least 1, capped by max_steps."""
    steps = max(1, int(num_examples * epochs / batch_size))
    if max_steps:
        steps = min(steps, int(max_steps))
    return steps


def named_variables(encoder, head, task):
    """{official name: variable} of encoder + task head, the head's under
    `task_specific/<task>/` (the official checkpoints' names): the layer-wise learning rates,
    weight decay and the saved fine-tuned model are keyed by them."""
    names = dict(encoder.weight_map())
    names.update({f"task_specific/{task}/{k}": v for k, v in head.weight_map().items()})
    return names


def assign_encoder_weights(encoder, encoder_weights):
    """encoder <- {official name: array} (a checkpoint's tensors, or the weights a trial starts
    from); every encoder variable must be there."""
    encoder_vars = encoder.weight_map()
    missing = sorted(set(encoder_vars) - set(encoder_weights))
    if missing:
        raise ValueError(f"start_trial: no weights for {', '.join(missing[:3])}")
    for name, variable in encoder_vars.items():
        variable.assign(np.asarray(encoder_weights[name], dtype=variable.dtype))


def reinitialize_head(head):
    """Every Dense layer of a task head drawn anew from its initializers (the global Keras seed):
    a later trial's fresh head on the same variables, so compiled steps are reused."""
    import keras
    for layer in head._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Dense) and layer.built:
            layer.kernel.assign(layer.kernel_initializer(tuple(layer.kernel.shape)))
            if layer.bias is not None:
                layer.bias.assign(layer.bias_initializer(tuple(layer.bias.shape)))


def pad_rows(inputs, batch_size):
    """(inputs padded with zero rows to a multiple of `batch_size`, the real row count): every
    predict batch has one shape, so the predict step compiles once; the padding's outputs are
    dropped."""
    n = len(next(iter(inputs.values())))
    pad = (-n) % batch_size
    if pad:
        inputs = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                  for k, v in inputs.items()}
    return inputs, n


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


def trial(hp, task: str, model_dir: str, number: int) -> Trial:
    """Trial `number` of `task` (seed hp.seed + number - 1)."""
    several = hp.num_trials > 1
    suffix = f"_trial{number}" if several else ""
    label = f"{task} trial {number}/{hp.num_trials}" if several else task
    return Trial(number, hp.seed + number - 1, label, suffix,
                 os.path.join(model_dir, "tensorboard", task + suffix))


def trials(hp, task: str, model_dir: str) -> Iterable[Trial]:
    """The `hp.num_trials` trials of `task`. The global Keras seed is set to each trial's seed
    just before the trial is yielded, so the head initialisation and dropout of trial k do not
    depend on what earlier trials did."""
    from training.seeds import set_random_seed
    for number in range(1, hp.num_trials + 1):
        this = trial(hp, task, model_dir, number)
        set_random_seed(this.seed)   # keras.utils' without importing TensorFlow on JAX
        yield this


def train_trial(finetuner, trial, encoder_weights, features, hp, writer):
    """Start `trial` on `finetuner` from `encoder_weights` and train it on `features` (None: no
    training); the steps trained."""
    finetuner.start(encoder_weights, trial.seed)
    if features is None:
        return 0
    return finetuner.train(features, hp, seed=trial.seed, label=trial.label,
                           writer=writer)["steps"]


class FinetuneTask(Task):
    """An encoder + head trained on NumPy features by either training core: TensorFlow's
    (finetune/trainer.py) or JAX's (finetune/jax_trainer.py). `forward_fn(encoder, head, batch,
    training) -> {key: tensor}` and `loss_fn(outputs, batch) -> scalar` are keras.ops only; the
    input is `dataset` (tf.data) on TensorFlow and `host_batches`
    (data/pretraining_arrays.array_batches) on JAX, both the features shuffled with the trial
    seed, repeated, in batches of a fixed shape with drop_remainder as ELECTRA's TPU input_fn. Set
    `features`, `batch_size` and `seed` before each training run."""
    scalar_prefix = "train/"

    def __init__(self, encoder, head, forward_fn, loss_fn, named, label):
        self.encoder, self.head = encoder, head
        self.forward_fn, self.loss_fn = forward_fn, loss_fn
        self._named = dict(named)
        self.label = label
        self.features, self.batch_size, self.seed = None, None, 0
        self.model = None

    def build(self):
        if self.model is None:
            self.model = encoder_with_head(self.encoder, self.head, self.forward_fn)
        return self.model

    def named_variables(self):
        return self._named

    def state_variables(self):
        # Dropout's RNG state (Keras seed generators) and any other non-trainable variable.
        return [v for v in self.build().variables if not v.trainable]

    def dataset(self, skip_batches):
        import tensorflow as tf
        features = self.features
        n = len(next(iter(features.values())))
        ds = tf.data.Dataset.from_tensor_slices(dict(features))
        ds = ds.shuffle(min(n, 100_000), seed=self.seed, reshuffle_each_iteration=True).repeat()
        return ds.batch(self.batch_size, drop_remainder=True).skip(skip_batches).prefetch(2)

    def host_batches(self, skip_batches):
        from data.pretraining_arrays import array_batches
        arrays = {k: np.asarray(v) for k, v in self.features.items()
                  if np.asarray(v).dtype.kind in "biuf"}
        return array_batches(arrays, self.batch_size, seed=self.seed, skip_batches=skip_batches)

    def compute(self, batch, step, denominators):
        return self.loss_fn(self.forward_fn(self.encoder, self.head, batch, True), batch), {}


def encoder_with_head(encoder, head, forward_fn):
    """encoder + task head as one Keras model: what TensorFlow's checkpoint tracks and what
    `call`s `forward_fn(encoder, head, batch, training)`."""
    import keras

    class EncoderWithHead(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.encoder, self.head = encoder, head

        def call(self, batch, training=False):
            return forward_fn(self.encoder, self.head, batch, training)

    return EncoderWithHead(name=f"{head.name}_model")
