"""Pre-training as a task of the training core: ELECTRA replaced-token detection (or BERT's MLM
with `electra_objective=False`) with a ConvBERT generator / discriminator.

    summary = pretrain(hp, model_dir, train_files, strategy, vocab_size)

What is pre-training's own lives here: the `ElectraPretrainer` model, the TFRecord batches with
their example ids (the masking and sampling RNG is a function of them, so a resumed run masks
exactly as an uninterrupted one), the global loss denominators, the metrics of a log window
(generator accuracy, discriminator accuracy and AUC), the sequence-length phases of the paper's
appendix 6.2, and the exports. The loop, optimizer, checkpoints, progress and summary are the
core's: TensorFlow's (training/core.py, `pretrain` below) or JAX's (training/jax_core.py,
pretrain/jax_trainer.py), which run this same task; its step is keras.ops only, and its input
is `dataset` (tf.data) on TensorFlow, `host_batches` (data/tfrecord_io.py, NumPy) on JAX.

Layout of <model_dir>: hparams.json, vocab.txt (or sentencepiece.model: the vocabulary the
shards were built with), checkpoints/ckpt-<step>, train/ (TensorBoard),
discriminator/ and generator/ (native Keras exports, replaced atomically at every save, so
`ConvBertModel.from_pretrained(model_dir)` always finds a complete model) and
pretraining_summary.json. model_dir may be local or any filesystem tf.io.gfile knows (gs://,
ram://): every read and write here goes through tf.io.gfile or base/fileio.py.
"""
import os
import time

import numpy as np

from base import fileio
from pretrain.hparams import HParamsError, model_config
from pretrain import window
from pretrain.window import AUC_BINS
from pretrain.hparams import train_settings
from training.loop import TrainingError
from training.task import Task

SUMMARY_FILE = "pretraining_summary.json"
HPARAMS_FILE = "hparams.json"
# The vocabulary the run tokenized with, beside its checkpoints: fine-tuning's --init_checkpoint
# finds it there (finetune/encoder_source.py find_vocab_file, find_sp_model).
VOCAB_FILE = "vocab.txt"
SP_MODEL_FILE = "sentencepiece.model"
# Checkpoints live one level down, so that model_dir itself holds no TF `checkpoint` file and
# `ConvBertModel.from_pretrained(model_dir)` finds the exported `discriminator/`.
CHECKPOINT_DIR = "checkpoints"
POSITION_TABLE = "electra/embeddings/position_embeddings"


def window_metrics(batch, out):
    """The metric sums of one pre-training batch (summed over a log window by the core) from
    the pretrainer's outputs: what pretrain/window.py summarizes."""
    from keras import ops
    token_mask = ops.cast(batch["input_mask"], "float32")
    probs = ops.cast(out["disc_probs"], "float32")
    labels = ops.cast(out["disc_labels"], "float32")
    # Histograms of discriminator scores of replaced / original tokens: the AUC of a window
    # (summed over replicas and steps) without keeping every score.
    bins = ops.reshape(ops.clip(ops.cast(probs * AUC_BINS, "int32"), 0, AUC_BINS - 1), [-1])
    pos = ops.segment_sum(ops.reshape(labels * token_mask, [-1]), bins, AUC_BINS)
    neg = ops.segment_sum(ops.reshape((1.0 - labels) * token_mask, [-1]), bins, AUC_BINS)
    w_gen = ops.cast(out["gen_weight_sum"], "float32")
    w_disc = ops.cast(out["disc_weight_sum"], "float32")
    return {
        "gen_loss": ops.cast(out["gen_loss_sum"], "float32"),
        "gen_accuracy": ops.cast(out["gen_accuracy"], "float32") * w_gen,
        "gen_weight": w_gen,
        "disc_loss": ops.cast(out["disc_loss_sum"], "float32"),
        "disc_accuracy": ops.cast(out["disc_accuracy"], "float32") * w_disc,
        "disc_weight": w_disc,
        "auc_pos": pos, "auc_neg": neg,
    }


