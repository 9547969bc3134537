"""TensorFlow's finetuner: an encoder + task head on the TensorFlow training core (tf.function,
tf.distribute), with the contract of finetune/finetuner.py.

    trainer, weights = tensorflow_finetuner(source, hp, "mrpc", make_head, forward_fn, loss_fn)
    trainer.start(weights, seed)                      # trial 1: the model as built
    trainer.train(features, hp, seed=seed, label="mrpc", writer=writer)
    outputs = trainer.predict(dev_features, hp.eval_batch_size)    # {"logits": array}

The core (training/core.py) trains the task (finetune/finetuner.py `FinetuneTask`): ELECTRA's
AdamW (weight decay 0.01 except LayerNorm / bias, gradients clipped to global norm 1.0), linear
warm-up over `warmup_proportion` of the steps then linear decay to 0, layer-wise LR decay (a
variable at depth d gets lr * decay^(L + 2 - d), d = 0 for the embeddings, i + 1 for encoder layer
i, L + 2 for the task head `task_specific/...`), the progress line and TensorBoard scalars
(train/loss, train/learning_rate, train/grad_norm, train/sequences_per_second) to the trial's
writer. A later trial reuses the variables and the traced steps: the encoder goes back to its
start weights, the head is initialised anew (from the trial's seed), the optimizer state is
zeroed.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional

import numpy as np

from finetune.finetuner import (FinetuneTask, MODEL_INPUTS, assign_encoder_weights,
                                named_variables, num_train_steps, pad_rows, reinitialize_head)
from finetune.hparams import train_settings


def tensorflow_finetuner(source, hp, task, make_head: Callable, forward_fn: Callable,
                         loss_fn: Callable, output_keys=("logits",), log=print):
    """(Trainer, the encoder weights every trial starts from) for `task`: the encoder from
    `source` (finetune/encoder_source.py), `make_head(config)` the (built) task head, both built
    under trial 1's seed, so trial 1 trains the model as built."""
    from training.settings import set_precision
    from training.seeds import set_random_seed
    set_random_seed(hp.seed)      # trial 1's (finetune/finetuner.py `trials`)
    set_precision(hp.precision)   # before the models are built
    encoder = source.build()
    head = make_head(encoder.config)
    trainer = Trainer(encoder, head, forward_fn, loss_fn, hp, task, output_keys, log=log)
    return trainer, source.initial_weights(encoder)


