"""The pre-training loop: ELECTRA replaced-token detection with a ConvBERT generator/discriminator.

    trainer = Trainer(hp, model_dir, train_files, strategy, vocab_size)
    summary = trainer.train()

* Model and optimizer are created in `strategy.scope()`; the train step is a `tf.function`
  running `strategy.run` on each replica's share of the GLOBAL batch.
* Losses are combined exactly as on one device: each replica weights its mean losses by its share
  of the global denominators (real tokens for the discriminator, masked positions for the
  generator), gradients are summed over replicas, then clipped by global norm. So 1, 2 or N
  replicas (or workers) give the same loss for the same global batch, up to float rounding.
* State = `tf.train.Checkpoint(model, optimizer, step, examples consumed, sequence length, RNG
  state)` kept by a `CheckpointManager` (last `keep_checkpoint_max`) in
  <model_dir>/checkpoints. Rerunning with the same
  model_dir resumes: the input pipeline is rebuilt with the same seed and skips the batches
  already consumed, so in `deterministic` mode a resumed run is bit-identical to an uninterrupted
  one (tests/pretrain/test_resume.py).
* A non-finite loss (or gradient norm) stops the run at that step with TrainingError, before any
  save: the last good checkpoint is never overwritten.
* The discriminator and generator are exported (native "keras" format) to
  `<model_dir>/discriminator` and `<model_dir>/generator` at every save and at the end, via a
  temporary directory + rename, so `ConvBertModel.from_pretrained(model_dir)` always finds a
  complete model.
"""
import datetime
import json
import os
import shutil
import time

import numpy as np
import tensorflow as tf

from pretrain import distribution as dist
from pretrain.hparams import HParamsError, model_config

AUC_BINS = 200
SUMMARY_FILE = "pretraining_summary.json"
HPARAMS_FILE = "hparams.json"
CHECKPOINT_NAME = "ckpt"
# Checkpoints live one level down, so that model_dir itself holds no TF `checkpoint` file and
# `ConvBertModel.from_pretrained(model_dir)` finds the exported `discriminator/`.
CHECKPOINT_DIR = "checkpoints"


class TrainingError(RuntimeError):
    """The run cannot continue; the message is one line for the user."""


def _fmt_eta(seconds):
    if not np.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=int(max(0, seconds))))


