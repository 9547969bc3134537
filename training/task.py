"""`Task`: what one training objective supplies to the training core (training/core.py).

The core calls, in this order:

* `build()` once, inside `strategy.scope()` and after the precision policy is set: create the
  models and return the object whose variables are checkpointed (a keras.Model or any trackable);
* `named_variables()`: {official name: variable} of everything trained. The names drive weight
  decay exclusion ("LayerNorm", "bias") and layer-wise learning rates (model/optimization.py);
* `dataset(skip_batches)`: a tf.data.Dataset of GLOBAL batches (the core splits them over the
  replicas), starting `skip_batches` batches in (exact resume);
* per step and replica, inside a tf.function: `loss_denominators(batch)` (summed over replicas
  before the step; None when the loss needs none) and `compute(batch, step, denominators)`, which
  returns this replica's share of the global loss and a dict of float32 metric SUMS;
* per log window: `summarize(sums, num_steps)` turns the metric sums (NumPy, summed over replicas
  and steps; the core adds `loss` and `grad_norm`) into a record {name: float}, and
  `describe(record)` into the task's part of the progress line;
* at every save (chief only): `export(model_dir)`.

`extra_state()` adds task state to the checkpoint (e.g. the RNG of masking, the sequence length).
"""


class Task:
    label = ""          # prefix of the progress line ("sst" -> "sst: step 3/9 ...")
    scalar_prefix = ""  # prefix of the TensorBoard tags ("train/")

    def build(self):
        raise NotImplementedError

    def named_variables(self):
        raise NotImplementedError

    def dataset(self, skip_batches):
        raise NotImplementedError

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
