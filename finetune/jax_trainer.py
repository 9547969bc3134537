"""GLUE and SQuAD fine-tuning on Keras-on-JAX, without TensorFlow: the GPU box's and a JAX TPU
VM's path. The finetuners of finetune/finetuner.py's contract: `JaxFinetuner` (a GLUE head) and
`JaxQAFinetuner` (the TensorFlow run's ElectraQAHead and qa_loss, the same core); the trial
loops that drive them are the TensorFlow run's (finetune/glue_task.py `run_glue_task`,
finetune/squad_task.py `run_squad_task`).

    finetuner = JaxFinetuner(encoder_config, "mrpc", hp)         # builds, compiles once
    finetuner.start(encoder_weights, seed=1)                     # a trial: weights, fresh head
    finetuner.train(train_features, hp, seed=1)                  # hp's epochs / steps
    logits = finetuner.predict(dev_features)["logits"]

The task is the TensorFlow path's: finetune/finetuner.py `FinetuneTask` with finetune/glue_task.py
`glue_model_fns` (ELECTRA's classification / regression head and loss), and so is the
optimisation: `AdamWeightDecay` with layer-wise LR decay, 10% warm-up and linear decay to 0
(training/settings.py `build_optimizer`), trained by the JAX training core
(training/jax_core.py). What is JAX's own:

* one compiled train program and one compiled predict step per (encoder config, head shape): the
  learning rate is computed on the device from the schedule given as an argument
  (training/jax_core.py), so tasks of different lengths and all their trials reuse them. CoLA, SST-2, MRPC and RTE share a binary head; STS-B has its own.
  A trial resets the same variables (encoder <- its start weights, head drawn anew from the
  trial's seed, optimizer state zeroed), as the TensorFlow Trainer does;
* the input: features as NumPy arrays (finetune/feature_files.py writes and reads them; no
  tf.data), shuffled with the trial seed, repeated, fixed batch shape (the task's
  `host_batches`, data/pretraining_arrays.array_batches);
* precision: fp32, or bf16 (`mixed_bfloat16`: bf16 compute, fp32 weights); mixed_float16 (loss
  scaling) is TensorFlow-only;
* devices: whatever distribution is set when the finetuner is built (finetune/run.py sets
  `keras.distribution.DataParallel` over every local device first, training/jax_distribution.py
  `use_devices`): the state replicated, each train block and each predict batch split along the
  batch axis, the one-device losses. The train batch must divide by the devices
  (`check_batch_size`, a one-line error); a predict batch is rounded up to a multiple of them
  (the padding rows are dropped). Several processes (training/jax_distribution.py
  `start_processes`): each reads every feature and feeds its rows of each train and predict batch,
  gets every prediction back (`predict_step`'s replicated outputs), and process 0 alone writes.

TensorBoard: the train/ scalars (loss, learning_rate, grad_norm, sequences_per_second every log
window) go to the writer the trial loop gives `train` (training/summaries.py, without
TensorFlow), as on TensorFlow.
"""
from __future__ import annotations

import time

import numpy as np

from finetune.finetuner import (MODEL_INPUTS, assign_encoder_weights, num_train_steps,
                                pad_rows, reinitialize_head)


def random_encoder_weights(config, seed):
    """{official name: array} of a ConvBertModel(config) initialised under `seed`: the random
    init baseline's start weights (every trial starts from the same encoder, as on TensorFlow)."""
    import keras
    from model import ConvBertModel
    from training.jax_distribution import process_local_variables
    from training.seeds import set_random_seed
    set_random_seed(seed)
    with process_local_variables():   # several processes: no cross-process check per variable
        model = ConvBertModel(config)      # built in __init__: no call needed
    return {name: keras.ops.convert_to_numpy(v) for name, v in model.weight_map().items()}