def auc_from_histograms(pos, neg):
    """ROC AUC from per-bin counts of positive / negative scores (ties within a bin count 1/2)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    return float(np.sum(pos * (neg_below + 0.5 * neg)) / (n_pos * n_neg))


def write_scalar(tag, value, step):
    """A TensorBoard scalar (what tf.summary.scalar writes, without needing tensorboard)."""
    from tensorflow.core.framework import summary_pb2
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step,
                     metadata=metadata.SerializeToString())


def _atomic_replace_dir(tmp_dir, final_dir):
    """Move a finished `tmp_dir` to `final_dir`, replacing an older one (never half-written)."""
    old = None
    if os.path.exists(final_dir):
        old = f"{final_dir}.old-{os.getpid()}"
        os.replace(final_dir, old)
    os.replace(tmp_dir, final_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


class Trainer:
    def __init__(self, hp, model_dir, train_files, strategy, vocab_size, log=print,
                 special_ids=None):
        self.hp = hp
        self.model_dir = os.path.abspath(model_dir)
        self.train_files = train_files
        self.strategy = strategy
        self.vocab_size = vocab_size
        self.log = log
        self.special_ids = dict(special_ids or {})
        self.chief = dist.is_chief(strategy)
        self.num_replicas = strategy.num_replicas_in_sync
        if hp.train_batch_size % self.num_replicas:
            raise TrainingError(f"train_batch_size {hp.train_batch_size} is not divisible by the "
                                f"{self.num_replicas} replicas")
        self.disc_config = model_config(hp, vocab_size)
        if hp.max_seq_length > self.disc_config.max_position_embeddings:
            raise HParamsError(f"max_seq_length {hp.max_seq_length} is beyond the model's "
                               f"{self.disc_config.max_position_embeddings} position embeddings "
                               "(max_position_embeddings)")
        from pretrain.generator_config import generator_config
        self.gen_config = generator_config(self.disc_config, hp.generator_hidden_size,
                                           hp.generator_layers)

    # ------------------------------------------------------------------ building
    def _set_precision(self):
        import keras
        policy = {"fp32": "float32", "bf16": "mixed_bfloat16",
                  "mixed_float16": "mixed_float16"}[self.hp.precision]
        keras.mixed_precision.set_global_policy(policy)

    def build(self):
        import keras
        from model import optimization
        from pretrain.electra_pretrainer import ElectraPretrainer

        hp = self.hp
        keras.utils.set_random_seed(hp.seed)
        self._set_precision()
        with self.strategy.scope():
            self.pretrainer = ElectraPretrainer(
                self.disc_config, self.gen_config, electra_objective=hp.electra_objective,
                mask_prob=hp.mask_prob, max_predictions_per_seq=hp.max_predictions_per_seq,
                gen_weight=hp.gen_weight, disc_weight=hp.disc_weight,
                temperature=hp.temperature, disallow_correct=hp.disallow_correct, seed=hp.seed,
                **self.special_ids)
            if not self.pretrainer.built or not self.pretrainer.trainable_variables:
                self._build_by_calling()
            self.schedule = optimization.linear_warmup_linear_decay(
                hp.learning_rate, hp.num_warmup_steps, hp.num_train_steps,
                power=hp.lr_decay_power)
            self.optimizer = self._make_optimizer(optimization)
            self.loss_scaled = hp.precision == "mixed_float16"
            if self.loss_scaled:
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
            self.variables = list(self.pretrainer.trainable_variables)
            self.optimizer.build(self.variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
            self.seq_length = tf.Variable(hp.max_seq_length, dtype=tf.int64, trainable=False,
                                          name="seq_length")
        rng_state = [v.value if hasattr(v, "value") else v for v in self.pretrainer.variables
                     if not v.trainable]
        self.checkpoint = tf.train.Checkpoint(
            model=self.pretrainer, optimizer=self.optimizer, step=self.step,
            examples=self.examples, seq_length=self.seq_length, model_state=rng_state)
        self.num_params = int(sum(np.prod(v.shape) for v in self.variables))

    def _build_by_calling(self):
        t = self.hp.max_seq_length
        ones = tf.ones([1, t], tf.int32)
        self.pretrainer({"input_ids": ones * 5, "input_mask": ones, "segment_ids": ones * 0,
                         "example_id": tf.zeros([1], tf.int64)}, step=tf.constant(0, tf.int64),
                        training=False)

    def _make_optimizer(self, optimization):
        """ELECTRA's AdamW; weight-decay exclusion (LayerNorm, bias) matched on official names."""
        return optimization.AdamWeightDecay(
            self.schedule, weight_decay_rate=self.hp.weight_decay_rate,
            clip_norm=self.hp.clip_norm, name_map=self._weight_map())

    def _weight_map(self):
        if hasattr(self.pretrainer, "weight_map"):
            return self.pretrainer.weight_map()
        return {}

    # ------------------------------------------------------------------ data
    def _dataset(self, skip_examples):
        from data.pretraining_input import pretraining_dataset
        hp = self.hp
        batch = hp.train_batch_size
        skip_batches = skip_examples // batch
        ds = pretraining_dataset(self.train_files, batch, hp.max_seq_length, is_training=True,
                                 seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                 skip_batches=skip_batches, check_files=False)

        def add_ids(index, features):
            ids = index * batch + tf.range(batch, dtype=tf.int64)
            return {**features, "example_id": ids}

        ds = ds.enumerate(start=skip_batches).map(add_ids)
        options = tf.data.Options()
        options.deterministic = True
        # Every worker sees the same global batches and keeps its replicas' rows of each one, so
        # N workers train on exactly the examples one device would.
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        ds = ds.with_options(options)
        return self.strategy.experimental_distribute_dataset(ds), skip_batches * batch

    # ------------------------------------------------------------------ the step
    def _make_train_step(self):
        hp = self.hp
        strategy = self.strategy
        variables = self.variables
        optimizer = self.optimizer
        pretrainer = self.pretrainer
        loss_scaled = self.loss_scaled
        num_replicas = self.num_replicas
        sum_op = tf.distribute.ReduceOp.SUM
        jit = hp.jit_compile
        if jit is None:
            jit = bool(tf.config.list_physical_devices("GPU")) and num_replicas == 1
        self.jit_compile = bool(jit)
        from model import optimization
        # The toolkit's optimizer clips AFTER the cross-replica sum (one all-reduce, clipped like
        # one device). Any other optimizer (or loss scaling, which must unscale before clipping)
        # gets the gradients all-reduced and clipped here first.
        reduce_in_optimizer = (not loss_scaled and
                               isinstance(optimizer, optimization.AdamWeightDecay)
                               and optimizer.clip_norm == (hp.clip_norm or None))

        def compute(batch, step, gen_den, disc_den):
            """Forward + backward of one replica (no collectives inside: XLA-compilable)."""
            with tf.GradientTape() as tape:
                out = pretrainer(batch, step=step, training=True, gen_denominator=gen_den,
                                 disc_denominator=disc_den)
                loss = tf.cast(out["total_loss"], tf.float32)
                scaled = optimizer.scale_loss(loss) if loss_scaled else loss
            grads = tape.gradient(scaled, variables)
            grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
            token_mask = tf.cast(batch["input_mask"], tf.float32)
            probs = tf.cast(out["disc_probs"], tf.float32)
            labels = tf.cast(out["disc_labels"], tf.float32)
            bins = tf.reshape(tf.clip_by_value(tf.cast(probs * AUC_BINS, tf.int32), 0,
                                               AUC_BINS - 1), [-1])
            pos = tf.math.unsorted_segment_sum(tf.reshape(labels * token_mask, [-1]), bins,
                                               AUC_BINS)
            neg = tf.math.unsorted_segment_sum(tf.reshape((1.0 - labels) * token_mask, [-1]),
                                               bins, AUC_BINS)
            w_gen = tf.cast(out["gen_weight_sum"], tf.float32)
            w_disc = tf.cast(out["disc_weight_sum"], tf.float32)
            metrics = {
                "loss": loss,
                "gen_loss": tf.cast(out["gen_loss_sum"], tf.float32),
                "gen_accuracy": tf.cast(out["gen_accuracy"], tf.float32) * w_gen,
                "gen_weight": w_gen,
                "disc_loss": tf.cast(out["disc_loss_sum"], tf.float32),
                "disc_accuracy": tf.cast(out["disc_accuracy"], tf.float32) * w_disc,
                "disc_weight": w_disc,
                "auc_pos": pos, "auc_neg": neg,
            }
            return grads, metrics

        compute_fn = tf.function(compute, jit_compile=True if self.jit_compile else None)

        def replica_step(batch, step):
            ctx = tf.distribute.get_replica_context()
            # Global denominators first (cheap, from input_mask): every replica's loss is then its
            # share of the global mean, and losses and gradients sum to the one-device ones.
            local = pretrainer.loss_denominators(batch)
            totals = ctx.all_reduce(sum_op, tf.stack([tf.cast(local["gen"], tf.float32),
                                                      tf.cast(local["disc"], tf.float32)]))
            grads, metrics = compute_fn(batch, step, totals[0], totals[1])
            present = [i for i, g in enumerate(grads) if g is not None]
            dense = [grads[i] for i in present]
            if reduce_in_optimizer:
                # AdamWeightDecay sums the replicas' gradients and clips the sum itself: one
                # all-reduce. The norm logged is the replicas' mean (exact on one device).
                optimizer.apply(grads, variables)
                metrics["grad_norm"] = tf.linalg.global_norm(dense) / num_replicas
                return metrics
            if num_replicas > 1:
                dense = ctx.all_reduce(sum_op, dense)
            if loss_scaled:
                scale = tf.cast(optimizer.dynamic_scale, tf.float32)
                dense = [g / scale for g in dense]
            if hp.clip_norm:
                dense, grad_norm = tf.clip_by_global_norm(dense, hp.clip_norm)
            else:
                grad_norm = tf.linalg.global_norm(dense)
            # The optimizer sums gradients over replicas again: hand it 1/N of the total each.
            factor = (scale if loss_scaled else 1.0) / num_replicas
            if loss_scaled or num_replicas > 1:
                dense = [g * factor for g in dense]
            final = [None] * len(grads)
            for i, g in zip(present, dense):
                final[i] = g
            optimizer.apply(final, variables)

            metrics["grad_norm"] = grad_norm / num_replicas
            return metrics

        def train_step(iterator):
            batch = next(iterator)
            step = self.step.read_value()
            per_replica = strategy.run(replica_step, args=(batch, step))
            sums = {k: strategy.reduce(sum_op, v, axis=None) for k, v in per_replica.items()}
            self.step.assign_add(1)
            self.examples.assign_add(hp.train_batch_size)
            return sums

        return tf.function(train_step)

    # ------------------------------------------------------------------ state
    def _checkpoint_dir(self):
        if self.chief:
            return os.path.join(self.model_dir, CHECKPOINT_DIR)
        # Non-chief workers must save too (collectives), into a scratch directory.
        task_type, task_index, _ = dist.task_info()
        return os.path.join(self.model_dir, ".workers", f"{task_type}_{task_index}")

    def _restore(self):
        latest = tf.train.latest_checkpoint(os.path.join(self.model_dir, CHECKPOINT_DIR))
        if latest is None:
            return None
        try:
            status = self.checkpoint.restore(latest)
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TrainingError(f"the checkpoint {latest} does not match this configuration "
                                f"(another model size, vocab or precision?): {first[:300]}") \
                from None
        return latest

    def _start_phase(self):
        """After a restore with another max_seq_length: a new data phase (paper app. 6.2)."""
        old = int(self.seq_length.numpy())
        new = self.hp.max_seq_length
        if old == new:
            return
        if new > old:
            table = self._weight_map().get("electra/embeddings/position_embeddings")
            if table is None:
                raise TrainingError("cannot find electra/embeddings/position_embeddings to extend")
            value = np.asarray(table.numpy())
            reps = -(-new // old)
            value[old:new] = np.tile(value[:old], (reps, 1))[:new - old]
            table.assign(value)
            self.log(f"max_seq_length {old} -> {new}: position embeddings {old}..{new - 1} "
                     f"initialised by copying the trained rows 0..{old - 1}")
        else:
            self.log(f"max_seq_length {old} -> {new}")
        self.seq_length.assign(new)
        self.examples.assign(0)  # a new data stream (other TFRecords) starts from its beginning

    def _export(self):
        if not self.chief:
            return
        for part, fn in (("discriminator", self.pretrainer.export_discriminator),
                         ("generator", self.pretrainer.export_generator)):
            final = os.path.join(self.model_dir, part)
            tmp = os.path.join(self.model_dir, f".{part}.tmp-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            fn(tmp, "keras")
            _atomic_replace_dir(tmp, final)

    def _save(self, manager):
        path = manager.save(checkpoint_number=int(self.step.numpy()))
        if not self.chief:
            shutil.rmtree(self._checkpoint_dir(), ignore_errors=True)
        elif self.hp.export_on_save:
            self._export()
        return path

    # ------------------------------------------------------------------ the loop
    def train(self):
        hp = self.hp
        t_start = time.time()
        self.build()
        if self.chief:
            os.makedirs(self.model_dir, exist_ok=True)
        restored = self._restore()
        resumed_step = int(self.step.numpy())
        if restored:
            self._start_phase()
            self.log(f"resumed from {restored} at step {resumed_step}")
        if self.chief:
            hp.to_json(os.path.join(self.model_dir, HPARAMS_FILE))
        manager = tf.train.CheckpointManager(
            self.checkpoint, self._checkpoint_dir(), max_to_keep=hp.keep_checkpoint_max,
            checkpoint_name=CHECKPOINT_NAME)
        writer = (tf.summary.create_file_writer(os.path.join(self.model_dir, "train"))
                  if self.chief else tf.summary.create_noop_writer())

        examples = int(self.examples.numpy())
        if examples % hp.train_batch_size:
            self.log(f"note: {examples} examples consumed is not a multiple of the batch size "
                     f"{hp.train_batch_size}; resuming from the batch boundary below it")
        dataset, _ = self._dataset(examples)
        iterator = iter(dataset)
        train_step = self._make_train_step()
        self.log(f"{hp.model_name}: {hp.model_size} ConvBERT, {self.num_params:,} trainable "
                 f"parameters (discriminator + generator); {dist.describe(self.strategy)}; "
                 f"batch {hp.train_batch_size} x {hp.max_seq_length}; precision {hp.precision}; "
                 f"jit_compile {self.jit_compile}; steps {resumed_step} -> {hp.num_train_steps}")

        keys = ("loss", "gen_loss", "gen_accuracy", "gen_weight", "disc_loss", "disc_accuracy",
                "disc_weight", "grad_norm")
        window = {k: 0.0 for k in keys}
        window_pos = np.zeros(AUC_BINS)
        window_neg = np.zeros(AUC_BINS)
        window_steps = 0
        window_start = time.time()
        history = []
        first_step_time = None
        step = resumed_step
        last_saved = restored
        train_start = time.time()
        stop_message = None
        while step < hp.num_train_steps:
            sums = train_step(iterator)
            values = {k: float(sums[k].numpy()) for k in keys}
            step += 1
            if first_step_time is None:
                first_step_time = time.time() - train_start
            total = values["loss"]
            grad_ok = np.isfinite(values["grad_norm"]) or self.loss_scaled
            if not np.isfinite(total) or not grad_ok:
                what = "loss" if not np.isfinite(total) else "gradient norm"
                bad = total if not np.isfinite(total) else values["grad_norm"]
                stop_message = (f"non-finite {what} ({bad}) at step {step}: stopped without "
                                f"saving; the last good checkpoint is "
                                f"{last_saved or 'none (no checkpoint was written)'}; try a lower "
                                "learning_rate or check the data")
                break
            for k in keys:
                window[k] += values[k]
            window_pos += sums["auc_pos"].numpy()
            window_neg += sums["auc_neg"].numpy()
            window_steps += 1
            if step % hp.log_every_n_steps == 0 or step == hp.num_train_steps:
                now = time.time()
                record = self._log_window(step, window, window_pos, window_neg, window_steps,
                                          now - window_start, writer)
                history.append(record)
                window = {k: 0.0 for k in keys}
                window_pos[:] = 0
                window_neg[:] = 0
                window_steps = 0
                window_start = now
            if step % hp.save_checkpoints_steps == 0 or step == hp.num_train_steps:
                last_saved = self._save(manager)
        writer.flush()
        if stop_message:
            raise TrainingError(stop_message)
        if last_saved is None or int(last_saved.rsplit("-", 1)[-1]) != step:
            last_saved = self._save(manager)  # nothing left to train: make sure the state is out
        if not hp.export_on_save:
            self._export()
        wall = time.time() - t_start
        steps_run = step - resumed_step
        train_time = time.time() - train_start
        summary = {
            "model_name": hp.model_name, "model_size": hp.model_size,
            "model_dir": self.model_dir, "global_step": step, "resumed_from_step": resumed_step,
            "steps_this_run": steps_run, "train_batch_size": hp.train_batch_size,
            "max_seq_length": hp.max_seq_length, "precision": hp.precision,
            "distribution": dist.describe(self.strategy), "jit_compile": self.jit_compile,
            "trainable_parameters": self.num_params, "last_checkpoint": last_saved,
            "discriminator": os.path.join(self.model_dir, "discriminator"),
            "generator": os.path.join(self.model_dir, "generator"),
            "wall_seconds": round(wall, 2), "train_seconds": round(train_time, 2),
            "first_step_seconds": round(first_step_time or 0.0, 2),
            "sequences_per_second": round(
                steps_run * hp.train_batch_size / max(train_time - (first_step_time or 0), 1e-9)
                if steps_run > 1 else 0.0, 2),
            "first": history[0] if history else None,
            "final": history[-1] if history else None,
            "history": history,
        }
        if self.chief:
            path = os.path.join(self.model_dir, SUMMARY_FILE)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(summary, f, indent=2)
            os.replace(path + ".tmp", path)
        return summary

    def _log_window(self, step, window, pos, neg, n_steps, seconds, writer):
        hp = self.hp
        gen = window["gen_loss"] / max(window["gen_weight"], 1e-6)
        gen_acc = window["gen_accuracy"] / max(window["gen_weight"], 1e-6)
        disc = window["disc_loss"] / max(window["disc_weight"], 1e-6)
        disc_acc = window["disc_accuracy"] / max(window["disc_weight"], 1e-6)
        total = hp.gen_weight * gen + hp.disc_weight * disc if hp.electra_objective else gen
        auc = auc_from_histograms(pos, neg)
        lr = float(np.asarray(self.schedule(step - 1)))
        seq_s = n_steps * hp.train_batch_size / max(seconds, 1e-9)
        eta = (hp.num_train_steps - step) * seconds / max(n_steps, 1)
        record = {"step": step, "loss": total, "gen_loss": gen, "gen_accuracy": gen_acc,
                  "disc_loss": disc, "disc_accuracy": disc_acc, "disc_auc": auc,
                  "learning_rate": lr, "grad_norm": window["grad_norm"] / max(n_steps, 1),
                  "sequences_per_second": seq_s}
        self.log(f"step {step}/{hp.num_train_steps} | loss {total:.4f} | gen loss {gen:.4f} "
                 f"acc {gen_acc:.3f} | disc loss {disc:.4f} acc {disc_acc:.3f} auc {auc:.3f} | "
                 f"lr {lr:.3g} | {seq_s:.1f} seq/s | ETA {_fmt_eta(eta)}")
        with writer.as_default(step=step):
            for k, v in record.items():
                if k != "step" and np.isfinite(v):
                    write_scalar(k, v, step)
        return record
