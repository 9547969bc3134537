"""Compiled programs of the JAX training core ahead of their first call, and their timing.

* `PrecompilableStep`: a jitted function that can be compiled before its first call and then
  runs the compiled executable (training/jax_core.py makes every program one);
* `precompile`: many of them compiled in parallel threads, each as soon as it is lowered (the
  GPU run's compile stage: reproduce/gpu_stages.py);
* `seconds_per_step`: wall seconds per training step of a program, in rounds (the GPU run's
  throughput stage, benchmarks).
"""
import os
import time


class PrecompilableStep:
    """A jitted function that can be compiled ahead of its first call (`precompile`: several at
    once, in parallel, possibly in the background) and then runs the compiled executable; a call
    while its compile is still under way waits for it. Arguments that do not match what was
    compiled (another batch shape, another number of steps per call) fall back to the jitted
    function, which compiles them as usual."""

    def __init__(self, jitted, log=print):
        self.jitted, self.log = jitted, log
        self.compiled = None
        self.pending = None      # a Future of the compile `precompile` started

    def lower(self, *args):
        return self.jitted.lower(*args)

    def __call__(self, *args):
        if self.pending is not None:
            self.pending.result()        # raises the compile's error, if any
            self.pending = None
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except (TypeError, ValueError) as e:   # other shapes / dtypes than compiled
                self.log(f"note: precompiled step not used ({str(e).splitlines()[0][:120]})")
                self.compiled = None
        return self.jitted(*args)


def precompile(jobs, log=print, workers=None, wait=True):
    """Compile `[(name, PrecompilableStep, example args)]` ahead of time: traced and lowered one
    after another (Python), each handed to a pool of compile threads as soon as it is lowered
    (XLA compiles without the GIL), so a run with many programs (two pre-training objectives,
    held-out scoring, fine-tuning heads and their predict steps) waits for about the slowest
    compile rather than for their sum, and the first jobs are ready first. With `wait=False` it
    returns once everything is lowered and the compiles go on in the background: a step called
    before its compile ended waits for it. Returns {name: seconds from the start until that
    step was compiled}, filled in as the compiles end."""
    from concurrent.futures import ThreadPoolExecutor
    start = time.time()
    done = {}

    def compile_one(name, step, low):
        step.compiled = low.compile()
        done[name] = round(time.time() - start, 1)

    workers = workers or min(8, os.cpu_count() or 1)
    pool = ThreadPoolExecutor(max(1, min(workers, len(jobs))))
    futures = []
    for name, step, args in jobs:
        step.pending = pool.submit(compile_one, name, step, step.lower(*args))
        futures.append(step.pending)
    log(f"precompile: {len(jobs)} programs traced and lowered in {time.time() - start:.1f}s")
    pool.shutdown(wait=wait)
    if wait:
        for future in futures:
            future.result()
        log(f"precompile: all compiled in {time.time() - start:.1f}s ("
            + ", ".join(f"{k} {v:.0f}s" for k, v in done.items()) + ")")
    return done


def seconds_per_step(program, args, calls, rounds=1, warm_up=True):
    """Wall seconds per training step of `program` from its `example_args` (the state threaded
    through the calls; with `warm_up` one untimed call first, which compiles it if it is not
    yet): one figure per round of `calls` calls, each waited for at its end. Returns (figures,
    the args to go on with), so interleaved rounds of several programs continue their state."""
    import jax
    state, block, num, schedule_arguments = args
    if warm_up:
        state, _ = program(state, block, num, schedule_arguments)
        jax.block_until_ready(state)
    figures = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            state, sums = program(state, block, num, schedule_arguments)
        jax.block_until_ready((state, sums))
        figures.append((time.perf_counter() - start) / (calls * int(num)))
    return figures, args._replace(state=state)
