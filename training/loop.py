"""The host loop of every training core: TensorFlow's (training/core.py) and JAX's
(training/jax_core.py) run their compiled steps through this one loop. Pure Python (no TensorFlow).

    result = run_loop(settings, start_step, run_steps, save=..., summarize=..., describe=...,
                      schedule=..., log=print, label="rte", writer=None)
    summary = run_summary(settings, result, started_at, extra={...})

A core supplies `run_steps(step) -> (num_steps, {metric: numpy sum over those steps})` (its
compiled step, one or `steps_this_call` of them; an fp16 core adds "loss_scale", the scale after
the call) and `save(step) -> checkpoint path`. The loop
owns what is the same on every backend:

* the non-finite guard: a non-finite loss (or gradient norm, unless loss scaling skips such steps)
  stops the run before any save, naming the last good checkpoint;
* a window of metric sums, summarized every `log_every` steps into a record (the objective's
  fields, lr, grad_norm, seq/s), a progress line with elapsed time and ETA (training/progress.py),
  TensorBoard scalars (a training/summaries.py writer, when one is given) and a history;
* one line as soon as the first compiled call has run, with its time (tracing / compilation),
  unless that call ends on a log step (then its progress line says it); that line is no record;
* seq/s leaves the first call out (its steps and its time: the compilation) wherever there are
  later steps: a window's seq/s and the summary's are then the same measure (one window: the
  same number), and the first call's own rate only where nothing came after it;
* before the first step, one line when the whole run lies inside the learning-rate warm-up
  (`warmup_message`: a short run under a long schedule's warm-up trains at a tiny rate);
* saves every `save_every` steps and at the end (also when there was nothing left to train);
* SIGTERM / SIGINT (a TPU or spot preemption notice, Ctrl-C): the current compiled call
  finishes, a checkpoint of that step is saved and the run stops with `Interrupted` (exit code
  128 + the signal's number in the drivers); rerunning the same command resumes from it
  (`StopSignals`; between the loops of a run that writes no checkpoints, fine-tuning's
  predictions and trial starts: `StopAtOnce`);
* the run summary's common fields.
"""
import dataclasses
import math
import signal
import threading
import time

import numpy as np

from training.progress import StepRate, format_duration


class TrainingError(RuntimeError):
    """The run cannot continue; the message is one line for the user."""


class Interrupted(TrainingError):
    """The run was stopped by a signal after saving its state (the drivers exit 128 + signum)."""

    def __init__(self, message, signum):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + int(signum)


class StopSignals:
    """Remembers SIGTERM / SIGINT while the loop runs instead of dying mid-step; the loop acts on
    it after the current compiled call. Handlers are installed only in the main thread (Python
    allows no other) and the previous ones are restored on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        # A second signal while the checkpoint is written changes nothing: the save is atomic
        # and the loop stops right after it.
        if self.received is None:
            self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class StopAtOnce(StopSignals):
    """Around a run that writes no checkpoints (fine-tuning), outside its training loops (a
    trial's start, its predictions): SIGTERM / SIGINT stop it at once with one line,
    `Interrupted` (exit 128 + the signal), instead of Python's defaults (SIGTERM: gone without a
    word; SIGINT: a KeyboardInterrupt traceback). `where` (set as the run goes) says what was
    running. A training loop's StopSignals takes the signals while it runs and gives them back."""

    def __init__(self, where=""):
        super().__init__()
        self.where = where

    def _handle(self, signum, frame):
        prefix = f"{self.where}: " if self.where else ""
        raise Interrupted(f"{prefix}stopped by {signal.Signals(signum).name}; this run writes no "
                          "checkpoints: rerun the same command to start it again", signum)


