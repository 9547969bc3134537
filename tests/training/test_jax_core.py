"""training/jax_core.py's step options on a toy regression Task (KERAS_BACKEND=jax, in a subprocess
with `tensorflow` unimportable): a learning rate fed from the host trains exactly as the schedule
traced into the optimizer; steps_per_loop > 1 gives the same run as one step per call; after_save
sees every save point with the current values; a precompiled step is the jitted step."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

RUN = r"""
import json, sys
sys.modules["tensorflow"] = None
import numpy as np
import keras
from training import optimization
from training.jax_core import JaxTrainingCore, host_learning_rate, precompile
from training.settings import TrainSettings
from training.task import Task


class Toy(keras.Model):
    def __init__(self):
        super().__init__()
        self.d1 = keras.layers.Dense(8, activation="tanh")
        self.d2 = keras.layers.Dense(1)

    def call(self, batch, step=0, training=False):
        return {"y": self.d2(self.d1(batch["x"]))[:, 0]}


class ToyTask(Task):
    # A regression Task: what the core trains (training/task.py).

    def build(self):
        keras.utils.set_random_seed(0)
        self.model = Toy()
        self.model({"x": data[0]["x"]})
        return self.model

    def named_variables(self):
        return {v.path: v for v in self.model.trainable_variables}

    def host_batches(self, skip):
        return iter(data[skip:])

    def compute(self, batch, step, denominators):
        err = self.model(batch, training=True)["y"] - batch["t"]
        return keras.ops.mean(err ** 2), {"abs_err": keras.ops.sum(keras.ops.abs(err))}

    def describe(self, record):
        return ""


rng = np.random.default_rng(0)
data = [{"x": rng.normal(size=(4, 3)).astype("float32"),
         "t": rng.normal(size=(4,)).astype("float32")} for _ in range(12)]


def run(host, steps_per_loop, pre=False):
    settings = TrainSettings(total_steps=12, batch_size=4, learning_rate=0.05, warmup_steps=3,
                             weight_decay_rate=0.01, clip_norm=1.0, log_every=4, save_every=4,
                             steps_per_loop=steps_per_loop)
    task = ToyTask()
    core = JaxTrainingCore(settings, log=lambda *_: None).build(task, host_learning_rate=host)
    model = task.model
    step = core.task_step(host_learning_rate=host)
    if pre:
        precompile([("toy", step, (core.task_state(), data[0], np.int64(0), np.float32(0)))],
                   log=lambda *_: None)
        assert step.compiled is not None
    saves = []
    summary = core.fit_task(train_step=step, after_save=lambda k: saves.append(
        [k, float(np.asarray(model.d2.kernel.value).sum())]))
    return {"history": [[h["step"], h["loss"], h["abs_err"], h["learning_rate"]]
                        for h in summary["history"]],
            "saves": saves,
            "weights": [np.asarray(v.value).tolist() for v in model.trainable_variables]}


out = {"schedule": run(False, 1), "host": run(True, 1), "host_loop4": run(True, 4),
       "precompiled": run(True, 4, pre=True),
       "lr": [float(host_learning_rate(optimization.linear_warmup_linear_decay(0.05, 3, 12), s))
              for s in range(12)],
       "lr_ops": [float(np.asarray(optimization.linear_warmup_linear_decay(0.05, 3, 12)(s)))
                  for s in range(12)]}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("jax")
    path = tmp_path_factory.mktemp("jax_core") / "runs.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", RUN, str(path)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(path.read_text())


def test_host_learning_rate_equals_the_traced_schedule(runs):
    assert runs["lr"] == runs["lr_ops"]       # the same float32 operations, bit for bit
    import numpy as np
    for a, b in zip(runs["schedule"]["history"], runs["host"]["history"]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for a, b in zip(runs["schedule"]["weights"], runs["host"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_steps_per_loop_is_the_same_run(runs):
    assert runs["host_loop4"]["history"] == runs["host"]["history"]
    assert runs["host_loop4"]["weights"] == runs["host"]["weights"]
    assert [s[0] for s in runs["host"]["history"]] == [4, 8, 12]


def test_after_save_sees_every_save_point_with_current_values(runs):
    saves = runs["host"]["saves"]
    assert [s[0] for s in saves] == [4, 8, 12]
    assert len({s[1] for s in saves}) == 3             # the values moved between save points
    import numpy as np
    final_kernel_sum = float(np.sum(runs["host"]["weights"][2]))
    assert saves[-1][1] == pytest.approx(final_kernel_sum, rel=1e-6)


def test_precompiled_step_is_the_jitted_step(runs):
    assert runs["precompiled"]["history"] == runs["host_loop4"]["history"]
    assert runs["precompiled"]["weights"] == runs["host_loop4"]["weights"]
