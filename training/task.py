"""`Task`: what one training objective supplies to a training core. Both cores run the same Task
objects: TensorFlow's (training/core.py: tf.distribute, tf.data, TPU) and JAX's
(training/jax_core.py: one jitted step, NumPy input, no TensorFlow).

A core calls, in this order:

* `build()` once, after the precision policy is set (inside `strategy.scope()` on TensorFlow):
  create the models and return the object whose variables TensorFlow checkpoints (a keras.Model
  or any trackable);
* `named_variables()`: {official name: variable} of everything trained. The names drive weight
  decay exclusion ("LayerNorm", "bias") and layer-wise learning rates (training/settings.py
  `build_optimizer`); `state_variables()`: the non-trainable variables a step reads or updates
  (the RNG state of masking, sampling and dropout), which the JAX core threads through its
  step and checkpoints;
* the input, the one per-backend hook: `dataset(skip_batches)`, a tf.data.Dataset of GLOBAL
  batches for TensorFlow's core (it splits them over the replicas), or `host_batches(
  skip_batches)`, an iterator of the same global batches as dicts of NumPy arrays for the JAX
  core; both start `skip_batches` batches in (exact resume);
* per step, traced (tf.function per replica; jax.jit with the variables swapped for the
  step's values): `loss_denominators(batch)` (summed over replicas before the step on
  TensorFlow; None when the loss is a mean over the batch's rows) and `compute(batch, step,
  denominators)`, which returns this replica's share of the global loss and a dict of float32
  metric SUMS (with None denominators: the mean loss and metrics of the replica's rows, which
  TensorFlow's core divides by the number of replicas, each holding an equal share of the
  fixed-shape global batch; the JAX core's one program sees the global batch). Written with
  keras.ops only, so one `compute` serves both cores;
* per log window: `summarize(sums, num_steps)` turns the metric sums (NumPy, summed over replicas
  and steps; the core adds `loss` and `grad_norm`) into a record {name: float}, and
  `describe(record)` into the task's part of the progress line;
* at every save (chief only): `export(model_dir)`.

`extra_state()` adds task state to TensorFlow's checkpoint (e.g. the sequence length of a
pre-training phase); the JAX core checkpoints the trainable, state and optimizer variables.
"""


class Task:
    label = ""          # prefix of the progress line ("sst" -> "sst: step 3/9 ...")
    scalar_prefix = ""  # prefix of the TensorBoard tags ("train/")

    def build(self):
        raise NotImplementedError

    def named_variables(self):
        raise NotImplementedError

    def state_variables(self):
        return []

    def dataset(self, skip_batches):
        raise NotImplementedError

    def host_batches(self, skip_batches):
        raise NotImplementedError(f"{type(self).__name__} has no NumPy input (host_batches): "
                                  "it trains on TensorFlow's core only")

    def loss_denominators(self, batch):
        return None

    def compute(self, batch, step, denominators):
        raise NotImplementedError

    def summarize(self, sums, num_steps):
        """Default: every metric averaged over the steps of the window."""
        return {k: float(v) / max(num_steps, 1) for k, v in sums.items()}

    def describe(self, record):
        return f"loss {record['loss']:.4f}"

    def extra_state(self):
        return {}

    def export(self, model_dir):
        pass