class Trainer:
    """Fine-tunes `encoder` + `head` with `loss_fn` on TensorFlow's training core; see the
    module doc. `output_keys`: the outputs of `forward_fn` that `predict` returns."""

    writes = True   # every TensorFlow worker writes its results (one process in practice)

    def __init__(self, encoder, head, forward_fn: Callable, loss_fn: Callable, hp,
                 task_name: str, output_keys: Iterable[str] = ("logits",), log=print):
        self.encoder, self.head = encoder, head
        self.forward_fn = forward_fn
        self.hp = hp
        self.task_name = task_name
        self.output_keys = tuple(output_keys)
        named = named_variables(encoder, head, task_name)
        self.task = FinetuneTask(encoder, head, forward_fn, loss_fn, named, task_name)
        self._check_variables_covered(named)
        self.log = log
        self.history: list = []
        self.core = None
        self._predict_step = None
        self._fresh = True   # trial 1 starts from the model as built

    @property
    def optimizer(self):
        return None if self.core is None else self.core.optimizer

    @property
    def _train_step(self):
        return None if self.core is None else self.core._train_step

    def _check_variables_covered(self, named):
        """Every trainable variable of encoder + head must have an official name (and an LR)."""
        ids = {id(v) for v in named.values()}
        trainable = list(self.encoder.trainable_variables) + list(self.head.trainable_variables)
        missing = [v.path for v in trainable if id(v) not in ids]
        if missing:
            raise RuntimeError(f"variables without an official name (no layer-wise LR): "
                               f"{', '.join(missing[:5])}")

    # ------------------------------------------------------------------ trials
    def start(self, encoder_weights: Optional[Dict[str, np.ndarray]], seed: int):
        """A trial. The first starts from the model as built (`tensorflow_finetuner` draws the
        head under trial 1's seed); a later one resets the same variables, so the traced steps
        are reused: encoder <- `encoder_weights` ({official name: array}), a fresh head from
        `seed` and a zeroed optimizer state (step 0, Adam moments 0)."""
        from training.seeds import set_random_seed
        set_random_seed(seed)
        self.history = []
        if self._fresh:
            self._fresh = False
            return
        assign_encoder_weights(self.encoder, encoder_weights)
        reinitialize_head(self.head)
        if self.core is not None:
            self.core.reset()

    # ------------------------------------------------------------------ training
    def train(self, features: Dict[str, np.ndarray], hp=None, seed: int = 0, label: str = "",
              writer=None, total_steps: Optional[int] = None) -> dict:
        """hp's epochs (capped by max_train_steps; or `total_steps`) on `features`;
        {steps, final_loss, seconds, history}. writer: a training/summaries.py ScalarWriter for
        the train/ scalars (None: none)."""
        from training import TrainingCore
        hp = hp or self.hp
        if total_steps is None:
            total_steps = num_train_steps(len(features["input_ids"]), hp.train_batch_size,
                                          hp.num_train_epochs, hp.max_train_steps)
        if self.core is None:
            settings = train_settings(hp, self.encoder.config.num_hidden_layers, total_steps,
                                      jit_compile=False)
            self.core = TrainingCore(self.task, settings, log=self.log).build()
        else:   # a later trial: same optimizer (its state was reset) and traced step
            self.core.set_total_steps(total_steps)
        self.task.features, self.task.batch_size, self.task.seed = \
            features, hp.train_batch_size, seed
        self.task.label = label or self.task_name
        self.log(f"{self.task.label}: training {total_steps} steps (batch "
                 f"{hp.train_batch_size}, peak lr {hp.learning_rate:g}, warm-up "
                 f"{self.core.settings.warmup(total_steps)} steps, layer-wise decay "
                 f"{hp.layerwise_lr_decay})")
        summary = self.core.fit(writer=writer)
        self.history = summary["history"]
        return {"steps": total_steps,
                "final_loss": self.history[-1]["loss"] if self.history else float("nan"),
                "seconds": summary["train_seconds"], "history": self.history}

    # ------------------------------------------------------------------ inference
    def predict(self, features: Dict[str, np.ndarray],
                batch_size: Optional[int] = None) -> Dict[str, np.ndarray]:
        """The model's `output_keys` in inference mode; {key: numpy array with one row per
        example}, floats as float32.

        The last batch is padded to the full batch size (finetuner.pad_rows), so every batch has
        one shape and the step is traced once. Under a driver's strategy (mirrored, TPU) each
        batch is split over the replicas and gathered back in order; the batch size is rounded
        up to a multiple of the replicas."""
        import tensorflow as tf
        keys = self.output_keys
        strategy = tf.distribute.get_strategy()
        replicas = strategy.num_replicas_in_sync
        batch_size = -(-int(batch_size or self.hp.eval_batch_size) // replicas) * replicas
        inputs = {k: np.asarray(v) for k, v in features.items() if k in MODEL_INPUTS}
        if len(inputs["input_ids"]) == 0:
            raise ValueError(f"{self.task_name}: no examples to predict")
        inputs, n = pad_rows(inputs, batch_size)
        if self._predict_step is None:
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
            self._predict_step = predict_step
        dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size).prefetch(2)
        if tf.distribute.has_strategy():
            dataset = strategy.experimental_distribute_dataset(dataset)
        collected = {k: [] for k in keys}
        for batch in dataset:
            out = self._predict_step(batch)
            for k in keys:
                collected[k].append(out[k].numpy())
        return {k: np.concatenate(v, axis=0)[:n] for k, v in collected.items()}
