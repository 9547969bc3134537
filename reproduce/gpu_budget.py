"""The one-GPU run (`gpu_budget`): what this pre-training buys on GLUE at the paper's small size,
and how fast it trains, in one short run on one GPU without TensorFlow (docs/GPU.md).

    KERAS_BACKEND=jax python -m reproduce.gpu_budget --bundle_dir=gpu_bundle --output_dir=OUT \
        [--budget_s=470] [--work_dir=runs/gpu_budget] [--fresh] [--smoke]

Input: the bundle (`bash scripts/gpu_bundle.sh`, reproduce/gpu_bundle.py): pre-training examples
as arrays (data/pretraining_arrays.py; the held-out shard apart) and the tokenized GLUE features
(finetune/feature_files.py). `GpuRun.run` runs the stages in one process, each resumable from
`--work_dir`; where each lives:

* the recipe (models, schedule, fine-tuning settings, `--smoke`'s tiny one): reproduce/gpu_recipe.py;
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
                                REPORT_RESERVE_S, finetune_trial_seconds, plan_budget)
from reproduce.gpu_recipe import (GPU_BUDGET, PRETRAINED, SMOKE, GpuRecipe,  # noqa: F401
                                  schedule_text)
from reproduce.gpu_stages import (ArrayPretrainingTask, Finetuning, GpuModels,  # noqa: F401
                                  GpuRunError, Inputs, Pretraining, finetune_step_seconds,
                                  heldout_seconds, read_bundle, throughput)
from reproduce.gpu_work import WorkFolder, WorkFolderError, default_work_dir
from reproduce.recipes import GLUE_TASKS, MODELS

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


def loop_over_timed(record, step_ms):
    """A pre-training stage's wall (held-out points and checkpoints included) per step, over the
    RTD step timed alone: what the plan's LOOP_OVERHEAD and held-out allowance stand for, as this
    run met them (None before any step)."""
    steps = record.get("global_step") if record else None
    if not steps or not step_ms:
        return None
    return round(record["wall_seconds"] / (steps * step_ms / 1e3), 2)


class GpuRun:
    """The stages of reproduce/gpu_stages.py in order, timed on the budget clock (`log`), with
    the plan between the timings and the training, and the report after every stage."""

    def __init__(self, recipe, bundle_dir, output_dir, work_dir, budget_s, log, seed=0,
                 tasks=GLUE_TASKS, fresh=False):
        self.recipe, self.bundle_dir, self.out = recipe, bundle_dir, output_dir
        self.work = WorkFolder(work_dir, recipe)
        self.budget_s, self.log, self.clock, self.seed = float(budget_s), log, log, seed
        self.tasks = list(tasks)
        self.bundle = read_bundle(bundle_dir)
        self.stage_seconds = {}
        self.results = {"recipe": recipe.name, "budget_s": self.budget_s, "seed": seed,
                        "bundle": {k: v for k, v in self.bundle.items() if k != "files"}}
        try:
            self.work.claim(self.bundle, seed, fresh=fresh)
        except WorkFolderError as e:
            raise GpuRunError(str(e)) from None
        fileio.makedirs(self.out)

    def left(self):
        return self.budget_s - self.clock.elapsed()

    def work_left(self, steps):
        return self.work.work_left(steps, self.tasks)

    def stage(self, name, fn):
        """fn(), its wall added to `stage_seconds[name]`."""
        start = time.time()
        self.log(f"== {name}")
        value = fn()
        self.stage_seconds[name] = round(self.stage_seconds.get(name, 0.0)
                                         + time.time() - start, 1)
        self.results["stage_seconds"] = self.stage_seconds
        return value

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
            return tp, {k: v / 1e3 for k, v in tp["finetune_step_ms"].items()}
        compiled = self.results["compile_seconds"] = self.stage(
            "compile", lambda: models.compile(inputs))
        tp = self.stage("throughput", lambda: throughput(models, inputs, compiled, self.log))
        step_s = self.stage("throughput", lambda: finetune_step_seconds(models, inputs, self.log))
        tp["finetune_step_ms"] = {k: round(1e3 * v, 3) for k, v in step_s.items()}
        tp["heldout_eval_s"] = round(
            self.stage("throughput", lambda: heldout_seconds(models, inputs, self.log)), 2)
        self.work.write_json(saved, tp)
        return tp, step_s

    def plan(self, throughput, trial_s):
        """The plan (gpu_plan.plan_budget) from the time left now, or the first run's; `trial_s`:
        {(model, task): estimated seconds of one full-length trial}."""
        path = self.work.plan_path
        if fileio.exists(path):
            plan = self.work.read_json(path)
            self.log(f"plan from {path}: {plan['steps']} steps per model")
            return plan
        heldout_s = throughput.get("heldout_eval_s", 0.0)
        seed_s = sum(trial_s.values())
        left = self.left()
        plan = plan_budget(left, seed_s,
                           sum(throughput["models"][m]["step_ms"] for m in PRETRAINED) / 1e3,
                           self.recipe, heldout_s)
        plan.update(step_ms={m: throughput["models"][m]["step_ms"] for m in PRETRAINED},
                    heldout_eval_s=heldout_s, loop_overhead=LOOP_OVERHEAD,
                    finetune_round_seconds_estimated=round(seed_s, 1),
                    decided_at_s=round(self.clock.elapsed(), 1), left_s=round(left, 1))
        self.work.write_json(path, plan)
        self.log(f"plan: {plan['steps']:,} pre-training steps per model at the timed rate; "
                 f"fine-tuning {plan['seeds']} seed(s) at "
                 + ("the official length" if plan["finetune_step_fraction"] >= 1.0 else
                    f"{plan['finetune_step_fraction']:.2f} of the official steps")
                 + f" (one seed of every model x task estimated at {seed_s:.0f}s at full length)"
                 + ("" if not plan["estimate"] else
                    f"; estimated to end at {self.clock.elapsed() + plan['estimate']['end_s']:.0f}s"
                    f" of the {self.budget_s:.0f}s budget"))
        return plan

    # -------------------------------------------------------------- all stages
    def run(self):
        b = self.bundle
        self.log(f"bundle {self.bundle_dir}: {b.get('train_examples')} training examples, "
                 f"budget {self.budget_s:.0f}s")
        inputs = Inputs(self.bundle_dir, b, self.recipe, self.tasks)
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
            record = self.results["pretraining"][model] = self.stage(
                f"pretrain_{model}", lambda m=model: pretraining.run(m, plan["steps"]))
            self.results.setdefault("pretraining_loop_over_timed", {})[model] = \
                loop_over_timed(record, tp["models"][model]["step_ms"])
            self.report()
        fraction = plan.get("finetune_step_fraction", 1.0)
        finetuning = Finetuning(models, inputs, self.work, self.log, fraction=fraction,
                                trial_seconds={k: v * fraction for k, v in trial_s.items()})
        self.stage("finetune", lambda: finetuning.run(
            lambda: self.left() - REPORT_RESERVE_S, self.report))
        self.report()
        self.log(f"done in {self.clock.elapsed():.0f}s")
        return self.check_outputs()

    def check_outputs(self):
        """Every output file there and a GLUE cell for every model x task (but those of a model
        whose pre-training was stopped by the collapse check); the missing ones."""
        missing = [f for f in OUTPUT_FILES if f != "gpu_run.log"
                   and not fileio.exists(os.path.join(self.out, f))]
        data = json.loads(fileio.read_text(os.path.join(self.out, "results.json")))
        stopped = [m for m in PRETRAINED if self.work.collapsed(m) is not None]
        missing += [f"GLUE cell {model} x {task}" for model in MODELS for task in self.tasks
                    if model not in stopped and task not in data["glue"].get(model, {})]
        self.log("outputs: " + ("all present" if not missing else "missing " + ", ".join(missing)))
        return missing


def main(argv=None):
    import argparse
    from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle_dir", default="gpu_bundle")
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--work_dir", default=None,
                    help="the run's work folder (default runs/gpu_budget; with --smoke "
                         "runs/gpu_smoke): it belongs to one recipe, model, seed and bundle")
    ap.add_argument("--fresh", action="store_true",
                    help="remove the work folder's plan, checkpoints and results first (a "
                         "folder of another run is refused otherwise)")
    ap.add_argument("--budget_s", type=float, default=DEFAULT_BUDGET_S,
                    help=f"wall seconds for the run (default {DEFAULT_BUDGET_S:.0f}: one "
                         "command of at most 9 minutes on a GPU machine started cold, "
                         "reproduce/gpu_plan.py)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny model, a few steps (CPU check)")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args(argv)
    import keras
    if keras.backend.backend() != "jax":
        print("error: run with KERAS_BACKEND=jax", file=sys.stderr)
        return 2
    log = Log()
    enable_compile_cache(args.jax_cache_dir, log=log)      # before the first compile
    from data.errors import DataError
    try:
        run = GpuRun(SMOKE if args.smoke else GPU_BUDGET, args.bundle_dir, args.output_dir,
                     args.work_dir or default_work_dir(args.smoke), args.budget_s, log,
                     seed=args.seed, fresh=args.fresh)
        missing = run.run()
    except (GpuRunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
