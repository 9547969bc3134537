"""The training core: one step loop for every objective (see training/task.py for the Task side).

    core = TrainingCore(task, TrainSettings(total_steps=1000, batch_size=128, learning_rate=5e-4,
                                            warmup_steps=100), strategy)
    core.build()                                    # precision, models, optimizer, counters
    restored = core.restore(checkpoint_dir)         # exact resume (None: a fresh run)
    result = core.fit(checkpoint_dir=..., log_dir=..., export_dir=...)

* Precision: the Keras policy is set before the task builds its models ("fp32", "bf16" =
  mixed_bfloat16, "mixed_float16" with dynamic loss scaling).
* Optimizer: ELECTRA's AdamW without bias correction (training/optimization.py) with the linear
  warm-up / decay schedule, weight decay off for LayerNorm / bias, optional layer-wise LR decay,
  gradients clipped to global norm `clip_norm`.
* The step: `strategy.run` over each replica's share of the GLOBAL batch. Losses that need global
  denominators (masked positions, real tokens) get them summed over replicas first, so every
  replica's loss is its share of the one-device loss and 1, 2 or N replicas (or workers) train
  alike up to float rounding. Gradients are summed over replicas and clipped once; the
  forward/backward of one replica has no collectives, so it can be XLA-compiled (`jit_compile`,
  default on for one GPU).
* State: tf.train.Checkpoint(model, optimizer, step, examples consumed, task state), keep-N. A
  rerun restores it and the task's dataset skips the batches already consumed: in deterministic
  mode a resumed run is bit-identical to one never interrupted (tests/pretrain/test_resume.py).
* Host loop: `steps_per_loop` = k runs up to k steps inside one compiled call (a tf.while over
  the step), as ELECTRA's `iterations_per_loop`: one host round-trip per k steps keeps a TPU fed.
  A call never crosses a log, save or final step, and the parameters after any number of steps
  equal those of k = 1 (tests/training/test_core.py).
* The loop (training/loop.py, shared with the JAX core): a progress line every `log_every`
  steps (task fields, lr, seq/s, elapsed, ETA), TensorBoard scalars, a history of window
  records, and a non-finite guard: a non-finite loss (or gradient norm, without loss scaling)
  stops the run before any save, so the last good checkpoint is never overwritten.
* fp16 (mixed_float16): Keras' LossScaleOptimizer skips a step whose gradients are non-finite
  (weights, Adam moments and its `iterations`, hence the learning-rate schedule, untouched; the
  step counter and the data stream move on) and halves the scale. A scale driven below 1
  (training/loop.py MIN_LOSS_SCALE) stops the run as a non-finite loss does.
"""
import dataclasses
import time

import numpy as np
import tensorflow as tf

from training import distribution
from training.loop import TrainingError, run_loop, steps_this_call
from training.settings import set_precision, zero_optimizer_state
from training.state import CheckpointSaver, finish_run, restore_latest
from training.summaries import scalar_writer


