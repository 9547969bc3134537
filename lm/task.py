"""Causal language modelling as a task of the training core (training/core.py), plus perplexity
and generation.

    hp = make_hparams({"seq_len": 128}, {"num_train_steps": 1000})
    task, core = make_core(hp, config, train_stream)       # built: model, optimizer, checkpoint
    summary = train(task, core, model_dir)                  # resumes from <model_dir>/checkpoints
    evaluate(task.model, eval_stream, hp.seq_len, stride)   # {"loss", "ppl", "tokens", ...}
    generate(task.model, prompt_ids, 20, hp.seq_len)        # greedy; temperature > 0 samples

Loss: next-token cross-entropy, averaged over every target token of the global batch (blocks of
lm/data.py: no padding in training). Metrics of a log window: loss (nats per token) and ppl.

Perplexity convention: per WordPiece token (the [SEP] line ends included), exp of the mean
cross-entropy over every token of the held-out stream after its first, each scored exactly once;
non-overlapping blocks of seq_len (stride = seq_len), or a sliding window (stride < seq_len) where
each token has at least seq_len - stride tokens of context (lm/data.py `eval_windows`). Word-level
WikiText perplexities (the papers') are not comparable with per-token ones.

Held-out curve: with a `heldout_stream`, every save (every save_checkpoints_steps and the last
step) also scores it with `evaluate` and appends {step, loss, ppl, tokens} to lm_curve.json
(entries at or after a resumed run's step are replaced, so a resumed run's curve is one curve).

Layout of <model_dir>: hparams.json, model_config.json, checkpoints/ckpt-<step> (exact resume),
train/ (TensorBoard), lm/ (the model, `ConvBertLM.from_pretrained`, replaced at every save),
lm_summary.json, lm_curve.json, lm_eval.json.
"""
import dataclasses
import math
import os
from typing import Optional

import numpy as np

from base import fileio
from model.config import ConfigError, read_json_object
from training import PRECISIONS

HPARAMS_FILE = "hparams.json"
CONFIG_FILE = "model_config.json"
CHECKPOINT_DIR = "checkpoints"
EXPORT_DIR = "lm"
SUMMARY_FILE = "lm_summary.json"
CURVE_FILE = "lm_curve.json"
EVAL_FILE = "lm_eval.json"


class LMError(ValueError):
    """A bad language-model run configuration; the message is one line."""


