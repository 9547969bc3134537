"""Durations and step rates for progress lines: the one ETA formatter of the toolkit.

Pure Python (no TensorFlow), so data builders and benchmarks use it too.
"""
import datetime
import math
import time


def format_duration(seconds):
    """`H:MM:SS` (`D days, H:MM:SS` beyond a day); "?" when unknown (None, inf, nan)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=int(round(max(0.0, seconds)))))


class StepRate:
    """Steps per second and ETA of a run from `start_step` to `total_steps`.

    The first step is left out of the rate (it traces / compiles the step function), unless it is
    the only one timed so far."""

    def __init__(self, start_step, total_steps, clock=time.time):
        self.start_step, self.total_steps = int(start_step), int(total_steps)
        self.clock = clock
        self.started = clock()
        self.first = None   # (time, step) when the first step finished

    def step_done(self, step):
        if self.first is None:
            self.first = (self.clock(), step)

    @property
    def first_step_seconds(self):
        return 0.0 if self.first is None else self.first[0] - self.started

    def elapsed(self):
        return self.clock() - self.started

    def steps_per_second(self, step):
        now = self.clock()
        if self.first is not None and step > self.first[1] and now > self.first[0]:
            return (step - self.first[1]) / (now - self.first[0])
        done = step - self.start_step
        return done / max(now - self.started, 1e-9) if done > 0 else 0.0

    def eta(self, step):
        rate = self.steps_per_second(step)
        return (self.total_steps - step) / rate if rate > 0 else float("inf")
