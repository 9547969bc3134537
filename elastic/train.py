"""DynaBERT-W and DynaBERT training of an elastic ConvBERT as a Task of the training core.

    teacher = load_finetuned("runs/ft/finetuned/mrpc", "mrpc")       # encoder + head weights
    task = DynaBertTask("mrpc", "width", start=teacher, teacher=teacher, features=train, hp=hp)
    core = TrainingCore(task, settings(hp, steps, task.num_layers)).build(); core.fit(...)

Phases (HPLM DynaBERT run_glue.py; ../shared/reference/evaluation-and-dynabert.md §1, §2.6):

* "width" (DynaBERT-W): the teacher is the fixed fine-tuned model; the student is a copy of it,
  rewired (elastic/importance.py on a held-out slice of train, elastic/rewire.py) so every width
  is a prefix. Every step runs every width of `width_list` at full depth.
* "depth" (DynaBERT): the student and the teacher both start from the width-phase model; the
  teacher is that model at FULL width for every student width (the released code's choice; the
  paper uses the same-width DynaBERT-W; the authors report both give similar results). Every step
  runs width x depth (`depth_list`, DynaBERT's layer rule `kept_layers`).
* "final" (optional): hard-label task loss, no teacher, over every width x depth.

Distillation loss of one sub-network: l1 * softCE(student logits, teacher logits)
+ l2 * sum_l MSE(h_l^S, h_l^T) over the hidden states [embedding output, each kept layer's output]
(width: l1 1, l2 0.1; depth: 1, 1). Depth pairing: student state i (embeddings, then kept layer
k_0, ..., k_{D-1}) matches the teacher state at index (kept + [L])[i], i.e. the embeddings, then
the teacher's output at the end of the block each kept layer replaces, and the final output.
Regression (STS-B): the official code sets l1 to 0; we use l1 * MSE(student score, teacher
score) instead. The losses of all sub-networks are summed, so one gradient (clipped once at 1.0)
and one optimizer step cover them all: DynaBERT's gradient accumulation over the widths.

Data augmentation (TinyBERT's, DynaBERT's --data_aug) is only a hook: `augment(features) ->
extra features` whose rows are appended to train (the teacher labels them on the fly); off by
default. Without it DynaBERT falls back to hard labels in the width phase; we always distil.

Head counts per width come from `HEAD_COUNTS` (slicing.py, never 0); FFN neurons the width
fraction. The core (training/core.py) owns the loop, ELECTRA's AdamW, checkpoints (exact resume),
progress lines and TensorBoard; the task only supplies build / dataset / compute.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from elastic.importance import (MODEL_INPUTS, compute_importance, feature_batches,
                                head_loss_fn, holdout_split)
from elastic.rewire import rewire
from elastic.slicing import DEPTH_MULTS, WIDTH_MULTS, Subnet, sliced_forward
from base import fileio
from model.checkpoints import CheckpointError
from training import Task

PHASES = ("width", "depth", "final")
# (lambda1 logits, lambda2 hidden states) of HPLM run_glue.py: width_lambda1/2, depth_lambda1/2.
LAMBDAS = {"width": (1.0, 0.1), "depth": (1.0, 1.0)}
IMPORTANCE_EXAMPLES = 256   # held-out train examples the importance scores are computed on


# ------------------------------------------------------------------------------- the models
def head_prefix(task):
    return f"task_specific/{task}/"


def load_finetuned(path: str, task: str) -> Tuple[object, Dict[str, np.ndarray], str]:
    """(config, {official name: array}, directory) of a fine-tuned encoder + `task` head:
    `path` is the directory run_finetuning.py writes with save_finetuned_model
    (<model_dir>/finetuned/<task>), that model_dir itself, or a phase output of elastic.run."""
    from model import checkpoints
    for candidate in (fileio.join(path, "finetuned", task), fileio.join(path, "model"), path):
        if fileio.isdir(candidate) and fileio.exists(
                fileio.join(candidate, checkpoints.NATIVE_CONFIG)):
            path = candidate
            break
    else:
        if not fileio.exists(path):
            raise CheckpointError(f"{path}: no such directory")
    _, config, tensors = checkpoints.resolve_checkpoint(path)
    if not any(name.startswith(head_prefix(task)) for name in tensors):
        raise CheckpointError(
            f"{path}: no {task} head ({head_prefix(task)}...) in the checkpoint; fine-tune with "
            f"run_finetuning.py --hparams '{{\"save_finetuned_model\": true}}' and pass "
            f"<model_dir>/finetuned/{task}")
    return config, tensors, path


def make_head(config, task):
    from finetune.classification_head import ClassificationHead
    from finetune.glue.tasks import get_task
    spec = get_task(task)
    head = ClassificationHead(spec.num_labels, spec.is_regression, dropout_rate=0.1,
                              initializer_range=config.initializer_range, name=f"{task}_head")
    head.build((None, None, config.hidden_size))
    return head


def build_model(config, tensors, task, where):
    """A ConvBertModel + ClassificationHead holding `tensors` (load_finetuned)."""
    from model import ConvBertModel, checkpoints
    encoder = ConvBertModel(config)
    checkpoints.assign_weights(encoder.weight_map(), tensors, where=where)
    head = make_head(config, task)
    prefix = head_prefix(task)
    checkpoints.assign_weights(head.weight_map(prefix), tensors, where=where,
                               scope="task_specific")
    return encoder, head


def save_model(encoder, head, task, directory):
    """Encoder + head as one native checkpoint (the format load_finetuned reads)."""
    from finetune.glue_task import save_finetuned_model
    return save_finetuned_model(encoder, head, task, directory)


def rewire_by_importance(encoder, head, task, features, num_examples=IMPORTANCE_EXAMPLES,
                         seed=0, batch_size=32):
    """Importance on a held-out slice of train (not dev, which selects and reports), then the
    function-preserving rewiring; returns the number of examples scored."""
    from finetune.glue_task import glue_model_fns
    total = len(features["input_ids"])
    num_examples = min(num_examples, max(1, total // 4))
    _, held_out = holdout_split(features, num_examples, seed=seed)
    _, loss_fn = glue_model_fns(task)
    importance = compute_importance(encoder, feature_batches(held_out, batch_size),
                                    head_loss_fn(head, loss_fn))
    rewire(encoder, importance)
    return importance.num_examples


# ------------------------------------------------------------------------------- the losses
def soft_cross_entropy(student_logits, teacher_logits):
    """mean_b -sum_c softmax(teacher)_c * log_softmax(student)_c (DynaBERT's soft_cross_entropy)."""
    from keras import ops
    targets = ops.softmax(ops.cast(teacher_logits, "float32"), axis=-1)
    return ops.mean(-ops.sum(targets * ops.log_softmax(ops.cast(student_logits, "float32"),
                                                       axis=-1), axis=-1))


def mse(a, b):
    from keras import ops
    return ops.mean(ops.square(ops.cast(a, "float32") - ops.cast(b, "float32")))


def teacher_state_indices(kept: Sequence[int], num_layers: int) -> Tuple[int, ...]:
    """Teacher hidden-state index (0 = embeddings, i + 1 = output of layer i) each student state
    matches: kept + [L] (DynaBERT's depth pairing; the identity at full depth)."""
    return tuple(kept) + (num_layers,)


def config_name(width, depth):
    return f"w{width:g}_d{depth:g}"


def parse_multipliers(text, what):
    """'1,0.75,0.5' -> (1.0, 0.75, 0.5); each in (0, 1]."""
    from finetune.console import UsageError
    try:
        values = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--{what}: not a comma list of numbers: {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values) or len(set(values)) != len(values):
        raise UsageError(f"--{what}: need distinct multipliers in (0, 1], got {text!r}")
    return values


# ------------------------------------------------------------------------------- the task
class DynaBertTask(Task):
    """One DynaBERT phase ("width", "depth" or "final") on numpy GLUE features.

    start: (config, tensors) the student begins from; teacher: (config, tensors) of the teacher
    (None for "final"). With `rewire_student` (the width phase) the student is rewired by
    importance in build(). `augment(features) -> features` adds examples (off: None).
    Its step is keras.ops only and it has both inputs (`dataset`, `host_batches`), so either
    training core runs it; the importance scores of the rewiring take TensorFlow gradients
    (elastic/importance.py), so the width phase builds on TensorFlow only."""
    scalar_prefix = "train/"

    def __init__(self, task_name: str, phase: str, start, teacher, features: Dict[str, np.ndarray],
                 batch_size: int, width_list=WIDTH_MULTS, depth_list=DEPTH_MULTS, seed: int = 0,
                 rewire_student: Optional[bool] = None, augment: Optional[Callable] = None,
                 importance_examples: int = IMPORTANCE_EXAMPLES, log=print):
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
        if phase != "final" and teacher is None:
            raise ValueError(f"the {phase} phase needs a teacher")
        self.task_name, self.phase = task_name, phase
        self.label = f"{task_name} {phase}"
        self.start, self.teacher_weights = start, teacher
        if augment is not None:
            extra = augment(features)
            features = {k: np.concatenate([v, np.asarray(extra[k], v.dtype)])
                        for k, v in features.items()}
        self.features, self.batch_size, self.seed = features, int(batch_size), int(seed)
        self.width_list = tuple(width_list)
        self.depth_list = (1.0,) if phase == "width" else tuple(depth_list)
        self.rewire_student = (phase == "width") if rewire_student is None else rewire_student
        self.importance_examples = importance_examples
        self.log = log
        self.num_layers = start[0].num_hidden_layers
        self.lambdas = LAMBDAS.get(phase)
        self.student = self.head = self.teacher = self.teacher_head = None

    @property
    def configurations(self):
        """[(width, depth)] trained every step, widest and deepest first."""
        return [(w, d) for w in self.width_list for d in self.depth_list]

    def build(self):
        from finetune.glue_task import glue_model_fns
        from finetune.finetuner import encoder_with_head
        config, tensors = self.start
        self.student, self.head = build_model(config, tensors, self.task_name, "student")
        if self.teacher_weights is not None:
            self.teacher, self.teacher_head = build_model(*self.teacher_weights, self.task_name,
                                                          "teacher")
            self.teacher.trainable = self.teacher_head.trainable = False
        if self.rewire_student:
            n = rewire_by_importance(self.student, self.head, self.task_name, self.features,
                                     self.importance_examples, seed=self.seed)
            self.log(f"{self.label}: student rewired by importance on {n} held-out train examples")
        self.subnets = [((w, d), Subnet.for_width(config, w, d)) for w, d in self.configurations]
        self.full = Subnet.full(config)
        self.loss_fn = glue_model_fns(self.task_name)[1]
        from finetune.glue.tasks import get_task
        self.is_regression = get_task(self.task_name).is_regression
        self.model = encoder_with_head(self.student, self.head, glue_model_fns(self.task_name)[0])
        return self.model

    def named_variables(self):
        named = dict(self.student.weight_map())
        named.update({f"{head_prefix(self.task_name)}{k}": v
                      for k, v in self.head.weight_map().items()})
        return named

    def state_variables(self):
        # The teacher's weights (not trained) and the RNG state of dropout.
        layers = [self.student, self.head] + [l for l in (self.teacher, self.teacher_head)
                                              if l is not None]
        return [v for layer in layers for v in layer.variables if not v.trainable]

    def host_batches(self, skip_batches):
        from data.pretraining_arrays import array_batches
        return array_batches(self.features, self.batch_size, seed=self.seed,
                             skip_batches=skip_batches)

    def dataset(self, skip_batches):
        import tensorflow as tf
        n = len(self.features["input_ids"])
        ds = tf.data.Dataset.from_tensor_slices(dict(self.features))
        ds = ds.shuffle(min(n, 100_000), seed=self.seed, reshuffle_each_iteration=True).repeat()
        return ds.batch(self.batch_size, drop_remainder=True).skip(skip_batches).prefetch(2)

    def compute(self, batch, step, denominators):
        from keras import ops
        inputs = {k: batch[k] for k in MODEL_INPUTS}
        if self.teacher is not None:
            out = sliced_forward(self.teacher, inputs, self.full, training=False,
                                 output_hidden_states=True)
            teacher_logits = ops.stop_gradient(self.teacher_head(out["sequence_output"],
                                                                 training=False))
            teacher_states = [ops.stop_gradient(h) for h in out["hidden_states"]]
        total, metrics = 0.0, {}
        for (width, depth), subnet in self.subnets:
            out = sliced_forward(self.student, inputs, subnet, training=True,
                                 output_hidden_states=True)
            logits = self.head(out["sequence_output"], training=True)
            if self.phase == "final":
                loss = self.loss_fn({"logits": logits}, batch)
            else:
                lambda1, lambda2 = self.lambdas
                logit_loss = (mse(logits, teacher_logits) if self.is_regression
                              else soft_cross_entropy(logits, teacher_logits))
                pairs = teacher_state_indices(subnet.layers, self.num_layers)
                hidden_loss = sum(mse(h, teacher_states[j])
                                  for h, j in zip(out["hidden_states"], pairs))
                loss = lambda1 * logit_loss + lambda2 * hidden_loss
            metrics[f"loss_{config_name(width, depth)}"] = loss
            total = total + loss
        return total, metrics

    def describe(self, record):
        smallest = config_name(self.width_list[-1], self.depth_list[-1])
        return (f"loss {record['loss']:.4f} (sum of {len(self.subnets)} sub-networks; "
                f"{smallest} {record.get('loss_' + smallest, float('nan')):.4f})")

    def export(self, model_dir):
        save_model(self.student, self.head, self.task_name, model_dir)


def train_settings(hp, total_steps, num_layers, save_every=None):
    """The core's settings from fine-tuning hparams, as fine-tuning on TensorFlow sets them
    (finetune/hparams.py `train_settings`), with checkpoints every `save_every` steps."""
    from finetune.hparams import train_settings as finetune_settings
    return finetune_settings(hp, num_layers, total_steps, jit_compile=False,
                             save_every=save_every)


def train_phase(task: DynaBertTask, hp, phase_dir: str, log=print, rewired_dir=None) -> dict:
    """Train one phase under `phase_dir` ({checkpoints, tensorboard, model, summary.json});
    resumes from its checkpoints. With `rewired_dir` the student as rewired, before any training,
    is saved there too (the baseline grid cuts the plain fine-tuned model from it)."""
    from finetune.finetuner import num_train_steps
    from training import TrainingCore
    steps = num_train_steps(len(task.features["input_ids"]), hp.train_batch_size,
                            hp.num_train_epochs, hp.max_train_steps)
    save_every = max(1, steps // 4)
    core = TrainingCore(task, train_settings(hp, steps, task.num_layers, save_every),
                        log=log).build()
    if rewired_dir is not None:
        save_model(task.student, task.head, task.task_name, rewired_dir)
    checkpoint_dir = fileio.join(phase_dir, "checkpoints")
    restored = core.restore(checkpoint_dir)
    if restored:
        log(f"{task.label}: resumed from {restored}")
    log(f"{task.label}: {steps} steps over {len(task.subnets)} sub-networks "
        f"({', '.join(config_name(w, d) for w, d in task.configurations)}), batch "
        f"{hp.train_batch_size}, peak lr {hp.learning_rate:g}")
    return core.fit(checkpoint_dir=checkpoint_dir, log_dir=fileio.join(phase_dir, "tensorboard"),
                    export_dir=fileio.join(phase_dir, "model"), last_checkpoint=restored,
                    summary_path=fileio.join(phase_dir, "summary.json"),
                    summary_extra={"phase": task.phase, "task": task.task_name,
                                   "width_list": list(task.width_list),
                                   "depth_list": list(task.depth_list), "seed": task.seed})