def write_vocabulary(model_dir, vocab_file=None, sp_model=None):
    """Copies the run's WordPiece vocab (as <model_dir>/vocab.txt) or SentencePiece model (as
    <model_dir>/sentencepiece.model) into `model_dir`, unless the same bytes are there already;
    the path written (None: neither was given)."""
    source, name = (vocab_file, VOCAB_FILE) if vocab_file else (sp_model, SP_MODEL_FILE)
    if not source:
        return None
    target = os.path.join(model_dir, name)
    data = fileio.read_bytes(source)
    if not (fileio.isfile(target) and fileio.read_bytes(target) == data):
        fileio.write_bytes_atomic(target, data)
    return target


def input_shares(hp, files, processes=1):
    """How many shares a JAX run reads the global batch in (hparam input_shares; 0: one per
    process; `PretrainingTask.host_batches`); a DataError (one line, naming the input) where
    the files, the batch or the processes do not split evenly into them."""
    from data.errors import DataError
    shares = hp.input_shares or processes
    where = f"--pretrain_tfrecords ({files[0]}{', ...' if len(files) > 1 else ''})"
    if shares % processes:
        raise DataError(f"input_shares {shares} is not a multiple of the {processes} processes "
                        "(each process reads whole shares)")
    if shares > 1 and len(files) % shares:
        raise DataError(f"{where}: {len(files)} TFRecord file(s) do not split evenly over "
                        + (f"{shares} processes" if shares == processes
                           else f"{shares} input shares")
                        + f" (each reads its own files): give a multiple of {shares} files")
    if hp.train_batch_size % shares:
        raise DataError(f"train_batch_size {hp.train_batch_size} is not divisible by the "
                        f"{shares} input shares (processes)")
    return shares


