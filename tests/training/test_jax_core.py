"""training/jax_core.py on a toy regression Task (KERAS_BACKEND=jax, in a subprocess with
`tensorflow` unimportable): the learning rate computed on the device from the schedule's
arguments is the host's float32 schedule bit for bit and trains as the schedule traced into a
Keras optimizer; steps_per_loop > 1 (one compiled call of K steps, padded when fewer are due)
gives the same run as one step per call; after_save sees every save point with the current
values; a precompiled program is the jitted one; the donated state never invalidates the Keras
variables, and a run stopped by an error leaves them at its newest state."""
import pytest

from tests.conftest import run_jax_script

RUN = r"""
import json, sys
sys.modules["tensorflow"] = None
import numpy as np
import keras
from training import optimization
import jax
from training.jax_core import JaxTrainingCore
from training.jax_programs import precompile
from training.settings import TrainSettings
from tests.training.toy_task import ToyTask, toy_batches


data = toy_batches(12)


def run(steps_per_loop, pre=False, log_every=4):
    settings = TrainSettings(total_steps=12, batch_size=4, learning_rate=0.05, warmup_steps=3,
                             weight_decay_rate=0.01, clip_norm=1.0, log_every=log_every,
                             save_every=4, steps_per_loop=steps_per_loop)
    task = ToyTask(data)
    core = JaxTrainingCore(settings, log=lambda *_: None).build(task)
    model = task.model
    step = core.train_program()
    if pre:
        # In the background: the first call waits for the compile, then runs what it made.
        precompile([("toy", step, core.example_args(data[0]))], log=lambda *_: None,
                   wait=False)
        assert step.pending is not None
    saves = []
    summary = core.fit_task(program=step, after_save=lambda k: saves.append(
        [k, float(np.asarray(model.d2.kernel.value).sum())]))
    if pre:
        assert step.pending is None and step.compiled is not None
    return {"history": [[h["step"], h["loss"], h["abs_err"], h["learning_rate"]]
                        for h in summary["history"]],
            "saves": saves,
            "weights": [np.asarray(v.value).tolist() for v in model.trainable_variables]}


def keras_schedule_run():
    # The reference: a Keras optimizer with the schedule traced in, stepped by hand.
    task = ToyTask(data)
    task.build()
    schedule = optimization.linear_warmup_linear_decay(0.05, 3, 12)
    opt = optimization.AdamWeightDecay(schedule, weight_decay_rate=0.01, clip_norm=1.0,
                                       name_map=task.named_variables())
    opt.build(task.model.trainable_variables)
    for batch in data:
        values = [v.value for v in task.model.trainable_variables]

        def loss(values):
            with keras.StatelessScope(state_mapping=list(zip(task.model.trainable_variables,
                                                             values))):
                return task.compute(batch, 0, None)[0]
        grads = jax.grad(loss)(values)
        new_values, new_opt = opt.stateless_apply([v.value for v in opt.variables], grads, values)
        for v, x in zip(task.model.trainable_variables, new_values):
            v.assign(x)
        for v, x in zip(opt.variables, new_opt):
            v.assign(x)
    return [np.asarray(v.value).tolist() for v in task.model.trainable_variables]


def stopped_run(steps, total_steps=12):
    # The input ends after `steps` batches of a 12-step run: the error leaves the variables at
    # the newest state (as TensorFlow's core leaves its own), not at their values before fit.
    settings = TrainSettings(total_steps=total_steps, batch_size=4, learning_rate=0.05,
                             warmup_steps=3, log_every=4, schedule_steps=12)
    task = ToyTask(data[:steps])
    core = JaxTrainingCore(settings, log=lambda *_: None).build(task)
    error = None
    try:
        core.fit_task()
    except RuntimeError as e:
        error = str(e)
    return {"error": error,
            "weights": [np.asarray(v.value).tolist() for v in task.model.trainable_variables]}


schedule = optimization.linear_warmup_linear_decay(0.05, 3, 12)
device_lr = jax.jit(lambda s, a: optimization.LinearWarmupLinearDecay.value_at(s, a))
out = {"loop1": run(1), "loop4": run(4), "loop3": run(3, log_every=6),
       "precompiled": run(4, pre=True), "keras": keras_schedule_run(),
       "stopped": stopped_run(5), "five_steps": stopped_run(5, total_steps=5),
       "lr": [float(schedule.host_value(s)) for s in range(14)],
       "lr_device": [float(device_lr(np.int32(s), schedule.arguments())) for s in range(14)]}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("jax")
    return run_jax_script(RUN, tmp_path_factory.mktemp("jax_core") / "runs.json")


def test_device_learning_rate_is_the_host_schedule(runs):
    assert runs["lr"] == runs["lr_device"]      # the same float32 operations, bit for bit
    assert [h[3] for h in runs["loop1"]["history"]] == [runs["lr"][s - 1] for s in (4, 8, 12)]


def test_the_core_trains_as_a_keras_optimizer_with_its_schedule(runs):
    import numpy as np
    for a, b in zip(runs["keras"], runs["loop1"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_steps_per_loop_is_the_same_run(runs):
    assert runs["loop4"]["history"] == runs["loop1"]["history"]
    assert runs["loop4"]["weights"] == runs["loop1"]["weights"]
    assert [s[0] for s in runs["loop1"]["history"]] == [4, 8, 12]
    # 3 steps per call with saves every 4: calls of 3, 1, 2, 2, 1, 3 steps (padded blocks).
    assert runs["loop3"]["weights"] == runs["loop1"]["weights"]
    assert runs["loop3"]["saves"] == runs["loop1"]["saves"]


def test_after_save_sees_every_save_point_with_current_values(runs):
    saves = runs["loop1"]["saves"]
    assert [s[0] for s in saves] == [4, 8, 12]
    assert len({s[1] for s in saves}) == 3             # the values moved between save points
    import numpy as np
    final_kernel_sum = float(np.sum(runs["loop1"]["weights"][2]))
    assert saves[-1][1] == pytest.approx(final_kernel_sum, rel=1e-6)


def test_precompiled_step_is_the_jitted_step(runs):
    assert runs["precompiled"]["history"] == runs["loop4"]["history"]
    assert runs["precompiled"]["weights"] == runs["loop4"]["weights"]


def test_an_error_leaves_the_variables_at_the_newest_state(runs):
    assert "input ended" in runs["stopped"]["error"]
    assert runs["five_steps"]["error"] is None
    assert runs["stopped"]["weights"] == runs["five_steps"]["weights"]
