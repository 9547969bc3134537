"""training/loop.py, the host loop both training cores run through, with a fake step: when it
logs, saves and stops, what its records and summary hold, and that it needs no TensorFlow."""
import os
import subprocess
import sys
import time

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
    # the first call's line (no record), then one per log window
    assert lines[0].startswith("toy: step 1/7 (14.3%) | first call ")
    assert "(tracing and compiling the step) | loss 0.0000 | lr 0.5 | next line at step 2" \
        in lines[0]
    assert lines[1].startswith("toy: step 2/7 (28.6%) mean 0.50 | lr 0.5 | ")
    assert "ETA" in lines[1] and len(lines) == 5


class StepRateOn:
    """training/progress.py's StepRate on a FakeClock."""

    def __init__(self, clock):
        self.clock = clock

    def __call__(self, start, total):
        from training.progress import StepRate
        return StepRate(start, total, clock=self.clock.time)


class FakeClock:
    """time.time() for the loop: the first call takes 10 s (the compilation), each later one 1 s."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now


def test_first_call_line_and_seq_per_second_without_the_compilation(monkeypatch):
    import training.loop as loop
    clock = FakeClock()
    monkeypatch.setattr(loop, "time", clock)
    monkeypatch.setattr(loop, "StepRate", StepRateOn(clock))
    calls = []

    def run_steps(step):
        clock.now += 10.0 if not calls else 1.0
        calls.append(step)
        return 1, {"loss": np.float32(1.0), "grad_norm": np.float32(2.0)}

    for log_every, first_line in ((2, "toy: step 1/7 (14.3%) | first call 10.0s"),
                                  (1, "toy: step 1/7 (14.3%) mean 1.00")):
        calls.clear()
        lines = []
        result = run_loop(settings(log_every=log_every), 0, run_steps,
                          summarize=lambda w, n: {"mean": float(w["loss"]) / n},
                          describe=lambda r: f"mean {r['mean']:.2f}", schedule=lambda step: 0.5,
                          log=lines.append, label="toy")
        assert lines[0].startswith(first_line), lines[0]
        assert lines[0].endswith("| first call 10.0s (tracing and compiling the step)") == (
            log_every == 1)
        summary = run_summary(settings(log_every=log_every), result, started_at=clock.now,
                              num_params=1)
        assert summary["first_step_seconds"] == 10.0
        # batch 4, one step a second after the first: 4 seq/s in every line and the summary
        # (the first call alone: its own 4 / 10 s)
        rates = [r["sequences_per_second"] for r in result.history]
        assert rates == ([4.0] * 4 if log_every == 2 else [0.4] + [4.0] * 6), rates
        assert summary["sequences_per_second"] == 4.0
    # one window: its progress line and the summary print the same number (no double rounding)
    clock.now, calls[:] = 1000.0, []
    result = run_loop(settings(total_steps=4, log_every=4), 0, lambda step: (
        clock.__setattr__("now", clock.now + (10.0 if step == 0 else 0.368629)),   # 10.851 seq/s
        (1, {"loss": np.float32(1.0), "grad_norm": np.float32(2.0)}))[1],
        summarize=lambda w, n: {}, describe=lambda r: "", schedule=lambda step: 0.5,
        log=lambda line: None)
    summary = run_summary(settings(total_steps=4, log_every=4), result, started_at=clock.now,
                          num_params=1)
    assert f"{result.history[-1]['sequences_per_second']:.1f}" == \
        f"{summary['sequences_per_second']:.1f}"


def test_a_run_inside_its_warm_up_says_so_first():
    result, _, _, lines = run(settings(total_steps=7, warmup_steps=10, log_every=7))
    assert lines[0] == ("toy: note: all 7 steps of this run lie inside its 10-step "
                        "learning-rate warm-up: the learning rate reaches at most 0.5 (peak 0.1); "
                        "to train at the peak set num_warmup_steps (now 10) below the run's "
                        "length, or train longer")
    assert len(lines) == 3 and result.history[0]["step"] == 7   # the note is no record
    from training.loop import warmup_message
    s = settings(total_steps=20, warmup_steps=10)
    assert warmup_message(s, 0, s.schedule()) is None             # reaches its peak
    s = settings(total_steps=10, warmup_steps=10_000, learning_rate=5e-4, schedule_steps=1000)
    assert "10,000-step learning-rate warm-up of a 1,000-step schedule" in \
        warmup_message(s, 0, s.schedule())
    s = settings(total_steps=10, warmup_proportion=1.0)
    assert "reaches at most 0.025 (peak 0.1); to train at the peak set warmup_proportion (now 1)" \
        in warmup_message(s, 0, s.schedule())


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


def test_stop_at_once_between_loops_is_one_line_and_gives_the_handlers_back():
    """Fine-tuning outside its training loops (a trial's start, its predictions): SIGTERM is one
    line and exit 143 at once (Python's default: gone without a word); inside a loop the loop's
    StopSignals takes the signal and gives StopAtOnce's handler back after."""
    import signal

    from training.loop import Interrupted, StopAtOnce, StopSignals

    def wait_for(condition):
        deadline = time.time() + 5
        while not condition() and time.time() < deadline:
            time.sleep(0.01)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        with StopAtOnce("mrpc"):
            os.kill(os.getpid(), signal.SIGTERM)
            wait_for(lambda: False)          # the handler raises at the next bytecode
    assert str(stopped.value) == ("mrpc: stopped by SIGTERM; this run writes no checkpoints: "
                                  "rerun the same command to start it again")
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    with StopAtOnce("rte") as outside:
        with StopSignals() as loop:
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(lambda: loop.received is not None)
        assert loop.received == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) == outside._handle
    assert signal.getsignal(signal.SIGINT) is not outside._handle