class TrainingCore:
    def __init__(self, task, settings, strategy=None, log=print):
        self.task = task
        self.settings = settings
        self.strategy = strategy or tf.distribute.get_strategy()
        self.log = log
        self.chief = distribution.is_chief(self.strategy)
        self.num_replicas = self.strategy.num_replicas_in_sync
        if settings.batch_size % self.num_replicas:
            raise TrainingError(f"train_batch_size {settings.batch_size} is not divisible by the "
                                f"{self.num_replicas} replicas")
        self.loss_scaled = settings.precision == "mixed_float16"
        jit = settings.jit_compile
        if jit is None:
            jit = bool(tf.config.list_physical_devices("GPU")) and self.num_replicas == 1
        self.jit_compile = bool(jit)
        self.optimizer = self.schedule = None
        self._train_step = None
        self._optimizer_steps = None

    # ------------------------------------------------------------------ building
    def build(self):
        set_precision(self.settings.precision)
        with self.strategy.scope():
            self.model = self.task.build()
            self.named_variables = dict(self.task.named_variables())
            self.variables = list(self.named_variables.values())
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
            self._build_optimizer(self.settings.schedule_length)
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self.step, examples=self.examples,
            **self.task.extra_state())
        self.num_params = int(sum(np.prod(v.shape) for v in self.variables))
        return self

    def _build_optimizer(self, total_steps):
        import keras
        from training.settings import build_optimizer
        optimizer, self.schedule = build_optimizer(self.settings, self.named_variables,
                                                   total_steps)
        if self.loss_scaled:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(self.variables)
        self.optimizer = optimizer
        self._optimizer_steps = total_steps
        self._train_step = None

    def set_total_steps(self, total_steps):
        """Another schedule length (fine-tuning: steps follow the task's example count)."""
        if total_steps != self._optimizer_steps:
            self.settings = dataclasses.replace(self.settings, total_steps=int(total_steps))
            with self.strategy.scope():
                self._build_optimizer(int(total_steps))
            self.checkpoint = tf.train.Checkpoint(
                model=self.model, optimizer=self.optimizer, step=self.step,
                examples=self.examples, **self.task.extra_state())

    def reset(self):
        """Optimizer state (Adam moments, iterations, loss scale) and counters back to zero, on the
        same variables, so the traced step is reused (fine-tuning trials)."""
        optimizer = self.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        zero_optimizer_state(inner)
        if inner is not optimizer:   # LossScaleOptimizer
            optimizer.dynamic_scale.assign(optimizer.initial_scale)
            optimizer.step_counter.assign(0)
        self.step.assign(0)
        self.examples.assign(0)

    # ------------------------------------------------------------------ state
    def restore(self, checkpoint_dir):
        """Restore the newest checkpoint of `checkpoint_dir` (None when there is none)."""
        return restore_latest(self.checkpoint, checkpoint_dir)

    def _save(self, saver, export_dir):
        path = saver.save(int(self.step.numpy()))
        if self.chief and export_dir is not None and self.settings.export_on_save:
            self.task.export(export_dir)
        return path

    # ------------------------------------------------------------------ the step
    def _iterator(self, skip_batches):
        ds = self.task.dataset(skip_batches)
        options = tf.data.Options()
        options.deterministic = True
        # Every worker sees the same global batches and keeps its replicas' rows of each one, so
        # N workers train on exactly the examples one device would.
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        return iter(self.strategy.experimental_distribute_dataset(ds.with_options(options)))

    def train_step(self):
        """The traced step: `train_step(iterator)` -> {metric: sum over replicas}."""
        if self._train_step is None:
            self._train_step = self._make_train_step()
        return self._train_step

    def _make_train_step(self):
        from training import optimization
        s = self.settings
        task, strategy, optimizer = self.task, self.strategy, self.optimizer
        variables, loss_scaled, num_replicas = self.variables, self.loss_scaled, self.num_replicas
        sum_op = tf.distribute.ReduceOp.SUM
        # The toolkit's optimizer clips AFTER the cross-replica sum (one all-reduce, clipped like
        # one device). Any other optimizer (or loss scaling, which must unscale before clipping)
        # gets the gradients all-reduced and clipped here first.
        reduce_in_optimizer = (not loss_scaled and
                               isinstance(optimizer, optimization.AdamWeightDecay)
                               and optimizer.clip_norm == (s.clip_norm or None))
        # Embedding gradients are IndexedSlices. Handed to AdamWeightDecay as they are, the clip
        # norm is taken over the slices, as the official code's tf.clip_by_global_norm does (a
        # token seen twice counts twice), and the update on their dense sum. XLA and the
        # all-reduce below need dense tensors.
        densify = self.jit_compile or not reduce_in_optimizer

        def compute(batch, step, denominators):
            """Forward + backward of one replica (no collectives inside: XLA-compilable)."""
            with tf.GradientTape() as tape:
                loss, metrics = task.compute(batch, step, denominators)
                loss = tf.cast(loss, tf.float32)
                if denominators is None and num_replicas > 1:
                    # A task without denominators returns the mean over its replica's rows,
                    # and the replicas hold equal shares of the fixed-shape global batch: 1/N of
                    # each is its share of the global mean (loss, gradients and the metrics,
                    # all summed over replicas below).
                    loss = loss / num_replicas
                    metrics = {k: tf.cast(v, tf.float32) / num_replicas
                               for k, v in metrics.items()}
                scaled = optimizer.scale_loss(loss) if loss_scaled else loss
            grads = tape.gradient(scaled, variables)
            if densify:
                grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
            metrics = {k: tf.cast(v, tf.float32) for k, v in metrics.items()}
            metrics["loss"] = loss
            return grads, metrics

        # Only XLA needs the replica's forward/backward as a function of its own; nested without
        # it, grappler may fuse the graph differently (float-rounding-level changes).
        compute_fn = tf.function(compute, jit_compile=True) if self.jit_compile else compute

        def replica_step(batch, step):
            ctx = tf.distribute.get_replica_context()
            denominators = task.loss_denominators(batch)
            if denominators is not None:
                # Global denominators first (cheap): every replica's loss is then its share of
                # the global mean, and losses and gradients sum to the one-device ones.
                keys = sorted(denominators)
                totals = ctx.all_reduce(sum_op, tf.stack(
                    [tf.cast(denominators[k], tf.float32) for k in keys]))
                denominators = {k: totals[i] for i, k in enumerate(keys)}
            grads, metrics = compute_fn(batch, step, denominators)
            present = [i for i, g in enumerate(grads) if g is not None]
            dense = [grads[i] for i in present]
            if reduce_in_optimizer:
                # AdamWeightDecay sums the replicas' gradients and clips the sum itself: one
                # all-reduce. Each replica's gradient is its share of the global one, so the
                # norm logged (summed over replicas) is the sum of the shares' norms: exact on
                # one device, an upper bound of the global norm on several.
                optimizer.apply(grads, variables)
                metrics["grad_norm"] = tf.linalg.global_norm(dense)
                return metrics
            if num_replicas > 1:
                dense = ctx.all_reduce(sum_op, dense)
            if loss_scaled:
                scale = tf.cast(optimizer.dynamic_scale, tf.float32)
                dense = [g / scale for g in dense]
            if s.clip_norm:
                dense, grad_norm = tf.clip_by_global_norm(dense, s.clip_norm)
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

        batch_size = s.batch_size

        # Not converted by AutoGraph: the step has no tensor-dependent Python control flow (a
        # tensor used as a Python bool fails loudly at trace time), and conversion doubled the
        # trace, seconds per training run (measured: a tiny elastic pre-training 34 s -> 18 s).
        # As Keras' own trainer does.
        @tf.autograph.experimental.do_not_convert
        def train_step(iterator):
            batch = next(iterator)
            step = self.step.read_value()
            per_replica = strategy.run(replica_step, args=(batch, step))
            sums = {k: strategy.reduce(sum_op, v, axis=None) for k, v in per_replica.items()}
            self.step.assign_add(1)
            self.examples.assign_add(batch_size)
            return sums

        if s.steps_per_loop <= 1:
            return tf.function(train_step)

        def train_loop(iterator, num_steps):
            """`num_steps` (a tensor: one trace for every count) steps; their metric sums."""
            sums = train_step(iterator)
            for _ in tf.range(num_steps - 1):
                values = train_step(iterator)
                sums = {k: sums[k] + values[k] for k in sums}
            return sums

        return tf.function(train_loop)

    # ------------------------------------------------------------------ the loop
    def fit(self, checkpoint_dir=None, scratch_dir=None, log_dir=None, export_dir=None,
            last_checkpoint=None, summary_path=None, summary_extra=None, started_at=None,
            writer=None):
        """Train from the current step to `settings.total_steps`; returns the run summary.

        checkpoint_dir: where checkpoints go (None: none, e.g. fine-tuning trials); scratch_dir:
        where a non-chief worker saves instead; log_dir: TensorBoard scalars (chief only), or
        `writer`, a ScalarWriter the caller keeps open (fine-tuning adds dev scalars to it);
        export_dir: handed to task.export at every save and at the end; last_checkpoint: what
        `restore` returned (named in the non-finite message); summary_path: the summary JSON
        (chief only), with `summary_extra` merged in; started_at: when the user's wait began
        (time.time(); default now), for the summary's wall_seconds."""
        s = self.settings
        started_at = time.time() if started_at is None else started_at
        start_step = int(self.step.numpy())
        examples = int(self.examples.numpy())
        if examples % s.batch_size:
            self.log(f"note: {examples} examples consumed is not a multiple of the batch size "
                     f"{s.batch_size}; resuming from the batch boundary below it")
        iterator = self._iterator(examples // s.batch_size)
        train_step = self.train_step()

        saver = None
        if checkpoint_dir is not None:
            saver = CheckpointSaver(self.checkpoint, checkpoint_dir, s.keep_checkpoints,
                                    scratch_dir=None if self.chief else scratch_dir)

        def save(step, stopping=False):
            return self._save(saver, export_dir)

        def run_steps(step):
            if s.steps_per_loop > 1:
                num = steps_this_call(s, step)
                out = train_step(iterator, tf.constant(num, tf.int32))
            else:
                num, out = 1, train_step(iterator)
            values = {k: v.numpy() for k, v in out.items()}
            if self.loss_scaled:  # fp16: the scale after this call (run_loop stops on collapse)
                values["loss_scale"] = float(self.optimizer.dynamic_scale.numpy())
            return num, values
        with scalar_writer(writer, log_dir if self.chief else None) as writer:
            result = run_loop(s, start_step, run_steps, summarize=self.task.summarize,
                              describe=self.task.describe, schedule=self.schedule,
                              save=None if saver is None else save,
                              last_saved=last_checkpoint, log=self.log, label=self.task.label,
                              writer=writer, scalar_prefix=self.task.scalar_prefix,
                              loss_scaled=self.loss_scaled)
        # With export_on_save the last save exported; a rerun with nothing left to train exports
        # again, which repairs an export that a kill interrupted after the final checkpoint.
        if self.chief and export_dir is not None and (
                not s.export_on_save or result.step == result.start_step):
            self.task.export(export_dir)
        return finish_run(s, result, started_at, self.num_params, extra={
            "distribution": distribution.describe(self.strategy),
            "jit_compile": self.jit_compile, **(summary_extra or {})},
            summary_path=summary_path, writes=self.chief)
