"""The one-GPU run (`gpu_budget`): what this pre-training buys on GLUE at the paper's small size,
and how fast it trains, in one short run on one GPU without TensorFlow (docs/GPU.md).

    KERAS_BACKEND=jax python -m reproduce.gpu_budget --bundle_dir=gpu_bundle --output_dir=OUT \
        [--call=1|2] [--budget_s=500] [--work_dir=runs/gpu_budget] [--fresh] [--rehearse]

A session's device window is two calls on one machine (reproduce/gpu_plan.py): `--call=1`
builds, compiles, times, plans, pre-trains and fine-tunes seed 1; `--call=2`, started on the warm
machine with the same work folder, fine-tunes the seeds left. Any call resumes what an earlier one
left. `--rehearse`: the same path and structure on a tiny model on the CPU (reproduce/gpu_recipe.py
REHEARSAL), where a program compiled after the compile stage, a missing model x task cell of a
seed or a reported step count that is not the reached one fails the run.

Input: the bundle (`bash scripts/gpu_bundle.sh`, reproduce/gpu_bundle.py): pre-training examples
as arrays (data/pretraining_arrays.py; the held-out shard apart) and the tokenized GLUE features
(finetune/feature_files.py). `GpuRun.run` runs the stages in one process, each resumable from
`--work_dir`; where each lives:

* the recipe (models, schedule, fine-tuning settings, `--rehearse`'s tiny one): reproduce/gpu_recipe.py;
* the work folder and what a rerun finds done: reproduce/gpu_work.py;
* the stages (inputs, build, compile, throughput, pre-training, fine-tuning):
  reproduce/gpu_stages.py;
* the plan (pre-training steps and fine-tuning length from the timed steps): reproduce/gpu_plan.py;
* the report (results.json, results.md, the plots, throughput.json): reproduce/gpu_report.py on
  reproduce/report.py, the CPU reproduction's report code.

`--output_dir` gets at most 8 files: results.json, results.md, throughput.json,
pretraining_curves.png, glue_scores.png (written after every stage, so what a cut-off run reached
still comes back), gpu_run.log (scripts/gpu_run.sh tees the console into it) and the compile
cache jax_cache.tar.gz (scripts/gpu_run.sh).
"""
import json
import os
import sys
import time

from base import fileio
from reproduce import gpu_report
from reproduce.gpu_plan import (DEFAULT_BUDGET_S, LOOP_OVERHEAD,  # noqa: F401
                                REPORT_RESERVE_S, SECOND_BUDGET_S, finetune_trial_seconds,
                                plan_budget, second_call_seconds)
from reproduce.gpu_recipe import (GPU_BUDGET, REHEARSAL, SMOKE,  # noqa: F401
                                  GpuRecipe, schedule_text)
from reproduce.gpu_stages import (ArrayPretrainingTask, Finetuning, GpuModels,  # noqa: F401
                                  GpuRunError, Inputs, Pretraining, finetune_step_seconds,
                                  heldout_seconds, read_bundle, throughput)
from reproduce.gpu_work import WorkFolder, WorkFolderError, default_work_dir
from reproduce.recipes import GLUE_TASKS, MODELS, PRETRAINED

OUTPUT_FILES = ("results.json", "results.md", "throughput.json", "pretraining_curves.png",
                "glue_scores.png", "gpu_run.log")


class Log:
    """Console lines stamped with the seconds since the run started (its budget clock)."""

    def __init__(self):
        self.started = time.time()

    def __call__(self, message):
        print(f"[{time.time() - self.started:6.1f}s] {message}", flush=True)

    def elapsed(self):
        return time.time() - self.started


def loop_over_timed(record, step_ms, compile_s=0.0):
    """A pre-training stage's wall (held-out points and checkpoints included, `compile_s` of
    programs compiled in it left out) per step, over the RTD step timed alone: what the plan's
    LOOP_OVERHEAD and held-out allowance stand for, as this run met them (None before any
    step)."""
    steps = record.get("global_step") if record else None
    if not steps or not step_ms:
        return None
    return round((record["wall_seconds"] - compile_s) / (steps * step_ms / 1e3), 2)


