"""Fine-tuning one task on the training core: trials, training, prediction.

    for trial, trainer, steps in train_trials(hp, "mrpc", model_dir, source, make_head,
                                              forward_fn, loss_fn, train_features):
        outputs = trainer.predict(dev_features, output_keys=("logits",))

* `FinetuneTask` is the core's Task (training/task.py) for an encoder + task head:
  `forward_fn(encoder, head, batch, training) -> dict of tensors` and
  `loss_fn(outputs, batch) -> scalar` make it serve GLUE (finetune/glue_task.py) and SQuAD
  (finetune/squad_task.py) alike. Its data: the numpy features shuffled with the trial seed,
  repeated, fixed batch shape with drop_remainder as ELECTRA's TPU input_fn.
* The core (training/core.py) trains it: ELECTRA's AdamW (weight decay 0.01 except LayerNorm /
  bias, gradients clipped to global norm 1.0), linear warm-up over `warmup_proportion` of the
  steps then linear decay to 0, layer-wise LR decay (a variable at depth d gets
  lr * decay^(L + 2 - d), d = 0 for the embeddings, i + 1 for encoder layer i, L + 2 for the task
  head `task_specific/...`), the progress line and TensorBoard scalars (train/loss,
  train/learning_rate, train/grad_norm, train/sequences_per_second; dev metrics are added under
  dev_<split>/) under `log_dir`.
* Trials: trial k > 1 reuses the variables and the traced step: the encoder goes back to the
  checkpoint, the head is initialised anew (from the trial's seed), the optimizer state is zeroed.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, NamedTuple, Optional

import numpy as np

from training import Task


def num_train_steps(num_examples: int, batch_size: int, epochs: float,
                    max_steps: Optional[int] = None) -> int:
    """ELECTRA: int(num_examples * epochs / batch_size), at least 1, capped by max_steps."""
    steps = max(1, int(num_examples * epochs / batch_size))
    if max_steps:
        steps = min(steps, int(max_steps))
    return steps


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
    from training.seeds import set_random_seed
    several = hp.num_trials > 1
    for number in range(1, hp.num_trials + 1):
        seed = hp.seed + number - 1
        set_random_seed(seed)   # keras.utils' without importing TensorFlow on JAX
        suffix = f"_trial{number}" if several else ""
        label = f"{task} trial {number}/{hp.num_trials}" if several else task
        yield Trial(number, seed, label, suffix,
                    os.path.join(model_dir, "tensorboard", task + suffix))


def train_trials(hp, task: str, model_dir: str, source, make_head: Callable,
                 forward_fn: Callable, loss_fn: Callable, train_features, printer=print):
    """Yields (trial, trainer, steps) after each trial of `task` has trained (steps = 0 without
    `train_features`). The encoder comes from `source` (finetune/encoder_source.py),
    `make_head(config)` builds the (built) task head."""
    from training.core import set_precision
    for trial in trials(hp, task, model_dir):
        if trial.number == 1:
            set_precision(hp.precision)   # before the models are built
            encoder = source.build()
            head = make_head(encoder.config)
            named = dict(encoder.weight_map())
            named.update({f"task_specific/{task}/{k}": v for k, v in head.weight_map().items()})
            trainer = Trainer(encoder, head, forward_fn, loss_fn, hp, task, named,
                              log_dir=trial.log_dir, trial_label=trial.label, printer=printer)
            initial_weights = source.initial_weights(encoder)
        else:   # same variables, so the traced train/predict steps are reused
            trainer.start_trial(initial_weights, trial.log_dir, trial.label)
        steps = trainer.train_epochs(train_features, seed=trial.seed)
        yield trial, trainer, steps


class FinetuneTask(Task):
    """An encoder + head trained on NumPy features by either training core: TensorFlow's
    (`Trainer` below) or JAX's (finetune/jax_trainer.py). `forward_fn` and `loss_fn` are
    keras.ops only; the input is `dataset` (tf.data) on TensorFlow and `host_batches`
    (data/pretraining_arrays.array_batches) on JAX, both the features shuffled with the trial
    seed, repeated, in batches of a fixed shape. Set `features`, `batch_size` and `seed` before
    each training run."""
    scalar_prefix = "train/"

    def __init__(self, encoder, head, forward_fn, loss_fn, named_variables, label):
        self.encoder, self.head = encoder, head
        self.forward_fn, self.loss_fn = forward_fn, loss_fn
        self._named = dict(named_variables)
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


class Trainer:
    """Fine-tunes `encoder` + `head` with `loss_fn` on the training core; see the module doc."""

    def __init__(self, encoder, head, forward_fn: Callable, loss_fn: Callable, hp,
                 task_name: str, named_variables: Dict[str, object],
                 log_dir: Optional[str] = None, trial_label: str = "", printer=print):
        from training.summaries import ScalarWriter
        self.encoder, self.head = encoder, head
        self.forward_fn = forward_fn
        self.hp = hp
        self.task_name = task_name
        self.task = FinetuneTask(encoder, head, forward_fn, loss_fn, named_variables,
                                 trial_label or task_name)
        self._check_variables_covered(named_variables)
        self.printer = printer
        self.writer = ScalarWriter(log_dir)
        self.history: list = []
        self.core = None
        self._predict_steps: dict = {}

    @property
    def optimizer(self):
        return None if self.core is None else self.core.optimizer

    @property
    def _train_step(self):
        return None if self.core is None else self.core._train_step

    def _check_variables_covered(self, named_variables):
        """Every trainable variable of encoder + head must have an official name (and an LR)."""
        named = {id(v) for v in named_variables.values()}
        trainable = list(self.encoder.trainable_variables) + list(self.head.trainable_variables)
        missing = [v.path for v in trainable if id(v) not in named]
        if missing:
            raise RuntimeError(f"variables without an official name (no layer-wise LR): "
                               f"{', '.join(missing[:5])}")

    # ------------------------------------------------------------------ trials
    def start_trial(self, encoder_weights: Dict[str, np.ndarray], log_dir: Optional[str] = None,
                    trial_label: Optional[str] = None):
        """Reset for another trial on the same variables, so the traced steps are reused:
        encoder weights <- `encoder_weights` ({official name: array}, the checkpoint), a fresh
        head initialisation (from the global Keras seed; call training/seeds.py
        `set_random_seed` first) and a zeroed optimizer state (step 0, Adam moments 0)."""
        from training.summaries import ScalarWriter
        assign_encoder_weights(self.encoder, encoder_weights)
        reinitialize_head(self.head)
        if self.core is not None:
            self.core.reset()
        if trial_label:
            self.task.label = trial_label
        self.writer.close()
        self.writer = ScalarWriter(log_dir)
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

    def _settings(self, total_steps, num_layers):
        from training import TrainSettings
        hp = self.hp
        return TrainSettings(
            total_steps=total_steps, batch_size=hp.train_batch_size,
            learning_rate=hp.learning_rate, warmup_proportion=hp.warmup_proportion,
            weight_decay_rate=hp.weight_decay_rate, clip_norm=hp.clip_norm,
            layerwise_lr_decay=hp.layerwise_lr_decay, num_layers=num_layers,
            precision=hp.precision,
            jit_compile=False, log_every=max(1, int(hp.log_every_steps)),
            steps_per_loop=max(1, int(hp.steps_per_loop)))

    def train(self, features: Dict[str, np.ndarray], total_steps: int, seed: int = 0,
              num_layers: Optional[int] = None) -> dict:
        from training import TrainingCore
        hp = self.hp
        if self.core is None:
            if num_layers is None:
                num_layers = self.encoder.config.num_hidden_layers
            self.core = TrainingCore(self.task, self._settings(total_steps, num_layers),
                                     log=self.printer).build()
        else:   # a later trial: same optimizer (its state was reset) and traced step
            self.core.set_total_steps(total_steps)
        self.task.features, self.task.batch_size, self.task.seed = \
            features, hp.train_batch_size, seed
        self.printer(f"{self.task.label}: training {total_steps} steps (batch "
                     f"{hp.train_batch_size}, peak lr {hp.learning_rate:g}, warm-up "
                     f"{self.core.settings.warmup(total_steps)} steps, layer-wise decay "
                     f"{hp.layerwise_lr_decay})")
        summary = self.core.fit(writer=self.writer)
        self.history = summary["history"]
        losses = [(h["loss"], h["step"]) for h in self.history]
        steps_before = [0] + [h["step"] for h in self.history[:-1]]
        weights = [step - before for (_, step), before in zip(losses, steps_before)]
        return {"steps": total_steps,
                "final_loss": losses[-1][0] if losses else float("nan"),
                "mean_loss": float(np.average([l for l, _ in losses], weights=weights))
                if losses else float("nan"),
                "seconds": summary["train_seconds"]}

    # ------------------------------------------------------------------ inference
    def predict(self, features: Dict[str, np.ndarray], output_keys: Iterable[str],
                batch_size: Optional[int] = None) -> Dict[str, np.ndarray]:
        """Run the model in inference mode; {key: numpy array with one row per example}.

        The last batch is padded to the full batch size (rows of padding, dropped from the
        outputs), so every batch has one shape and the step is traced once. Under a driver's
        strategy (mirrored, TPU) each batch is split over the replicas and gathered back in
        order; the batch size is rounded up to a multiple of the replicas."""
        import tensorflow as tf
        keys = tuple(output_keys)
        strategy = tf.distribute.get_strategy()
        replicas = strategy.num_replicas_in_sync
        batch_size = -(-int(batch_size or self.hp.eval_batch_size) // replicas) * replicas
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

            def replica_predict(batch):
                outputs = forward_fn(encoder, head, batch, False)
                # bf16 / float16 outputs (mixed precision) leave as float32
                return {k: tf.cast(outputs[k], tf.float32) if outputs[k].dtype.is_floating
                        else outputs[k] for k in keys}

            @tf.function(autograph=False)      # no tensor control flow; see training/core.py
            def predict_step(batch):
                if not tf.distribute.has_strategy():
                    return replica_predict(batch)
                outputs = strategy.run(replica_predict, args=(batch,))
                return {k: strategy.gather(outputs[k], axis=0) for k in keys}
            self._predict_steps[keys] = predict_step
        predict_step = self._predict_steps[keys]
        dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size).prefetch(2)
        if tf.distribute.has_strategy():
            dataset = strategy.experimental_distribute_dataset(dataset)
        collected = {k: [] for k in keys}
        for batch in dataset:
            out = predict_step(batch)
            for k in keys:
                collected[k].append(out[k].numpy())
        return {k: np.concatenate(v, axis=0)[:n] for k, v in collected.items()}

    def write_scalars(self, prefix: str, metrics: dict, step: int):
        self.writer.write(metrics, step, prefix=f"{prefix}/")