def steps_this_call(settings, step):
    """How many steps the next compiled call runs: up to `steps_per_loop`, never past a log or save
    boundary or the end (so logs, checkpoints and the non-finite guard see those steps)."""
    s = settings
    bounds = [s.total_steps, step + max(1, s.steps_per_loop)]
    for every in (max(1, s.log_every), s.save_every):
        if every:
            bounds.append((step // every + 1) * every)
    return min(bounds) - step


def call_sizes(settings, step):
    """The `steps_this_call` of every call from `step` to the end, in order."""
    while step < settings.total_steps:
        num = steps_this_call(settings, step)
        yield num
        step += num


def largest_call(settings):
    """The most steps one call can run under `settings` whatever the run's length: the JAX core
    compiles its multi-step program for this many."""
    bounds = [max(1, settings.steps_per_loop), max(1, settings.log_every)]
    if settings.save_every:
        bounds.append(settings.save_every)
    return min(bounds)


# fp16: below this loss scale the skipped steps have stopped being overflow (DeepSpeed's
# min_loss_scale): the gradients are non-finite even unscaled, and nothing trains any more.
MIN_LOSS_SCALE = 1.0


def non_finite_message(values, step, *, label="", learning_rate=None, checkpointing=True,
                       last_saved=None, loss_scaled=False, loss_scale=None):
    """The stop message for a non-finite loss or gradient norm (None when both are finite).
    With loss scaling a non-finite gradient is expected now and then: the step is skipped and the
    scale lowered. Only once the scale (`loss_scale`, after the step) has fallen below
    MIN_LOSS_SCALE does a non-finite gradient stop the run."""
    loss = float(values["loss"])
    grad_norm = float(values.get("grad_norm", 0.0))
    collapsed = loss_scale is not None and loss_scale < MIN_LOSS_SCALE
    if math.isfinite(loss) and (math.isfinite(grad_norm) or (loss_scaled and not collapsed)):
        return None
    what, bad = ("loss", loss) if not math.isfinite(loss) else ("gradient norm", grad_norm)
    if what != "loss" and loss_scaled:
        step = f"{step}, after skipped steps halved the fp16 loss scale to {loss_scale:g}"
    prefix = f"{label}: " if label else ""
    saved = ""
    if checkpointing:
        saved = (f"; the last good checkpoint is "
                 f"{last_saved or 'none (no checkpoint was written)'}")
    hint = f" (now {learning_rate:g})" if learning_rate is not None else ""
    return (f"{prefix}non-finite {what} ({bad}) at step {step}: stopped without saving{saved}; "
            f"try a lower learning_rate{hint} or check the data")


def warmup_message(settings, start_step, schedule, label=""):
    """One line when every step from `start_step` to the end lies inside the learning-rate
    warm-up, so the rate never reaches its peak (None otherwise): the steps, the warm-up, the
    highest rate the run trains at against the peak, and the setting to change."""
    s = settings
    warmup = s.warmup(s.schedule_length)
    if warmup <= 0 or s.total_steps > warmup or start_step >= s.total_steps:
        return None
    lr_at = getattr(schedule, "host_value", schedule)
    steps = range(start_step, s.total_steps)
    if len(steps) > 1000:   # the rate is monotone in the warm-up but for the decay: sample it
        steps = sorted(set(np.linspace(start_step, s.total_steps - 1, 1000).astype(int)))
    highest = max(float(np.asarray(lr_at(step))) for step in steps)
    prefix = f"{label}: " if label else ""
    if int(s.warmup_steps) >= int(s.schedule_length * s.warmup_proportion):
        setting = f"num_warmup_steps (now {int(s.warmup_steps):,})"
    else:
        setting = f"warmup_proportion (now {s.warmup_proportion:g})"
    schedule_note = ""
    if s.schedule_steps and s.schedule_steps != s.total_steps:
        schedule_note = f" of a {s.schedule_length:,}-step schedule"
    return (f"{prefix}note: all {s.total_steps:,} steps of this run lie inside its "
            f"{warmup:,}-step learning-rate warm-up{schedule_note}: the learning rate reaches "
            f"at most {highest:.2g} (peak {s.learning_rate:g}); to train at the peak set "
            f"{setting} below the run's length, or train longer")


@dataclasses.dataclass
class LoopResult:
    start_step: int
    step: int
    last_saved: object            # the newest checkpoint's path (None: none written or restored)
    history: list                 # the window records, one per log line
    train_seconds: float          # the loop itself (data pipeline built, first step included)
    first_step_seconds: float     # the first call: tracing / compilation
    # seq/s: the steps after the first call and their time (from the end of the first call to
    # the end of the last), or the first call's when nothing came after it
    timed_steps: int = 0
    timed_seconds: float = 0.0


def run_loop(settings, start_step, run_steps, *, summarize, describe, schedule, save=None,
             last_saved=None, log=print, label="", writer=None, scalar_prefix="",
             loss_scaled=False, agree_stop=None):
    """Train from `start_step` to `settings.total_steps` with `run_steps`; a LoopResult.

    summarize(window_sums, num_steps) -> the objective's fields of a record; describe(record) ->
    its part of the progress line; schedule(step) -> the learning rate; save(step) -> the path
    written (None: no checkpoints); last_saved: the checkpoint restored at `start_step`; writer:
    a ScalarWriter (None: no TensorBoard). Raises TrainingError on a non-finite loss and
    Interrupted (a TrainingError, after saving: `save(step, stopping=True)`, which writes a
    checkpoint whatever its own schedule) on SIGTERM / SIGINT. agree_stop(signum or None) ->
    signum or None: for several processes, called by each after every call with the signal it
    received (a collective: each learns every process's), so that all stop at the same step,
    where process 0 writes the checkpoint, when any one of them is signalled."""
    s = settings
    prefix = f"{label}: " if label else ""
    notice = warmup_message(s, start_step, schedule, label)
    if notice:
        log(notice)
    loop_start = time.time()
    rate = StepRate(start_step, s.total_steps)
    window, window_steps, window_start = None, 0, time.time()
    window_timed = 0      # the window's steps after the first call (its seq/s counts those)
    first_call = None     # (steps, seconds) of the first call
    last_call_end = None
    history = []
    step = start_step
    saved_step = start_step if last_saved is not None else None

    def do_save(stopping=False):
        nonlocal last_saved, saved_step
        # a stop's save is a checkpoint whatever the caller's schedule of checkpoints
        last_saved, saved_step = (save(step, stopping=True) if stopping else save(step)), step

    with StopSignals() as stop:
        while step < s.total_steps:
            num, values = run_steps(step)
            step += num
            rate.step_done(step)
            # fp16 runs report the loss scale after the call: one below MIN_LOSS_SCALE means
            # skipped steps have stopped being overflow, and the run stops as for a NaN loss.
            loss_scale = values.pop("loss_scale", None)
            message = non_finite_message(values, step, label=label,
                                         learning_rate=s.learning_rate,
                                         checkpointing=save is not None, last_saved=last_saved,
                                         loss_scaled=loss_scaled, loss_scale=loss_scale)
            if message:
                raise TrainingError(message)
            window = values if window is None else {k: window[k] + values[k] for k in window}
            window_steps += num
            last_call_end = time.time()
            # On the host when the schedule can (no device round trip per log line).
            lr_at = getattr(schedule, "host_value", schedule)
            logs_now = step % max(1, s.log_every) == 0 or step == s.total_steps
            compile_note = ""
            if first_call is None:
                first_call = (num, rate.first_step_seconds)
                window_start = rate.started + first_call[1]   # later steps' seq/s from here
                compile_note = (f" | first call {first_call[1]:.1f}s (tracing and compiling "
                                "the step)")
                if not logs_now:
                    log(f"{prefix}step {step}/{s.total_steps} "
                        f"({100.0 * step / s.total_steps:.1f}%){compile_note} | loss "
                        f"{float(values['loss']) / num:.4f} | lr "
                        f"{float(np.asarray(lr_at(step - 1))):.3g} | next line at step "
                        f"{min(s.total_steps, (step // max(1, s.log_every) + 1) * s.log_every)}")
            else:
                window_timed += num
            if logs_now:
                now = last_call_end
                record = {"step": step, **summarize(window, window_steps)}
                record.setdefault("loss", float(window["loss"]) / window_steps)
                record["learning_rate"] = float(np.asarray(lr_at(step - 1)))
                record["grad_norm"] = float(window["grad_norm"]) / window_steps
                if window_timed:   # the steps after the first call, from its end
                    record["sequences_per_second"] = window_timed * s.batch_size / max(
                        now - window_start, 1e-9)
                else:              # the first call alone: its own rate, compilation included
                    record["sequences_per_second"] = first_call[0] * s.batch_size / max(
                        first_call[1], 1e-9)
                log(f"{prefix}step {step}/{s.total_steps} ({100.0 * step / s.total_steps:.1f}%)"
                    f" {describe(record)} | lr {record['learning_rate']:.3g} | "
                    f"{record['sequences_per_second']:.1f} seq/s | elapsed "
                    f"{format_duration(rate.elapsed())} | ETA {format_duration(rate.eta(step))}"
                    f"{compile_note}")
                if writer is not None:
                    writer.write({k: v for k, v in record.items() if k != "step"}, step,
                                 prefix=scalar_prefix)
                history.append(record)
                window, window_steps, window_start, window_timed = None, 0, now, 0
            if save is not None and ((s.save_every and step % s.save_every == 0)
                                     or step == s.total_steps):
                do_save()
            received = stop.received
            if agree_stop is not None:
                received = agree_stop(received)
            if received is not None:
                name = signal.Signals(received).name
                where = f"{prefix}stopped by {name} at step {step}/{s.total_steps}"
                if stop.received is None:      # another process was signalled
                    where = (f"{prefix}stopped at step {step}/{s.total_steps} with the other "
                             f"processes (one was stopped by {name})")
                if save is None:
                    raise Interrupted(f"{where}; this run writes no checkpoints: rerun the same "
                                      "command to start it again", received)
                if saved_step != step or last_saved is None:
                    do_save(stopping=True)
                if last_saved is None:
                    raise Interrupted(f"{where}; no checkpoint written: rerun the same command "
                                      "to start it again", received)
                raise Interrupted(f"{where}; saved {last_saved}; rerun the same command to "
                                  "resume", received)
    if save is not None and saved_step != step:
        do_save()   # nothing was left to train: the state still goes out
    timed_steps, timed_seconds = 0, 0.0
    if first_call is not None:
        timed_steps = step - start_step - first_call[0]
        timed_seconds = last_call_end - (rate.started + first_call[1])
        if timed_steps <= 0:       # nothing after the first call: its own rate
            timed_steps, timed_seconds = first_call
    return LoopResult(start_step=start_step, step=step, last_saved=last_saved, history=history,
                      train_seconds=time.time() - loop_start,
                      first_step_seconds=rate.first_step_seconds, timed_steps=timed_steps,
                      timed_seconds=timed_seconds)


def run_summary(settings, result, started_at, num_params, extra=None):
    """The run summary JSON's fields (the caller adds its backend's and writes it)."""
    s = settings
    steps_run = result.step - result.start_step
    first = result.first_step_seconds
    summary = {
        "global_step": result.step, "resumed_from_step": result.start_step,
        "steps_this_run": steps_run, "train_batch_size": s.batch_size,
        "precision": s.precision, "trainable_parameters": int(num_params),
        "last_checkpoint": result.last_saved,
        "wall_seconds": round(time.time() - started_at, 2),
        "train_seconds": round(result.train_seconds, 2),
        "first_step_seconds": round(first, 2),
        # the steps after the first call over their time, as the progress lines count them
        # (not rounded here: the done line rounds it once, as the progress line does)
        "sequences_per_second": (
            result.timed_steps * s.batch_size / max(result.timed_seconds, 1e-9)
            if result.timed_steps else 0.0),
        "first": result.history[0] if result.history else None,
        "final": result.history[-1] if result.history else None,
        "history": result.history,
    }
    summary.update(extra or {})
    return summary
