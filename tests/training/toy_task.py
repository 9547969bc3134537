"""A toy regression Task of the training cores (training/task.py) for tests that run the JAX core
in a subprocess: a two-layer model, fixed batches of 4 examples, the mean squared error and the
sum of absolute errors as its metric. Imports no TensorFlow."""
import keras
import numpy as np

from training.task import Task


def toy_batches(num_batches, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(4, 3)).astype("float32"),
             "t": rng.normal(size=(4,)).astype("float32")} for _ in range(num_batches)]


class Toy(keras.Model):
    def __init__(self):
        super().__init__()
        self.d1 = keras.layers.Dense(8, activation="tanh")
        self.d2 = keras.layers.Dense(1)

    def call(self, batch, step=0, training=False):
        return {"y": self.d2(self.d1(batch["x"]))[:, 0]}


class ToyTask(Task):
    """Trains `Toy` on `batches` (one pass, in order; `host_batches(skip)` resumes)."""

    def __init__(self, batches):
        self.batches = batches

    def build(self):
        keras.utils.set_random_seed(0)
        self.model = Toy()
        self.model({"x": self.batches[0]["x"]})
        return self.model

    def named_variables(self):
        return {v.path: v for v in self.model.trainable_variables}

    def host_batches(self, skip):
        return iter(self.batches[skip:])

    def compute(self, batch, step, denominators):
        err = self.model(batch, training=True)["y"] - batch["t"]
        return keras.ops.mean(err ** 2), {"abs_err": keras.ops.sum(keras.ops.abs(err))}

    def describe(self, record):
        return ""