class JaxFinetuner:
    """One encoder config + one GLUE head shape, compiled once; see the module doc."""

    # The features a train batch holds (the task's labels among them).
    TRAIN_KEYS = ("input_ids", "input_mask", "segment_ids", "label_ids")

    def __init__(self, config, task, hp, log=print, head_dropout=0.1):
        from finetune.glue.tasks import get_task
        from finetune.glue_task import glue_model_fns, make_glue_head
        self.spec = get_task(task)
        _prepare(hp)   # before the head: its layers take the precision policy when made
        head = make_glue_head(self.spec.name, config, dropout_rate=head_dropout, build=False)
        forward, loss = glue_model_fns(self.spec.name)
        self._build(config, hp, self.spec.name, head, forward, loss,
                    lambda outputs: {"logits": outputs["logits"].astype("float32")}, log)
        self.label = f"{self.spec.name}{'' if self.spec.is_regression else ' (classification)'}"

    def _build(self, config, hp, name, head, forward, loss, predict_outputs, log):
        """The task (encoder + built `head`, `forward`, `loss`), its compiled train program and
        the predict program returning `predict_outputs(forward(..., training=False))`."""
        from finetune.finetuner import FinetuneTask, named_variables
        from finetune.hparams import train_settings
        from model import ConvBertModel
        from training.jax_core import JaxTrainingCore
        from training.settings import set_precision
        from training.jax_distribution import process_local_variables
        self.hp, self.log = hp, log
        set_precision(hp.precision)   # (again: a caller may have changed it since)
        # Several processes: built process-local, made global by the core (`train_state`).
        with process_local_variables():
            # Built with its variables in __init__: an eager call here would compile each of its
            # ops for the device (on a GPU, seconds of the window) and change nothing.
            self.encoder = ConvBertModel(config)
            self.head = head
            if not head.built:
                head.build((None, None, config.hidden_size))
        # The TensorFlow Trainer's task, on the JAX core.
        self.task = FinetuneTask(self.encoder, head, forward, loss,
                                 named_variables(self.encoder, head, name), name)
        self.settings = train_settings(hp, config.num_hidden_layers)
        # The schedule is an argument of the program: one compiled program, any length.
        self.core = JaxTrainingCore(self.settings, log=log).build(self.task)
        self.optimizer = self.core.optimizer
        self.train_program = self.core.train_program()
        encoder = self.encoder
        self.predict_program = self.core.predict_program(
            lambda batch: predict_outputs(forward(encoder, head, batch, False)))

    @property
    def writes(self):
        """Whether this process writes results (several processes: process 0 alone)."""
        from training.jax_distribution import is_writer
        return is_writer()

    def example_train_args(self, train_features, batch_size):
        """The train program's arguments on the first batch of `train_features` (arrays) at
        `batch_size`: what compiling and timing it take."""
        from data.pretraining_arrays import array_batches
        batch = next(array_batches(self._train_inputs(train_features), batch_size))
        return self.core.example_args(batch)

    def precompile_jobs(self, train_features, batch_size, eval_batch_size):
        """[(name, program, example args)] of the train and predict programs for
        training/jax_programs.precompile, from a task's features at these batch sizes."""
        from training.device_input import batch_sharding, to_device
        trainable, state, _ = self.core.task_state()
        rows = self.predict_batch_size(eval_batch_size)
        length = np.asarray(train_features["input_ids"]).shape[1]
        predict_batch = to_device({k: np.zeros((rows, length), np.int32) for k in MODEL_INPUTS},
                                  batch_sharding())
        return [(f"finetune {self.label}", self.train_program,
                 self.example_train_args(train_features, batch_size)),
                (f"predict {self.label}", self.predict_program,
                 (trainable, state, predict_batch))]

    @classmethod
    def _train_inputs(cls, features):
        return {k: np.asarray(v) for k, v in features.items() if k in cls.TRAIN_KEYS}

    # What the compiled step bakes in; the rest of hp (epochs, peak lr, warm-up, batch size) is
    # read by `train` for each task.
    COMPILED_HPARAMS = ("weight_decay_rate", "clip_norm", "layerwise_lr_decay", "precision")

    def compatible(self, config, task, hp):
        """Whether this finetuner's compiled steps serve `task` with `hp` on `config`."""
        from finetune.glue.tasks import get_task
        spec = get_task(task)
        return (self.encoder.config.to_dict() == config.to_dict()
                and (spec.num_labels, spec.is_regression)
                == (self.spec.num_labels, self.spec.is_regression)
                and (not spec.is_regression or spec.name == self.spec.name)
                and all(getattr(hp, k) == getattr(self.hp, k) for k in self.COMPILED_HPARAMS))

    def start(self, encoder_weights, seed):
        """A trial: encoder <- `encoder_weights` ({official name: array}), the head drawn from
        `seed`, optimizer state (Adam moments, iterations) zeroed."""
        from training.seeds import set_random_seed
        set_random_seed(seed)
        assign_encoder_weights(self.encoder, encoder_weights)
        reinitialize_head(self.head)
        self.core.reset()

    def train(self, features, hp=None, seed=0, label="", writer=None):
        """hp's epochs (capped by max_train_steps) on `features` (hp: this task's, default the
        constructor's; its COMPILED_HPARAMS must match); {steps, final_loss, seconds}. writer: a
        training/summaries.py ScalarWriter for the train/ scalars (None: none)."""
        import dataclasses
        from training.jax_distribution import check_batch_size
        hp = hp or self.hp
        check_batch_size(hp.train_batch_size)
        inputs = self._train_inputs(features)
        missing = [k for k in self.TRAIN_KEYS if k not in inputs]
        if missing:
            raise ValueError(f"{self.task.label}: training features lack {', '.join(missing)}")
        steps = num_train_steps(len(inputs["input_ids"]), hp.train_batch_size,
                                hp.num_train_epochs, hp.max_train_steps)
        settings = dataclasses.replace(self.settings, total_steps=steps,
                                       batch_size=hp.train_batch_size,
                                       learning_rate=hp.learning_rate,
                                       warmup_proportion=hp.warmup_proportion)
        self.core.set_settings(settings)
        self.task.features, self.task.batch_size, self.task.seed = \
            inputs, hp.train_batch_size, seed
        self.task.label = label
        self.log(f"{label}: training {steps} steps (batch {hp.train_batch_size}, peak lr "
                 f"{hp.learning_rate:g}, warm-up {settings.warmup(steps)} steps, layer-wise "
                 f"decay {hp.layerwise_lr_decay}; JAX)")
        started = time.time()
        summary = self.core.fit_task(program=self.train_program, writer=writer)
        final = summary["final"] or {}
        return {"steps": steps, "final_loss": final.get("loss", float("nan")),
                "seconds": time.time() - started, "history": summary["history"]}

    @staticmethod
    def predict_batch_size(batch_size):
        """`batch_size` rounded up to a multiple of the devices a batch is split over."""
        from training.jax_distribution import num_replicas
        replicas = num_replicas()
        return -(-int(batch_size) // replicas) * replicas

    def predict(self, features, batch_size=None):
        """Head outputs in inference mode: {key: NumPy array, one row per example} (floats as
        float32). Batches of `batch_size` (default hp.eval_batch_size) rounded up to a multiple
        of the devices, each split over them; the last one padded to that size
        (finetuner.pad_rows) so the program compiles once. With several processes each feeds its
        rows of every batch and gets every row back (the core's `predict_program`)."""
        from training.device_input import batch_sharding, to_device
        from training.jax_distribution import process_rows
        batch_size = self.predict_batch_size(batch_size or self.hp.eval_batch_size)
        sharding = batch_sharding()
        inputs, n = pad_rows({k: np.asarray(features[k], np.int32) for k in MODEL_INPUTS},
                             batch_size)
        trainable, state, _ = self.core.task_state()
        out = [self.predict_program(trainable, state, to_device(
                   process_rows({k: v[i:i + batch_size] for k, v in inputs.items()}), sharding))
               for i in range(0, len(inputs["input_ids"]), batch_size)]
        return {k: np.concatenate([np.asarray(o[k]) for o in out])[:n] for k in out[0]}


def _prepare(hp):
    """JAX only; hp's precision policy set (before any layer is made)."""
    import keras
    from training.settings import set_precision
    if keras.backend.backend() != "jax":
        from training.loop import TrainingError
        raise TrainingError("JaxFinetuner needs KERAS_BACKEND=jax")
    set_precision(hp.precision)


class JaxQAFinetuner(JaxFinetuner):
    """SQuAD's encoder + `ElectraQAHead` (finetune/squad_task.py `make_head`, `model_fns`: the
    TensorFlow run's head and loss) on the same JAX core; `predict` gives the head's inference
    outputs ({key: array}, the beam with the joint head) for finetune/qa/postprocess.py."""

    TRAIN_KEYS = ("input_ids", "input_mask", "segment_ids", "start_positions",
                  "end_positions", "is_impossible")

    def __init__(self, config, task, hp, log=print):
        import keras
        from finetune import squad_task
        _prepare(hp)
        self.spec = None
        from training.jax_distribution import process_local_variables
        version = squad_task.VERSIONS[task]
        self.version = version
        with process_local_variables():   # built here: see `_build`
            head = squad_task.make_head(hp, config, version)
        forward, loss, self.output_keys = squad_task.model_fns(hp, version)
        keys = tuple(self.output_keys)

        def outputs(out):   # bf16 logits leave as float32; beam indexes stay integers
            return {k: keras.ops.cast(out[k], "float32")
                    if "float" in str(keras.backend.standardize_dtype(out[k].dtype))
                    else out[k] for k in keys}

        self._build(config, hp, task, head, forward, loss, outputs, log)
        self.label = f"{task} (SQuAD {version})"

    # What shapes the head and its loss, besides the compiled hparams.
    HEAD_HPARAMS = ("beam_size", "qa_hidden_size", "joint_prediction", "answerable_classifier",
                    "answerable_uses_start_logits", "answerable_weight")

    def compatible(self, config, task, hp):
        from finetune import squad_task
        return (task in squad_task.VERSIONS
                and squad_task.VERSIONS[task] == self.version
                and self.encoder.config.to_dict() == config.to_dict()
                and all(getattr(hp, k) == getattr(self.hp, k)
                        for k in self.COMPILED_HPARAMS + self.HEAD_HPARAMS))


class Finetuners:
    """The compiled finetuners of a process, reused wherever config, head shape and the compiled
    hparams allow."""

    def __init__(self, log=print):
        self.log = log
        self._built = []

    def get(self, config, task, hp):
        from finetune.hparams import QA_TASKS
        qa = task in QA_TASKS
        for finetuner in self._built:
            if isinstance(finetuner, JaxQAFinetuner) == qa and \
                    finetuner.compatible(config, task, hp):
                return finetuner
        finetuner = (JaxQAFinetuner if qa else JaxFinetuner)(config, task, hp, log=self.log)
        self._built.append(finetuner)
        return finetuner