@dataclasses.dataclass
class LMHParams:
    model_config: str = "lm_small_mixed"   # configs/ name, .json file or JSON string
    model_overrides: dict = dataclasses.field(default_factory=dict)  # ConvBertConfig fields
    seq_len: int = 128
    train_batch_size: int = 32
    num_train_steps: int = 10_000
    learning_rate: float = 5e-4
    num_warmup_steps: int = 500
    lr_decay_power: float = 1.0
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    seed: int = 1
    precision: str = "fp32"
    jit_compile: Optional[bool] = None
    deterministic: bool = False
    log_every_n_steps: int = 100
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    eval_batch_size: int = 16
    eval_stride: Optional[int] = None      # None: = seq_len (non-overlapping blocks)
    do_lower_case: bool = True

    def validate(self):
        for name in ("seq_len", "train_batch_size", "eval_batch_size", "log_every_n_steps",
                     "save_checkpoints_steps", "keep_checkpoint_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise LMError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.num_train_steps, int) or self.num_train_steps < 0:
            raise LMError(f"num_train_steps must be an integer >= 0, got {self.num_train_steps!r}")
        if self.eval_stride is not None and not 0 < self.eval_stride <= self.seq_len:
            raise LMError(f"eval_stride must be in [1, seq_len = {self.seq_len}], got "
                          f"{self.eval_stride}")
        if self.precision not in PRECISIONS:
            raise LMError(f"unknown precision {self.precision!r}; one of {', '.join(PRECISIONS)}")
        if not isinstance(self.model_overrides, dict):
            raise LMError(f"model_overrides must be a JSON object, got {self.model_overrides!r}")

    def to_json(self, path):
        import json
        fileio.write_text_atomic(path, json.dumps(dataclasses.asdict(self), indent=2,
                                                  sort_keys=True) + "\n")


def make_hparams(overrides=None, from_flags=None):
    """Defaults <- `overrides` (the --hparams JSON: a dict, a JSON string or a .json path) <-
    `from_flags` (explicit flags win). Unknown keys are an error listing the valid ones."""
    if isinstance(overrides, str):
        try:
            overrides = read_json_object(overrides, "--hparams")[0] if overrides.strip() else {}
        except ConfigError as e:
            raise LMError(str(e)) from None
    values = {**(overrides or {}), **(from_flags or {})}
    known = [f.name for f in dataclasses.fields(LMHParams)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise LMError(f"unknown hparam(s) {', '.join(unknown)}; valid: {', '.join(known)}")
    hp = LMHParams(**values)
    hp.validate()
    return hp


def model_config(hp, vocab_size):
    """The LM's ConvBertConfig: hp.model_config + hp.model_overrides, causal, the vocab's size."""
    from model.config import ConvBertConfig
    try:
        config = ConvBertConfig.from_any(hp.model_config)
        config = ConvBertConfig.from_dict({**config.to_dict(), **hp.model_overrides,
                                           "vocab_size": int(vocab_size), "causal": True})
    except ConfigError as e:
        message = str(e)   # a config file's errors name the file already
        raise LMError(message if str(hp.model_config) in message
                      else f"model config {hp.model_config}: {message}") from None
    if hp.seq_len > config.max_position_embeddings:
        raise LMError(f"seq_len {hp.seq_len} is beyond the model's {config.max_position_embeddings}"
                      " position embeddings (max_position_embeddings)")
    return config


# ---------------------------------------------------------------------------------- the task
from training.task import Task  # noqa: E402  (TF-free)


class LanguageModelTask(Task):
    label = "lm"
    scalar_prefix = ""   # <model_dir>/train/loss, .../ppl

    def __init__(self, hp, config, train_stream=None, heldout_stream=None):
        self.hp = hp
        self.config = config
        self.train_stream = train_stream
        self.heldout_stream = heldout_stream
        self.model = None
        self.step = None      # the core's step variable (make_core), for the held-out curve

    def build(self):
        from lm.model import ConvBertLM
        from training.seeds import set_random_seed
        set_random_seed(self.hp.seed)
        self.model = ConvBertLM(self.config)
        return self.model

    def named_variables(self):
        names = {id(v): n for n, v in self.model.weight_map().items()}
        return {names.get(id(v), v.path): v for v in self.model.trainable_variables}

    def dataset(self, skip_batches):
        """Blocks of seq_len + 1 tokens, shuffled (seeded, reshuffled every epoch), repeated,
        in global batches; `skip_batches` in (exact resume)."""
        import tensorflow as tf
        from lm.data import training_blocks
        if self.train_stream is None:
            raise LMError("training needs --train_files")
        blocks = training_blocks(self.train_stream, self.hp.seq_len)
        ds = tf.data.Dataset.from_tensor_slices(blocks)
        ds = ds.shuffle(len(blocks), seed=self.hp.seed, reshuffle_each_iteration=True).repeat()
        return ds.batch(self.hp.train_batch_size, drop_remainder=True).skip(skip_batches)

    def host_batches(self, skip_batches):
        """The JAX core's input: the same blocks, shuffled with the seed (NumPy, not tf.data's
        order), repeated, in global batches; `skip_batches` in."""
        from data.pretraining_arrays import array_batches
        from lm.data import training_blocks
        if self.train_stream is None:
            raise LMError("training needs --train_files")
        blocks = training_blocks(self.train_stream, self.hp.seq_len)
        return (b["tokens"] for b in array_batches({"tokens": blocks}, self.hp.train_batch_size,
                                                   seed=self.hp.seed,
                                                   skip_batches=skip_batches))

    def loss_denominators(self, batch):
        from keras import ops
        return {"tokens": ops.cast(ops.size(batch[:, 1:]), "float32")}

    def compute(self, batch, step, denominators):
        from keras import ops
        logits = self.model({"input_ids": batch[:, :-1]}, training=True)
        ce = ops.sparse_categorical_crossentropy(batch[:, 1:], ops.cast(logits, "float32"),
                                                 from_logits=True)
        ce_sum = ops.sum(ce)
        tokens = ops.cast(ops.size(ce), "float32")
        return ce_sum / denominators["tokens"], {"ce_sum": ce_sum, "tokens": tokens}

    def summarize(self, sums, num_steps):
        loss = float(sums["ce_sum"]) / max(float(sums["tokens"]), 1.0)
        return {"loss": loss, "ppl": math.exp(min(loss, 700.0))}

    def describe(self, record):
        return f"| loss {record['loss']:.4f} | ppl {record['ppl']:.2f}"

    def export(self, model_dir):
        final = os.path.join(model_dir, EXPORT_DIR)
        tmp = os.path.join(model_dir, f".{EXPORT_DIR}.tmp-{os.getpid()}")
        fileio.remove_tree(tmp)
        self.model.save_pretrained(tmp, format="keras")
        fileio.replace_dir(tmp, final)
        if self.heldout_stream is not None and self.step is not None:
            self._record_heldout(model_dir, int(self.step.numpy()))

    def _record_heldout(self, model_dir, step):
        import json
        curve = [point for point in read_curve(model_dir) if point["step"] < step]
        scores = evaluate(self.model, self.heldout_stream, self.hp.seq_len, self.hp.eval_stride,
                          self.hp.eval_batch_size)
        curve.append({"step": step, "loss": scores["loss"], "ppl": scores["ppl"],
                      "tokens": scores["tokens"]})
        fileio.write_text_atomic(os.path.join(model_dir, CURVE_FILE),
                                 json.dumps(curve, indent=1) + "\n")


def read_curve(model_dir):
    """The held-out curve of a run: [{step, loss, ppl, tokens}] ([] when none yet)."""
    import json
    path = os.path.join(model_dir, CURVE_FILE)
    return json.loads(fileio.read_text(path)) if fileio.exists(path) else []


def train_settings(hp):
    from training.settings import TrainSettings
    return TrainSettings(
        total_steps=hp.num_train_steps, batch_size=hp.train_batch_size,
        learning_rate=hp.learning_rate, warmup_steps=hp.num_warmup_steps,
        lr_decay_power=hp.lr_decay_power, weight_decay_rate=hp.weight_decay_rate,
        clip_norm=hp.clip_norm, precision=hp.precision, jit_compile=hp.jit_compile,
        log_every=hp.log_every_n_steps, save_every=hp.save_checkpoints_steps,
        keep_checkpoints=hp.keep_checkpoint_max)


def make_core(hp, config, train_stream=None, strategy=None, log=print, heldout_stream=None):
    """(task, core), built (model, optimizer, checkpoint object). `heldout_stream`: scored at
    every save into <model_dir>/lm_curve.json."""
    from training import TrainingCore
    task = LanguageModelTask(hp, config, train_stream, heldout_stream)
    core = TrainingCore(task, train_settings(hp), strategy, log=log)
    core.build()
    task.step = core.step
    return task, core


def train(task, core, model_dir, log=print, started_at=None):
    """Train (or resume) to hp.num_train_steps in `model_dir`; the run summary."""
    import time
    hp = task.hp
    started_at = time.time() if started_at is None else started_at
    restored = core.restore(os.path.join(model_dir, CHECKPOINT_DIR))
    if restored:
        log(f"resumed from {restored} at step {int(core.step.numpy())}")
        if task.heldout_stream is not None and task.step is not None:
            # A run stopped between its checkpoint and its held-out score: score it now.
            step = int(core.step.numpy())
            if step not in [point["step"] for point in read_curve(model_dir)]:
                task._record_heldout(model_dir, step)
    hp.to_json(os.path.join(model_dir, HPARAMS_FILE))
    task.config.to_json(os.path.join(model_dir, CONFIG_FILE))
    log(f"lm: {hp.model_config} ({task.config.conv_type}, {task.config.num_hidden_layers} layers),"
        f" {core.num_params:,} trainable parameters; batch {hp.train_batch_size} x {hp.seq_len}; "
        f"steps {int(core.step.numpy())} -> {hp.num_train_steps}")
    return core.fit(checkpoint_dir=os.path.join(model_dir, CHECKPOINT_DIR),
                    log_dir=os.path.join(model_dir, "train"), export_dir=model_dir,
                    last_checkpoint=restored, started_at=started_at,
                    summary_path=os.path.join(model_dir, SUMMARY_FILE),
                    summary_extra={"model_dir": model_dir, "model_config": hp.model_config,
                                   "seq_len": hp.seq_len})


# ---------------------------------------------------------------------------------- evaluation
def _forward(model):
    import tensorflow as tf
    return tf.function(lambda ids: model({"input_ids": ids}, training=False), reduce_retracing=True,
                       autograph=False)


def evaluate(model, stream, seq_len, stride=None, batch_size=16):
    """Perplexity per token of `stream` (module docstring for the convention)."""
    import tensorflow as tf
    from lm.data import eval_windows
    inputs, targets, weights = eval_windows(stream, seq_len, stride)
    forward = _forward(model)
    total, count = 0.0, 0.0
    for start in range(0, len(inputs), batch_size):
        logits = tf.cast(forward(tf.constant(inputs[start:start + batch_size])), tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(targets[start:start + batch_size],
                                                            logits).numpy().astype(np.float64)
        w = weights[start:start + batch_size]
        total += float(np.sum(ce * w))
        count += float(np.sum(w))
    loss = total / count
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "tokens": int(count),
            "windows": len(inputs), "seq_len": seq_len, "stride": stride or seq_len,
            "unit": "WordPiece token"}


def generate(model, prompt_ids, num_tokens, seq_len, temperature=0.0, top_k=0, seed=0):
    """`num_tokens` ids continuing `prompt_ids`: greedy (temperature 0) or sampled from
    softmax(logits / temperature), optionally among the top_k. The context is the last seq_len
    ids, right-padded to seq_len (one traced shape): the model is causal, so the padding after
    the last id never reaches its logits."""
    import tensorflow as tf
    forward = _forward(model)
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in prompt_ids]
    new = []
    for _ in range(num_tokens):
        context = ids[-seq_len:]
        window = np.zeros([1, seq_len], np.int32)
        window[0, :len(context)] = context
        logits = tf.cast(forward(tf.constant(window)), tf.float32).numpy()[0, len(context) - 1]
        logits = logits.astype(np.float64)
        if temperature <= 0:
            token = int(np.argmax(logits))
        else:
            logits = logits / temperature
            if top_k and top_k < len(logits):
                logits[logits < np.sort(logits)[-top_k]] = -np.inf
            probs = np.exp(logits - logits.max())
            token = int(rng.choice(len(probs), p=probs / probs.sum()))
        ids.append(token)
        new.append(token)
    return new


def detokenize(tokenizer, ids):
    """WordPiece ids -> text: "##" pieces glued to the previous one, [SEP] as a line end."""
    words = []
    for token in tokenizer.convert_ids_to_tokens(ids):
        if token == "[SEP]":
            words.append("\n")
        elif token.startswith("##") and words:
            words[-1] += token[2:]
        else:
            words.append(token)
    return " ".join(words).replace(" \n ", "\n").replace(" \n", "\n")