class PretrainingTask(Task):
    scalar_prefix = ""   # <model_dir>/train/loss, .../disc_auc, ...

    def __init__(self, hp, train_files, vocab_size, special_ids=None):
        self.hp = hp
        self.train_files = train_files
        self.special_ids = dict(special_ids or {})
        self.disc_config = model_config(hp, vocab_size)
        if hp.max_seq_length > self.disc_config.max_position_embeddings:
            raise HParamsError(f"max_seq_length {hp.max_seq_length} is beyond the model's "
                               f"{self.disc_config.max_position_embeddings} position embeddings "
                               "(max_position_embeddings)")
        from pretrain.generator_config import generator_config
        self.gen_config = generator_config(self.disc_config, hp.generator_hidden_size,
                                           hp.generator_layers)
        self.seq_length = None    # TensorFlow's checkpoint only (extra_state)

    # ------------------------------------------------------------------ models and state
    def build(self):
        from pretrain.electra_pretrainer import ElectraPretrainer
        from training.seeds import set_random_seed
        hp = self.hp
        set_random_seed(hp.seed)   # keras.utils' without importing TensorFlow on JAX
        self.pretrainer = ElectraPretrainer(
            self.disc_config, self.gen_config, electra_objective=hp.electra_objective,
            mask_prob=hp.mask_prob, max_predictions_per_seq=hp.max_predictions_per_seq,
            gen_weight=hp.gen_weight, disc_weight=hp.disc_weight, temperature=hp.temperature,
            disallow_correct=hp.disallow_correct, seed=hp.seed, **self.special_ids)
        if not self.pretrainer.built or not self.pretrainer.trainable_variables:
            ones = np.ones([1, hp.max_seq_length], np.int32)
            self.pretrainer({"input_ids": ones * 5, "input_mask": ones, "segment_ids": ones * 0,
                             "example_id": np.zeros([1], np.int64)}, step=0, training=False)
        return self.pretrainer

    def named_variables(self):
        """Official names where the pretrainer has them (weight decay exclusion is matched on
        them), else the Keras path; every trainable variable is covered."""
        names = {id(v): n for n, v in self.pretrainer.weight_map().items()}
        return {names.get(id(v), v.path): v for v in self.pretrainer.trainable_variables}

    def state_variables(self):
        # The masking / sampling / dropout RNG state: a resumed run draws what an uninterrupted
        # one would.
        return [v for v in self.pretrainer.variables if not v.trainable]

    def extra_state(self):
        import tensorflow as tf
        if self.seq_length is None:
            self.seq_length = tf.Variable(self.hp.max_seq_length, dtype=tf.int64,
                                          trainable=False, name="seq_length")
        rng_state = [v.value if hasattr(v, "value") else v for v in self.state_variables()]
        return {"seq_length": self.seq_length, "model_state": rng_state}

    def start_phase(self, log):
        """After a restore with another max_seq_length: a new data phase (paper app. 6.2).
        Returns True when the examples counter must restart (another data stream).
        TensorFlow's checkpoint keeps the length (extra_state)."""
        import keras
        old = int(self.seq_length.numpy())
        new = self.hp.max_seq_length
        if old == new:
            return False
        if new > old:
            table = self.pretrainer.weight_map().get(POSITION_TABLE)
            if table is None:
                raise TrainingError(f"cannot find {POSITION_TABLE} to extend")
            value = np.array(keras.ops.convert_to_numpy(table.value))
            reps = -(-new // old)
            value[old:new] = np.tile(value[:old], (reps, 1))[:new - old]
            table.assign(value)
            log(f"max_seq_length {old} -> {new}: position embeddings {old}..{new - 1} "
                f"initialised by copying the trained rows 0..{old - 1}")
        else:
            log(f"max_seq_length {old} -> {new}")
        self.seq_length.assign(new)
        return True

    # ------------------------------------------------------------------ data
    def dataset(self, skip_batches):
        """Global batches of the TFRecord shards, with `example_id` = the example's position in
        the run's stream (the masking and sampling RNG key)."""
        import tensorflow as tf
        from data.pretraining_input import pretraining_dataset
        hp = self.hp
        batch = hp.train_batch_size
        ds = pretraining_dataset(self.train_files, batch, hp.max_seq_length, is_training=True,
                                 seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                 skip_batches=skip_batches, check_files=False)

        def add_ids(index, features):
            return {**features, "example_id": index * batch + tf.range(batch, dtype=tf.int64)}

        return ds.enumerate(start=skip_batches).map(add_ids)

    def input_shares(self, processes=1):
        """How many shares the global batch is read in (`input_shares` below)."""
        return input_shares(self.hp, self.train_files, processes)

    def host_batches(self, skip_batches, process=None):
        """The JAX core's input: global batches of the same shards read without TensorFlow
        (data/tfrecord_io.py; its own shuffle, so not the tf.data stream's order), with the same
        `example_id` key (the example's position in the global stream). process=(index, count):
        that process's rows only, from its own shares of the files (`input_shares`): share i
        holds rows i*B/S .. (i+1)*B/S - 1 of every global batch, read from files[i::S], so the
        stream is the same for any number of processes dividing S, and resume is exact."""
        from data.tfrecord_io import pretraining_batches
        hp = self.hp
        index, count = process or (0, 1)
        shares = self.input_shares(count)
        if shares == 1:
            return pretraining_batches(self.train_files, hp.train_batch_size, hp.max_seq_length,
                                       seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                       skip_batches=skip_batches)
        per = shares // count
        return self._shares(skip_batches, range(index * per, (index + 1) * per), shares)

    def _shares(self, skip_batches, share_indices, shares):
        from data.tfrecord_io import pretraining_batches
        hp = self.hp
        rows = hp.train_batch_size // shares
        streams = [pretraining_batches(self.train_files[i::shares], rows, hp.max_seq_length,
                                       seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                       skip_batches=skip_batches) for i in share_indices]
        offsets = np.concatenate([i * rows + np.arange(rows, dtype=np.int64)
                                  for i in share_indices])
        try:
            for index in range(skip_batches, 2 ** 62):
                parts = [next(stream) for stream in streams]
                batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
                batch["example_id"] = index * hp.train_batch_size + offsets
                yield batch
        finally:
            for stream in streams:
                stream.close()

    # ------------------------------------------------------------------ one batch
    def loss_denominators(self, batch):
        local = self.pretrainer.loss_denominators(batch)
        return {"gen": local["gen"], "disc": local["disc"]}

    def compute(self, batch, step, denominators):
        out = self.forward(batch, step, denominators)
        return out["total_loss"], self.window_metrics(batch, out)

    def forward(self, batch, step, denominators):
        """The pretrainer's outputs on one batch (ElectraPretrainer.call)."""
        return self.pretrainer(batch, step=step, training=True,
                               gen_denominator=denominators["gen"],
                               disc_denominator=denominators["disc"])

    def window_metrics(self, batch, out):
        return window_metrics(batch, out)

    # ------------------------------------------------------------------ a log window
    def summarize(self, sums, num_steps):
        return window.summarize(self.hp, sums)

    def describe(self, record):
        return window.describe(record)

    # ------------------------------------------------------------------ exports
    def export(self, model_dir):
        for part, fn in (("discriminator", self.pretrainer.export_discriminator),
                         ("generator", self.pretrainer.export_generator)):
            final = os.path.join(model_dir, part)
            tmp = os.path.join(model_dir, f".{part}.tmp-{os.getpid()}")
            # also what an export killed before its rename left (another pid): never read
            for stale in fileio.glob(os.path.join(model_dir, f".{part}.tmp-*")):
                fileio.remove_tree(stale)
            fn(tmp, "keras")
            # Not training.state.atomic_replace_dir: on ram:// tf.io.gfile.rename moves only a
            # directory's own entry, not its files; fileio moves them one by one.
            fileio.replace_dir(tmp, final)


def make_core(hp, train_files, strategy, vocab_size, log=print, special_ids=None, task=None):
    """(task, core) of a pre-training run, built (models, optimizer, checkpoint object). `task`:
    a PretrainingTask (or subclass, e.g. elastic/pretrain.py's) to run instead of the plain one."""
    from training.core import TrainingCore
    if task is None:
        task = PretrainingTask(hp, train_files, vocab_size, special_ids)
    core = TrainingCore(task, train_settings(hp), strategy, log=log)
    core.build()
    return task, core


def pretrain(hp, model_dir, train_files, strategy, vocab_size, log=print, special_ids=None,
             task=None, summary_extra=None, vocab_file=None, sp_model=None):
    """Pre-train (or resume) in `model_dir`; returns the run summary (also written to
    <model_dir>/pretraining_summary.json). `task` / `summary_extra`: another PretrainingTask
    (see make_core) and more summary fields; `vocab_file` / `sp_model`: the vocabulary the
    shards were built with, copied into `model_dir` (write_vocabulary)."""
    import tensorflow as tf
    from training import distribution as dist
    started_at = time.time()
    model_dir = os.fspath(model_dir)
    model_dir = model_dir if fileio.is_url(model_dir) else os.path.abspath(model_dir)
    task, core = make_core(hp, train_files, strategy, vocab_size, log, special_ids, task)
    checkpoint_dir = os.path.join(model_dir, CHECKPOINT_DIR)
    if core.chief:
        tf.io.gfile.makedirs(model_dir)
    restored = core.restore(checkpoint_dir)
    resumed_step = int(core.step.numpy())
    if restored:
        if task.start_phase(log):
            core.examples.assign(0)  # a new data stream (other TFRecords) starts at its beginning
        log(f"resumed from {restored} at step {resumed_step}")
    if core.chief:
        hp.to_json(os.path.join(model_dir, HPARAMS_FILE))
        write_vocabulary(model_dir, vocab_file, sp_model)
    task_type, task_index, _ = dist.task_info()
    log(f"{hp.model_name}: {hp.model_size} ConvBERT, {core.num_params:,} trainable parameters "
        f"(discriminator + generator); {dist.describe(strategy)}; batch {hp.train_batch_size} x "
        f"{hp.max_seq_length}; precision {hp.precision}; jit_compile {core.jit_compile}; steps "
        f"{resumed_step} -> "
        f"{hp.num_train_steps}")
    summary = core.fit(
        checkpoint_dir=checkpoint_dir,
        scratch_dir=os.path.join(model_dir, ".workers", f"{task_type}_{task_index}"),
        log_dir=os.path.join(model_dir, "train"), export_dir=model_dir,
        last_checkpoint=restored, started_at=started_at, summary_path=os.path.join(model_dir, SUMMARY_FILE),
        summary_extra={"model_name": hp.model_name, "model_size": hp.model_size,
                       "model_dir": model_dir, "max_seq_length": hp.max_seq_length,
                       "discriminator": os.path.join(model_dir, "discriminator"),
                       "generator": os.path.join(model_dir, "generator"),
                       **(summary_extra or {})})
    return summary
