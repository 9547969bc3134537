"""training/loop.py, the host loop both training cores run through, with a fake step: when it
logs, saves and stops, what its records and summary hold, and that it needs no TensorFlow."""
import os
import subprocess
import sys

import numpy as np
import pytest

from training.loop import TrainingError, run_loop, run_summary, steps_this_call
from training.settings import TrainSettings


def settings(**kw):
    base = dict(total_steps=7, batch_size=4, learning_rate=0.1, log_every=2, save_every=3)
    base.update(kw)
    return TrainSettings(**base)


def fake_steps(losses, calls):
    def run_steps(step):
        calls.append(step)
        return 1, {"loss": np.float32(losses[step]), "grad_norm": np.float32(2.0)}
    return run_steps


def run(s, start=0, losses=None, last_saved=None, save=True):
    losses = losses or [float(i) for i in range(s.total_steps)]
    calls, saved, lines = [], [], []

    def do_save(step):
        saved.append(step)
        return f"dir/ckpt-{step}"
    result = run_loop(s, start, fake_steps(losses, calls),
                      summarize=lambda w, n: {"mean": float(w["loss"]) / n},
                      describe=lambda r: f"mean {r['mean']:.2f}", schedule=lambda step: 0.5,
                      save=do_save if save else None, last_saved=last_saved,
                      log=lines.append, label="toy")
    return result, calls, saved, lines


def test_logs_saves_and_records():
    result, calls, saved, lines = run(settings())
    assert calls == list(range(7))
    assert saved == [3, 6, 7]
    assert result.step == 7 and result.last_saved == "dir/ckpt-7"
    assert [r["step"] for r in result.history] == [2, 4, 6, 7]
    assert result.history[0]["mean"] == 0.5 and result.history[-1]["loss"] == 6.0
    assert result.history[0]["learning_rate"] == 0.5 and result.history[0]["grad_norm"] == 2.0
    assert lines[0].startswith("toy: step 2/7 (28.6%) mean 0.50 | lr 0.5 | ")
    assert "ETA" in lines[0] and len(lines) == 4


def test_non_finite_loss_stops_before_saving():
    losses = [1.0, 1.0, 1.0, 1.0, float("nan"), 1.0, 1.0]
    with pytest.raises(TrainingError) as err:
        run(settings(), losses=losses)
    message = str(err.value)
    assert message.startswith("toy: non-finite loss (nan) at step 5") and "ckpt-3" in message
    assert "learning_rate (now 0.1)" in message


def test_resume_and_nothing_left_to_train():
    result, calls, saved, _ = run(settings(), start=4, last_saved="dir/ckpt-4")
    assert calls == [4, 5, 6] and saved == [6, 7] and result.start_step == 4
    result, calls, saved, _ = run(settings(), start=7, last_saved=None)
    assert calls == [] and saved == [7]          # the state still goes out once
    result, calls, saved, _ = run(settings(), start=7, last_saved="dir/ckpt-7")
    assert saved == [] and result.last_saved == "dir/ckpt-7"
    result, _, saved, _ = run(settings(), save=False)
    assert saved == [] and result.last_saved is None


def test_steps_this_call_never_crosses_a_boundary():
    s = settings(total_steps=20, log_every=5, save_every=8, steps_per_loop=4)
    steps, step = [], 0
    while step < s.total_steps:
        step += steps_this_call(s, step)
        steps.append(step)
    assert steps == [4, 5, 8, 10, 14, 15, 16, 20]


def test_summary_fields():
    result, _, _, _ = run(settings())
    summary = run_summary(settings(), result, started_at=result.train_seconds * 0, num_params=12,
                          extra={"backend": "fake"})
    assert summary["global_step"] == 7 and summary["steps_this_run"] == 7
    assert summary["trainable_parameters"] == 12 and summary["backend"] == "fake"
    assert summary["final"]["step"] == 7 and summary["last_checkpoint"] == "dir/ckpt-7"


def test_the_loop_needs_no_tensorflow():
    pytest.importorskip("jax")
    code = ("import sys, training.loop, training.state, training.jax_core, data.tfrecord_io, "
            "data.vocab; assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    env = dict(os.environ, KERAS_BACKEND="jax")   # the JAX path's environment
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