class GpuRun:
    """The stages of reproduce/gpu_stages.py in order, timed on the budget clock (`log`), with
    the plan between the timings and the training, and the report after every stage."""

    def __init__(self, recipe, bundle_dir, output_dir, work_dir, budget_s, log, seed=0,
                 tasks=GLUE_TASKS, fresh=False, call=1, strict=False):
        self.recipe, self.bundle_dir, self.out = recipe, bundle_dir, output_dir
        self.work = WorkFolder(work_dir, recipe)
        self.budget_s, self.log, self.clock, self.seed = float(budget_s), log, log, seed
        self.tasks = list(tasks)
        self.call, self.strict = int(call), strict
        self.bundle = read_bundle(bundle_dir)
        self.stage_seconds = {}
        self.watch = None          # the compiles after the compile stage (CompileWatch)
        self.current_stage, self.stopped = None, None
        self.results = {"recipe": recipe.scale, "budget_s": self.budget_s, "seed": seed,
                        "call": self.call,
                        "bundle": {k: v for k, v in self.bundle.items() if k != "files"}}
        try:
            self.work.claim(self.bundle, seed, fresh=fresh)
        except WorkFolderError as e:
            raise GpuRunError(str(e)) from None
        # what the earlier calls on this work folder did (a resumed call adds its own)
        self.calls = self.work.calls()
        fileio.makedirs(self.out)

    def left(self):
        return self.budget_s - self.clock.elapsed()

    def work_left(self, steps):
        return self.work.work_left(steps, self.tasks)

    def stage(self, name, fn):
        """fn(), its wall added to `stage_seconds[name]`."""
        start = time.time()
        self.current_stage = name      # before its line: a stop seen after the line names it
        self.log(f"== {name}")
        value = fn()
        self.stage_seconds[name] = round(self.stage_seconds.get(name, 0.0)
                                         + time.time() - start, 1)
        self.record_call()
        return value

    def record_call(self, finished=False):
        """This call's record (budget, stage seconds, compiles after the compile stage) beside
        the earlier calls' in the work folder and in results.json: a resumed call adds to the
        run's record, it does not overwrite it."""
        mine = {"call": self.call, "budget_s": self.budget_s,
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                         time.gmtime(self.clock.started)),
                "elapsed_s": round(self.clock.elapsed(), 1),
                "stage_seconds": dict(self.stage_seconds), "finished": finished}
        if self.stopped:
            mine["stopped"] = self.stopped
        if self.watch is not None:
            mine["compiles_after_compile_stage"] = list(self.watch.compiles)
        self.results["calls"] = self.calls + [mine]
        self.results["stage_seconds"] = dict(self.stage_seconds)
        self.work.write_calls(self.results["calls"])

    def report(self):
        gpu_report.write(self)

    # -------------------------------------------------------------- the timings and the plan
    def timings(self, models, inputs):
        """(throughput dict with the fine-tuning step and held-out figures, {model: fine-tuning
        seconds per step}): measured after compiling every program, or, on a rerun, the first
        run's (throughput.json), compiling only the programs of the stages left."""
        saved = self.work.throughput_path
        if fileio.exists(saved) and fileio.exists(self.work.plan_path):
            # A rerun: the first run's timings and plan stand, and only the steps of the stages
            # left are compiled (on a GPU the compile stage is ~2 minutes of device time).
            tp = self.work.read_json(saved)
            self.log(f"throughput from {saved}")
            steps = self.work.read_json(self.work.plan_path)["steps"]
            pretrain_models, finetune = self.work_left(steps)
            self.results["compile_seconds"] = self.stage("compile", lambda: models.compile(
                inputs, pretrain_models=pretrain_models, finetune=finetune))
            self.watch_compiles()
            return tp, {k: v / 1e3 for k, v in tp["finetune_step_ms"].items()}
        compiled = self.results["compile_seconds"] = self.stage(
            "compile", lambda: models.compile(inputs))
        self.watch_compiles()
        tp = self.stage("throughput", lambda: throughput(models, inputs, compiled, self.log))
        step_s = self.stage("throughput", lambda: finetune_step_seconds(models, inputs, self.log))
        tp["finetune_step_ms"] = {k: round(1e3 * v, 3) for k, v in step_s.items()}
        tp["heldout_eval_s"] = round(
            self.stage("throughput", lambda: heldout_seconds(models, inputs, self.log)), 2)
        self.work.write_json(saved, tp)
        return tp, step_s

    def stop(self, signum, detail=""):
        """The call was stopped by a signal (the device tool's time limit, a preemption): its
        record and the report say where, from what the work folder holds; a rerun of the same
        command continues from there."""
        import signal as signals
        self.stopped = (f"stopped by {signals.Signals(signum).name} in stage "
                        f"{self.current_stage or 'start'} at {self.clock.elapsed():.0f}s"
                        + (f" ({detail})" if detail else ""))
        self.log(self.stopped + "; rerun the same command to continue")
        self.record_call()
        if fileio.exists(self.work.plan_path):
            self.results.setdefault("plan", self.work.read_json(self.work.plan_path))
        try:
            self.report()
        except Exception as e:       # noqa: BLE001 - the stop line matters more than the report
            self.log(f"report after the stop failed: {str(e).splitlines()[0][:200]}")

    def watch_compiles(self):
        """From here on every program should be compiled already: count any that is not."""
        from training.compile_cache import CompileWatch
        self.watch = CompileWatch().start()

    def plan(self, throughput, trial_s):
        """The plan (gpu_plan.plan_budget) from the time left now, or the first call's; `trial_s`:
        {(model, task): estimated seconds of one full-length trial}. Made in call 1, it splits
        the work between call 1 and call 2 (made in call 2, where call 1 never reached it: all
        of it in this call)."""
        path = self.work.plan_path
        if fileio.exists(path):
            plan = self.work.read_json(path)
            self.log(f"plan from {path}: {plan['steps']} steps per model")
            return plan
        heldout_s = throughput.get("heldout_eval_s", 0.0)
        seed_s = sum(trial_s.values())
        left = self.left()
        second = 0.0
        if self.call == 1:
            second = second_call_seconds(self.stage_seconds.get("build", 0.0),
                                         self.stage_seconds.get("compile", 0.0))
        plan = plan_budget(left, seed_s,
                           sum(throughput["models"][m]["step_ms"] for m in PRETRAINED) / 1e3,
                           self.recipe, heldout_s, second_call_s=second)
        plan.update(step_ms={m: throughput["models"][m]["step_ms"] for m in PRETRAINED},
                    heldout_eval_s=heldout_s, loop_overhead=LOOP_OVERHEAD,
                    finetune_round_seconds_estimated=round(seed_s, 1),
                    decided_at_s=round(self.clock.elapsed(), 1), left_s=round(left, 1),
                    decided_in_call=self.call,
                    lr_schedule=self.recipe.lr_schedule(plan["steps"]))
        self.work.write_json(path, plan)
        schedule = plan["lr_schedule"]
        calls = plan.get("calls", {})
        self.log(f"plan: {plan['steps']:,} pre-training steps per model at the timed rate "
                 f"(learning rate highest at step {schedule['highest_at']:,}: "
                 f"{schedule['highest_lr']:.3g}); fine-tuning {plan['seeds']} seed(s) at "
                 + ("the official length" if plan["finetune_step_fraction"] >= 1.0 else
                    f"{plan['finetune_step_fraction']:.2f} of the official steps")
                 + f" (one seed of every model x task estimated at {seed_s:.0f}s at full length)"
                 + ("" if "2" not in calls else
                    f"; seeds {', '.join(map(str, calls['2']['seeds']))} in call 2 (estimated "
                    f"{calls['2']['finetune_s']:.0f}s of the {calls['2']['affords_s']:.0f}s it "
                    "affords)")
                 + ("" if not plan["estimate"] else
                    f"; this call estimated to end at "
                    f"{self.clock.elapsed() + plan['estimate']['end_s']:.0f}s of the "
                    f"{self.budget_s:.0f}s budget"))
        return plan

    # -------------------------------------------------------------- all stages
    def run(self):
        b = self.bundle
        self.log(f"bundle {self.bundle_dir}: {b.get('train_examples')} training examples, "
                 f"budget {self.budget_s:.0f}s")
        inputs = Inputs(self.bundle_dir, b, self.recipe, self.tasks)
        self.results["dev_examples"], self.results["dev_examples_full"] = inputs.dev_examples()
        models = self.stage("build", lambda: GpuModels(self.recipe, b, self.tasks, self.seed,
                                                       self.log))
        tp, finetune_step_s = self.timings(models, inputs)
        self.results["throughput"] = tp
        self.report()
        trial_s = finetune_trial_seconds(inputs.task_sizes(), finetune_step_s, self.recipe,
                                         MODELS)
        plan = self.results["plan"] = self.stage("plan", lambda: self.plan(tp, trial_s))
        self.results["pretrain_lr_schedule"] = self.recipe.lr_schedule(plan["steps"])
        self.results["pretraining"] = {}
        pretraining = Pretraining(models, inputs, self.work, self.log)
        for model in PRETRAINED:
            compiled_before = self.watch.seconds() if self.watch else 0.0
            record = self.results["pretraining"][model] = self.stage(
                f"pretrain_{model}", lambda m=model: pretraining.run(m, plan["steps"]))
            compiled = (self.watch.seconds() if self.watch else 0.0) - compiled_before
            self.results.setdefault("pretraining_loop_over_timed", {})[model] = \
                loop_over_timed(record, tp["models"][model]["step_ms"], compiled)
            self.report()
        fraction = plan.get("finetune_step_fraction", 1.0)
        calls = plan.get("calls") or {}
        # call 1 of a two-call plan fine-tunes its own seeds only; call 2 (or a single call)
        # every seed left
        seeds = calls["1"]["seeds"] if self.call == 1 and "2" in calls else None
        finetuning = Finetuning(models, inputs, self.work, self.log, fraction=fraction,
                                trial_seconds={k: v * fraction for k, v in trial_s.items()},
                                seeds=seeds)
        not_run = self.stage("finetune", lambda: finetuning.run(
            lambda: self.left() - REPORT_RESERVE_S, self.report))
        self.results["cells_not_run"] = [{"seed": seed, "task": task} for seed, task in not_run]
        if self.watch is not None:
            self.watch.stop()
        self.log(f"done in {self.clock.elapsed():.0f}s")
        self.record_call(finished=True)
        problems = self.check_outputs(plan)
        self.report()
        return problems

    def check_outputs(self, plan):
        """What this call's outputs lack or misstate, in words (empty: none): an output file
        missing; a (seed, task) with some model's cell and not another's (a budget cut removes
        whole tasks, never one model's cell), or a planned seed of this call not run; a
        pre-training record whose step count is not the one its checkpoint reached; a program
        compiled after the compile stage. The last two and the planned seeds count as failures
        only in a rehearsal (`strict`): on a GPU the report says so in a bold line."""
        data = json.loads(fileio.read_text(os.path.join(self.out, "results.json")))
        missing = [f for f in OUTPUT_FILES if f != "gpu_run.log"
                   and not fileio.exists(os.path.join(self.out, f))]
        stopped = [m for m in PRETRAINED if self.work.collapsed(m) is not None]
        models = [m for m in MODELS if m not in stopped]
        for seed in range(1, self.recipe.num_trials + 1):
            for task in self.tasks:
                have = [m for m in models if fileio.exists(self.work.metrics_file(m, task, seed))]
                if have and len(have) < len(models):
                    missing.append(f"GLUE cell of seed {seed} {task}: "
                                   f"{', '.join(sorted(set(models) - set(have)))} not run "
                                   f"beside {', '.join(have)}")
        problems = list(missing)
        planned = (plan.get("calls") or {}).get(str(self.call), {}).get("seeds", [])
        if self.strict:
            problems += [f"planned seed {seed} {task} not run" for seed in planned
                         for task in self.tasks
                         if any(not fileio.exists(self.work.metrics_file(m, task, seed))
                                for m in models)]
            for model, record in (data.get("pretraining") or {}).items():
                reached = self.work.pretrained_steps(model)
                if record.get("collapsed"):
                    continue
                if record.get("global_step") != reached or reached != plan["steps"]:
                    problems.append(f"{model}: reported {record.get('global_step')} pre-training "
                                    f"steps, reached {reached}, planned {plan['steps']}")
            if self.watch is not None and self.watch.compiles:
                problems.append("compiled after the compile stage: " + self.watch.summary())
        self.log("outputs: " + ("all present" if not problems else "; ".join(problems)))
        return problems


def main(argv=None):
    import argparse
    from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle_dir", default="gpu_bundle")
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--work_dir", default=None,
                    help="the run's work folder (default runs/gpu_budget; with --rehearse "
                         "runs/gpu_rehearsal): it belongs to one recipe, model, seed and bundle")
    ap.add_argument("--fresh", action="store_true",
                    help="remove the work folder's plan, checkpoints and results first (a "
                         "folder of another run is refused otherwise)")
    ap.add_argument("--budget_s", type=float, default=None,
                    help=f"wall seconds for this call (default {DEFAULT_BUDGET_S:.0f} for call 1, "
                         "a command of at most 9.5 minutes on a GPU machine started cold; "
                         f"{SECOND_BUDGET_S:.0f} for call 2: reproduce/gpu_plan.py)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--call", type=int, choices=(1, 2), default=1,
                    help="which call of the session's window this is (reproduce/gpu_plan.py): 1 "
                         "plans, pre-trains and fine-tunes seed 1; 2 resumes the same work "
                         "folder on the warm machine and fine-tunes the seeds left")
    ap.add_argument("--rehearse", action="store_true",
                    help="the GPU call's path and structure on a tiny model (CPU check); a "
                         "compile after the compile stage, a missing cell or a misreported step "
                         "count fails it")
    ap.add_argument("--smoke", action="store_true", help="the same as --rehearse")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args(argv)
    rehearse = args.rehearse or args.smoke
    if args.budget_s is None:
        args.budget_s = SECOND_BUDGET_S if args.call == 2 else DEFAULT_BUDGET_S
        if rehearse:     # the CPU's share of the window: its tiny model and capped seeds
            args.budget_s = REHEARSAL_BUDGET_S[args.call]
    import keras
    if keras.backend.backend() != "jax":
        print("error: run with KERAS_BACKEND=jax", file=sys.stderr)
        return 2
    # Which Keras the call runs (the bundle's wheels, installed by gpu_run.sh where the Python
    # lacks them; the rehearsal always installs them), said by the run itself: a separate
    # interpreter importing it cost each call ~3 s.
    print(f"keras {keras.__version__} from {keras.__file__}", flush=True)
    log = Log()
    enable_compile_cache(args.jax_cache_dir, log=log)      # before the first compile
    from data.errors import DataError
    from training.loop import Interrupted
    try:
        run = GpuRun(REHEARSAL if rehearse else GPU_BUDGET, args.bundle_dir, args.output_dir,
                     args.work_dir or default_work_dir(rehearse), args.budget_s, log,
                     seed=args.seed, fresh=args.fresh, call=args.call, strict=rehearse)
    except (GpuRunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log(f"call {args.call} of the window, budget {args.budget_s:.0f}s")
    with stop_on_signals():
        try:
            problems = run.run()
        except (GpuRunError, DataError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except (Stopped, Interrupted) as e:
            # the training loop saved its state (Interrupted); elsewhere the stage is cut
            run.stop(e.signum, str(e) if isinstance(e, Interrupted) else "")
            print(f"error: {run.stopped}; rerun the same command to continue", file=sys.stderr,
                  flush=True)
            sys.stdout.flush()
            # compile threads may still be at work: the process ends now, not after them
            os._exit(128 + int(e.signum))
    return 1 if problems else 0


class Stopped(Exception):
    """SIGTERM / SIGINT outside the training loop (which saves and raises Interrupted)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class stop_on_signals:
    """SIGTERM / SIGINT raise `Stopped` in the main thread while the run is outside a training
    loop (the loop installs its own handlers, which save a checkpoint first)."""

    def __enter__(self):
        import signal
        self.previous = {sig: signal.signal(sig, self._raise)
                         for sig in (signal.SIGTERM, signal.SIGINT)}
        return self

    @staticmethod
    def _raise(signum, frame):
        import signal
        for sig in (signal.SIGTERM, signal.SIGINT):    # one stop: a second signal is no news
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    def __exit__(self, *exc):
        import signal
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


# The rehearsal's budgets per call on the CPU (seconds): bounds, not what it takes (its work is
# capped: ~80 s and ~25 s on a quiet 2-core VM), wide enough that a loaded CI machine does not cut
# the planned seeds (60 s for call 2 did, at load ~3: "a seed took 18s"); the cut itself is
# tests/test_gpu_run.py::test_budget_cut_drops_whole_tasks_never_one_model's.
REHEARSAL_BUDGET_S = {1: 300.0, 2: 150.0}


if __name__ == "__main__":
    sys.exit(main())
