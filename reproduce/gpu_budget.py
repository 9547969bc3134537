"""The one-GPU recipe (`gpu_budget`): what this pre-training buys on GLUE at the paper's small size,
and how fast it trains, in one short run on one GPU without TensorFlow (docs/GPU.md).

    KERAS_BACKEND=jax python -m reproduce.gpu_budget --bundle_dir=gpu_bundle --output_dir=OUT \
        [--budget_s=330] [--work_dir=runs/gpu_budget] [--smoke]

Input: the bundle (`bash scripts/gpu_bundle.sh`, reproduce/gpu_bundle.py): pre-training examples
as arrays (data/pretraining_arrays.py; the held-out shard apart) and the tokenized GLUE features
(finetune/feature_files.py). Stages, in one process, each resumable from `--work_dir`:

1. **throughput** (P4): one RTD step of ConvBERT-small and one of ELECTRA-small (conv_type none,
   head_ratio 1), bf16, compiled, then timed on one fixed batch in interleaved rounds (median
   step time; MFU counted as benchmarks/gpu_pretrain.py counts: model/flops.py);
2. **plan**: the number of pre-training steps, the same for both models, from those step times
   and what is left of `--budget_s` after the share kept for fine-tuning (`plan.json`: a rerun
   keeps it, so a resumed run trains on the same schedule; it also keeps stage 1's timings,
   `throughput.json`, and compiles only the steps of the stages left);
3. **pretrain** ConvBERT, then ELECTRA: the paper's small settings (batch 128 x 128, generator
   1/4 wide, temperature 1, disc weight 50) on the first steps of ELECTRA-small's official
   learning-rate schedule (peak 5e-4, warm-up over 10,000 steps, linear decay over 1M): a short
   run climbs the official warm-up, never reaching the peak. Squeezing a whole schedule into the
   run (10% warm-up) took the lr to 5e-4 within 180 steps, and both discriminators collapsed to
   the prior (docs/RESULTS.md §12-§13). The training core's step, fed its learning rate from
   the host, so the step timed in stage 1 is the step that trains. Every 1/8 of the run the fixed
   held-out batch is scored (pretrain/heldout_eval.py: generator accuracy, discriminator AUC, and
   at the end every point's discriminator against the last generator's replacements);
4. **finetune** ConvBERT, ELECTRA and a randomly initialised ConvBERT-small on CoLA, SST-2,
   MRPC, STS-B and RTE with the official settings (lr 3e-4, layer-wise decay 0.8, batch 32,
   3 epochs, RTE/STS-B 10), SST-2 capped at `--sst_epochs` (1) for time; seeds in rounds (seed
   1 of every model x task, then seed 2, ...) while the budget allows, at most `--max_trials`;
5. **report** into `--output_dir`, at most 8 files: results.json, results.md, throughput.json,
   pretraining_curves.png, glue_scores.png (written after every stage, so what a cut-off run
   reached still comes back), and gpu_run.log (scripts/gpu_run.sh tees the console into it).

`--smoke`: a tiny model, a few steps, capped fine-tuning, on the same code path: the CPU check
in CI (`bash scripts/gpu_run.sh --smoke`, JAX on the CPU, `tensorflow` unimportable).
"""
import dataclasses
import functools
import json
import os
import sys
import time

import numpy as np

from base import fileio
from pretrain.task import PretrainingTask
from reproduce.recipes import ELECTRA_ARCHITECTURE, GLUE_TASKS, MODELS

PRETRAINED = ("convbert", "electra")
MIN_PRETRAIN_STEPS = 100
OUTPUT_FILES = ("results.json", "results.md", "throughput.json", "pretraining_curves.png",
                "glue_scores.png", "gpu_run.log")


@dataclasses.dataclass(frozen=True)
class GpuRecipe:
    name: str
    pretrain: dict              # PretrainingHParams overrides (both models)
    finetune: dict              # FinetuneHParams overrides (every model, task)
    warmup_fraction: float = 0.1   # of the run's steps, when schedule_steps is 0
    # > 0: the lr schedule is that of a schedule_steps run warmed up over warmup_steps, of which
    # the run trains its planned first steps (the official schedule's beginning)
    schedule_steps: int = 0
    warmup_steps: int = 0
    sst_epochs: float = 1.0
    max_trials: int = 3
    heldout_examples: int = 256
    evaluations: int = 8           # held-out points over the run
    throughput_rounds: int = 3
    throughput_steps: int = 10
    steps_per_loop: int = 25
    fixed_steps: int = 0           # smoke: no planning, this many steps
    min_pretrain_share: float = 0.5   # of the seconds left after compiling (plan_budget)
    max_eval_examples: int = 0     # smoke: first N dev examples

    def lr_schedule(self):
        """The pre-training learning-rate schedule, as the reports state it."""
        if self.schedule_steps:
            return {"peak_lr": self.pretrain["learning_rate"], "warmup_steps": self.warmup_steps,
                    "schedule_steps": self.schedule_steps}
        return {"peak_lr": self.pretrain["learning_rate"], "warmup_fraction": self.warmup_fraction}


def schedule_text(schedule):
    """One sentence of results.md for `GpuRecipe.lr_schedule()`."""
    if "schedule_steps" in schedule:
        return (f"Pre-training learning rate: the first steps of a {schedule['schedule_steps']:,}"
                f"-step schedule (peak {schedule['peak_lr']:g}, linear warm-up over "
                f"{schedule['warmup_steps']:,} steps, then linear decay to 0).")
    return (f"Pre-training learning rate: peak {schedule['peak_lr']:g}, warm-up over "
            f"{100 * schedule['warmup_fraction']:g}% of the run, linear decay to 0 at its last "
            "step.")


GPU_BUDGET = GpuRecipe(
    name="gpu_budget",
    pretrain=dict(model_size="small", train_batch_size=128, max_seq_length=128,
                  learning_rate=5e-4, generator_hidden_size=0.25, temperature=1.0,
                  disc_weight=50.0, precision="bf16", log_every_n_steps=100),
    schedule_steps=1_000_000, warmup_steps=10_000,       # ELECTRA-small's (official code)
    finetune=dict(model_size="small", learning_rate=3e-4, layerwise_lr_decay=0.8,
                  train_batch_size=32, eval_batch_size=128, max_seq_length=128, precision="bf16",
                  log_every_steps=250, steps_per_loop=25))

_SMOKE_MODEL = dict(hidden_size=32, embedding_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, num_groups=1)
SMOKE = dataclasses.replace(
    GPU_BUDGET, name="smoke",
    pretrain=dict(GPU_BUDGET.pretrain, model_hparam_overrides=_SMOKE_MODEL, train_batch_size=8,
                  precision="fp32", log_every_n_steps=2),
    finetune=dict(GPU_BUDGET.finetune, model_hparam_overrides=_SMOKE_MODEL, train_batch_size=8,
                  eval_batch_size=16, precision="fp32", max_train_steps=3, log_every_steps=3,
                  steps_per_loop=3),
    max_trials=2, heldout_examples=16, evaluations=2, throughput_rounds=2, throughput_steps=2,
    steps_per_loop=2, fixed_steps=4, max_eval_examples=32)


# What the training loop takes per step over the step timed alone (stage 1), for the plan: the
# H100 run of docs/RESULTS.md §12 measured 1.3-1.7x in pre-training (windows without held-out
# scoring) and 1.4-1.6x in fine-tuning (host batches, the loop's bookkeeping; the steps there were
# host-bound), where the plan had assumed 1.1 and 1.2: that run was still fine-tuning at 1.2x
# its budget when its command was stopped.
LOOP_OVERHEAD = 1.6


def plan_budget(left_s, finetune_round_s, pretrain_step_s, recipe, heldout_s=0.0):
    """How the seconds left after building and compiling are spent: {"steps" (pre-training
    steps per model), "finetune_step_fraction" (of each task's official step count, the same
    for every model and task), "pretrain_seconds"}.

    15 s are kept for reports. One fine-tuning seed of every model x task runs at full length
    when it leaves pre-training at least `recipe.min_pretrain_share` of the rest; otherwise
    pre-training gets that share and every fine-tuning run is shortened by the same fraction (a
    comparison of encoders after 100 steps of pre-training, which the first GPU run showed
    collapse to the prior, says nothing). Of the pre-training seconds, the held-out scoring
    (`heldout_s`: one evaluation of both models, timed) is paid `recipe.evaluations` + 1 times
    (the points and the final re-scoring); the steps get the rest at `LOOP_OVERHEAD` times the
    timed step (`pretrain_step_s`: both models' steps together)."""
    if recipe.fixed_steps:
        return {"steps": recipe.fixed_steps, "finetune_step_fraction": 1.0,
                "pretrain_seconds": None}
    left = left_s - 15.0
    if finetune_round_s <= left * (1 - recipe.min_pretrain_share):
        fraction, pretrain_s = 1.0, left - finetune_round_s
    else:
        pretrain_s = left * recipe.min_pretrain_share
        fraction = max(0.05, (left - pretrain_s) / finetune_round_s)
    training_s = pretrain_s - heldout_s * (recipe.evaluations + 1)
    steps = max(MIN_PRETRAIN_STEPS,
                int(training_s / (LOOP_OVERHEAD * pretrain_step_s)) // 100 * 100)
    return {"steps": steps, "finetune_step_fraction": round(fraction, 4),
            "pretrain_seconds": round(pretrain_s, 1)}


class ArrayPretrainingTask(PretrainingTask):
    """The pre-training task (pretrain/task.py) reading the bundle's compact arrays
    (data/pretraining_arrays.py; `arrays` set before training) instead of TFRecord shards."""
    arrays = None

    def host_batches(self, skip_batches):
        from data.pretraining_arrays import array_batches
        return array_batches(self.arrays, self.hp.train_batch_size, seed=self.hp.seed,
                             skip_batches=skip_batches)


class GpuRunError(RuntimeError):
    """A bad bundle or flag; one line."""


class Log:
    """Console lines stamped with the seconds since the run started (its budget clock)."""

    def __init__(self):
        self.started = time.time()

    def __call__(self, message):
        print(f"[{time.time() - self.started:6.1f}s] {message}", flush=True)


# ------------------------------------------------------------------------------------ bundle
def read_bundle(bundle_dir):
    """bundle.json of `bundle_dir` (GpuRunError naming it when missing)."""
    path = os.path.join(bundle_dir, "bundle.json")
    if not fileio.exists(path):
        raise GpuRunError(f"{path}: no bundle here (build it with bash scripts/gpu_bundle.sh)")
    return json.loads(fileio.read_text(path))


# ------------------------------------------------------------------------------------ the run
class GpuRun:
    def __init__(self, recipe, bundle_dir, output_dir, work_dir, budget_s, log, seed=0,
                 tasks=GLUE_TASKS):
        self.recipe, self.bundle_dir = recipe, bundle_dir
        self.out, self.work = output_dir, work_dir
        self.budget_s, self.log, self.seed = float(budget_s), log, seed
        self.tasks = list(tasks)
        self.bundle = read_bundle(bundle_dir)
        self.stage_seconds, self.compile_seconds, self.heldout_fns = {}, {}, {}
        self.heldout_scorers = {}       # {model: heldout_eval.DeviceScorer}, see heldout_scorer
        self.finetuners = None
        self.results = {"recipe": recipe.name, "budget_s": self.budget_s, "seed": seed,
                        "pretrain_lr_schedule": recipe.lr_schedule(),
                        "bundle": {k: v for k, v in self.bundle.items() if k != "files"}}
        fileio.makedirs(self.out)
        fileio.makedirs(self.work)

    @property
    def plan_path(self):
        """plan.json in the work folder: the first run's plan, which a rerun keeps."""
        return os.path.join(self.work, "plan.json")

    def elapsed(self):
        return time.time() - self.log.started

    def left(self):
        return self.budget_s - self.elapsed()

    def _stage(self, name, fn):
        start = time.time()
        self.log(f"== {name}")
        value = fn()
        self.stage_seconds[name] = round(self.stage_seconds.get(name, 0.0)
                                         + time.time() - start, 1)
        self.results["stage_seconds"] = self.stage_seconds
        return value

    # -------------------------------------------------------------- pre-training models
    def pretrain_hparams(self, model, steps):
        from pretrain.hparams import make_hparams
        overrides = dict(self.recipe.pretrain)
        arch = dict(overrides.pop("model_hparam_overrides", {}))
        if model == "electra":
            arch.update(ELECTRA_ARCHITECTURE)
        b = self.bundle
        return make_hparams(overrides={
            **overrides, "model_hparam_overrides": arch, "model_name": model,
            "num_train_steps": max(1, steps),
            "num_warmup_steps": (self.recipe.warmup_steps if self.recipe.schedule_steps else
                                 int(self.recipe.warmup_fraction * max(1, steps))),
            "lr_schedule_steps": self.recipe.schedule_steps,
            "vocab_size": b["vocab_size"], "seed": self.seed,
            "max_seq_length": b["max_seq_length"],
            "steps_per_loop": self.recipe.steps_per_loop,
            "save_checkpoints_steps": max(1, steps // self.recipe.evaluations),
            "keep_checkpoint_max": 1,
            # ~20 points on the training curves whatever the run's length
            "log_every_n_steps": max(1, min(overrides.get("log_every_n_steps", 100),
                                            steps // 20))})

    def build_models(self, features):
        """{model: (pretrainer, core, program)} (the pre-training task built on a JAX core; its
        program takes the schedule as an argument, so it serves any planned length), the held-out
        scoring functions and the fine-tuning models (one per encoder x head shape)."""
        import keras
        from finetune.jax_trainer import Finetuners
        from pretrain import heldout_eval
        from pretrain.jax_trainer import pretraining_core
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if self.recipe.pretrain["precision"] == "bf16" else "float32")
        built = {}
        for model in PRETRAINED:
            hp = self.pretrain_hparams(model, 1)
            task, core = pretraining_core(
                hp, [], hp.vocab_size, self.bundle["special_ids"], log=self.log,
                task=ArrayPretrainingTask(hp, [], hp.vocab_size, self.bundle["special_ids"]))
            built[model] = (task.pretrainer, core, core.task_step())
            # makes the model's device scorer of a held-out batch (heldout_scorer)
            self.heldout_fns[model] = functools.partial(heldout_eval.device_scorer,
                                                        task.pretrainer)
        self.finetuners = Finetuners(log=self.log)
        configs = self.encoder_configs(built)
        for model in PRETRAINED:            # "random" shares ConvBERT's
            for task in self.head_tasks():
                self.finetuners.get(configs[model], task, self.finetune_hparams(task))
        return built

    def head_tasks(self):
        """One task per head shape among --tasks (binary classification; STS-B regression)."""
        from finetune.glue.tasks import get_task
        shapes = {}
        for task in self.tasks:
            spec = get_task(task)
            shapes.setdefault((spec.num_labels, spec.is_regression), task)
        return list(shapes.values())

    def precompile(self, built, batch, heldout, features, pretrain_models=PRETRAINED,
                   finetune=True):
        """Every step of the run compiled up front, in parallel (training/jax_core.precompile):
        those of `pretrain_models`' pre-training and held-out scoring, and with `finetune` the
        fine-tuning and predict steps (a resumed run: only what is left to run)."""
        from training.jax_core import precompile
        jobs = []
        for model, (_, core, step) in built.items():
            if model not in pretrain_models:
                continue
            jobs.append((f"pretrain {model}", step, core.example_args(batch)))
            jobs += [(f"{name} {model}", program, args) for name, program, args in
                     self.heldout_scorer(model, heldout).precompile_jobs()]
        configs = self.encoder_configs(built)
        for model in PRETRAINED if finetune else ():
            for task in self.head_tasks():
                hp = self.finetune_hparams(task)
                finetuner = self.finetuners.get(configs[model], task, hp)
                jobs += [(f"{name} {model}", step, args) for name, step, args in
                         finetuner.precompile_jobs(features[task][0], hp.train_batch_size,
                                                   hp.eval_batch_size)]
        if not jobs:
            self.log("precompile: nothing left to run")
            return {}
        return precompile(jobs, log=self.log)

    def work_left(self, steps):
        """(models whose pre-training has not reached `steps`, whether a fine-tuning trial is
        missing) from what the work folder holds."""
        models = []
        for model in PRETRAINED:
            path = os.path.join(self.work, "pretrain", model, "pretraining_summary.json")
            if not fileio.exists(path) or \
                    json.loads(fileio.read_text(path))["global_step"] < steps:
                models.append(model)
        finetune = any(
            not fileio.exists(os.path.join(self.work, "finetune", model, "results",
                                           f"{task}_dev_metrics_trial{trial}.json"))
            for model in MODELS for task in self.tasks
            for trial in range(1, self.recipe.max_trials + 1))
        return tuple(models), finetune

    # -------------------------------------------------------------- 1. throughput
    def throughput(self, built, batch):
        import jax
        from model.flops import peak_bf16_tflops, rtd_model_flops_per_sequence
        from training.jax_core import seconds_per_step
        r = self.recipe
        # Blocks of the calls training makes (the largest call of its settings), state donated.
        args = {model: core.example_args(batch) for model, (_, core, _) in built.items()}
        times = {model: [] for model in built}
        calls = {model: max(1, r.throughput_steps // int(args[model][2])) for model in built}
        for round_index in range(r.throughput_rounds):   # interleaved: ConvBERT, ELECTRA, ...
            for model, (_, _, step) in built.items():
                figures, args[model] = seconds_per_step(step, args[model], calls[model],
                                                        warm_up=round_index == 0)
                times[model] += figures
        device = jax.devices()[0]
        peak = peak_bf16_tflops(device.device_kind)
        b, t = batch["input_ids"].shape
        rows = {}
        for model, (pretrainer, _, _) in built.items():
            step_s = float(np.median(times[model]))
            flops = rtd_model_flops_per_sequence(pretrainer.config, pretrainer.gen_config, t)
            seqs = b / step_s
            rows[model] = {"step_ms": round(1e3 * step_s, 3), "sequences_per_second": round(seqs, 1),
                           "model_flops_per_sequence": flops,
                           "compiled_after_s": self.compile_seconds.get(f"pretrain {model}"),
                           "mfu": None if peak is None else round(seqs * flops / (peak * 1e12), 4),
                           "round_step_ms": [round(1e3 * x, 3) for x in times[model]]}
            self.log(f"{model}: {1e3 * step_s:.2f} ms/step, {seqs:,.0f} seq/s, MFU "
                     + ("n/a" if peak is None else f"{100 * rows[model]['mfu']:.1f}%"))
        result = {"device": device.device_kind, "platform": device.platform,
                  "jax": jax.__version__, "precision": self.recipe.pretrain["precision"],
                  "batch": int(b), "seq_len": int(t), "peak_bf16_tflops": peak,
                  "rounds": r.throughput_rounds, "steps_per_round": r.throughput_steps,
                  "models": rows,
                  "convbert_over_electra": round(rows["convbert"]["sequences_per_second"]
                                                 / rows["electra"]["sequences_per_second"], 3),
                  "counting": "median step over interleaved rounds of one fixed batch; model "
                              "FLOPs = 3 x seq_len x (F_disc + F_gen) (model/flops.py); one "
                              "jitted step = masking + generator + sampling + discriminator + "
                              "backward + AdamW, as benchmarks/gpu_pretrain.py"}
        return result

    # -------------------------------------------------------------- 2. plan
    def finetune_step_seconds(self, built, features):
        """{encoder: seconds per fine-tuning step} of the binary head at the recipe's batch,
        timed as the throughput steps are (the step that fine-tunes, compiled already)."""
        from data.pretraining_arrays import array_batches
        from training.jax_core import seconds_per_step
        configs = self.encoder_configs(built)
        task = self.head_tasks()[0]
        hp = self.finetune_hparams(task)
        seconds = {}
        for model in PRETRAINED:
            finetuner = self.finetuners.get(configs[model], task, hp)
            batch = next(array_batches(finetuner._train_inputs(features[task][0]),
                                       hp.train_batch_size))
            args = finetuner.core.example_args(batch)
            times, _ = seconds_per_step(finetuner.train_step, args,
                                        max(1, self.recipe.throughput_steps // int(args[2])),
                                        rounds=self.recipe.throughput_rounds)
            seconds[model] = float(np.median(times))
            self.log(f"{model}: fine-tuning step {1e3 * seconds[model]:.2f} ms (batch "
                     f"{hp.train_batch_size})")
        seconds["random"] = seconds["convbert"]
        return seconds

    def finetune_round_seconds(self, features, step_seconds):
        """Estimated wall of one seed of every model x task: training steps at the timed rate,
        prediction at about 4/3 of a training step per 128 examples (forward only, 4x batch),
        times LOOP_OVERHEAD for the host loop."""
        from finetune.trainer import num_train_steps
        total = 0.0
        for task in self.tasks:
            hp = self.finetune_hparams(task)
            train, dev, _ = features[task]
            steps = num_train_steps(len(train["input_ids"]), hp.train_batch_size,
                                    hp.num_train_epochs, hp.max_train_steps)
            predict_batches = -(-len(dev["input_ids"]) // hp.eval_batch_size)
            for model in MODELS:
                total += (steps + predict_batches * 4 / 3) * step_seconds[model]
        return LOOP_OVERHEAD * total

    # -------------------------------------------------------------- 2. plan
    def heldout_scorer(self, model, heldout):
        """`model`'s held-out scorer on the device (pretrain/heldout_eval.DeviceScorer: the
        generator's logits never leave the device), made at its first use: the batch, its masking
        and its sampling noise are uploaded once, and both models share that upload."""
        scorer = self.heldout_scorers.get(model)
        if scorer is None or scorer.batch is not heldout:
            uploaded = next((s.heldout for s in self.heldout_scorers.values()
                             if s.batch is heldout), heldout)
            scorer = self.heldout_scorers[model] = self.heldout_fns[model](
                uploaded, self.recipe.pretrain["temperature"])
        return scorer

    def heldout_seconds(self, heldout):
        """Wall of one held-out evaluation of each pre-trained model, summed (the programs are
        compiled already): what each held-out point costs the pre-training stage."""
        start = time.perf_counter()
        for model in PRETRAINED:
            self.heldout_scorer(model, heldout).evaluate()
        seconds = time.perf_counter() - start
        self.log(f"held-out evaluation: {seconds:.1f}s for both models")
        return seconds

    def plan(self, throughput, finetune_round_s):
        path = self.plan_path
        if fileio.exists(path):
            plan = json.loads(fileio.read_text(path))
            self.log(f"plan from {path}: {plan['steps']} steps per model")
            return plan
        heldout_s = throughput.get("heldout_eval_s", 0.0)
        plan = plan_budget(self.budget_s - self.elapsed(), finetune_round_s,
                           sum(throughput["models"][m]["step_ms"] for m in PRETRAINED) / 1e3,
                           self.recipe, heldout_s)
        plan.update(step_ms={m: throughput["models"][m]["step_ms"] for m in PRETRAINED},
                    heldout_eval_s=heldout_s, loop_overhead=LOOP_OVERHEAD,
                    finetune_round_seconds_estimated=round(finetune_round_s, 1),
                    decided_at_s=round(self.elapsed(), 1))
        fileio.write_text_atomic(path, json.dumps(plan, indent=2) + "\n")
        self.log(f"plan: {plan['steps']} pre-training steps per model; fine-tuning at "
                 f"{plan['finetune_step_fraction']:.2f} of the official steps (one seed of "
                 f"every model x task estimated at {finetune_round_s:.0f}s at full length)")
        return plan

    # -------------------------------------------------------------- 3. pre-training
    def pretrain(self, model, built, steps, train_arrays, heldout):
        from pretrain import heldout_eval
        from pretrain.hparams import train_settings
        model_dir = os.path.join(self.work, "pretrain", model)
        summary_path = os.path.join(model_dir, "pretraining_summary.json")
        curve_path = os.path.join(model_dir, "heldout_curve.jsonl")
        pretrainer, core, step = built[model]
        if fileio.exists(summary_path):
            summary = json.loads(fileio.read_text(summary_path))
            if summary["global_step"] >= steps:
                self.log(f"{model}: pre-trained ({steps} steps), skipped")
                return self._pretraining_record(summary, curve_path)
        hp = self.pretrain_hparams(model, steps)
        fileio.makedirs(model_dir)
        hp.to_json(os.path.join(model_dir, "hparams.json"))
        scorer = self.heldout_scorer(model, heldout)
        points = []      # (step, metrics, snapshot of the variables)

        def score(step_done):
            metrics = scorer.evaluate()
            points.append((step_done, metrics, heldout_eval.snapshot(pretrainer)))
            self.log(f"{model} step {step_done}: held-out gen acc "
                     f"{metrics['gen_accuracy']:.3f}, disc AUC {metrics['disc_auc']:.3f}")

        core.set_settings(train_settings(hp))
        core.label = model
        core.task.arrays = train_arrays
        summary = core.fit_task(
            checkpoint_dir=os.path.join(model_dir, "jax_checkpoints"), export_dir=model_dir,
            summary_path=summary_path,
            summary_extra={"model_name": model, "model_size": hp.model_size},
            train_step=step, after_save=score,
            # A checkpoint (every variable, ~200 MB at small size) at the middle and the end
            # only: the held-out points in between need none.
            checkpoint_every=max(1, steps // self.recipe.evaluations) * max(
                1, self.recipe.evaluations // 2))
        # One fixed corruption (the last generator's) for every point's discriminator.
        last = scorer.corrupt()
        lines = []
        for step_done, metrics, values in points:
            fixed = scorer.discriminate(last, values=values)["disc_auc"]
            lines.append(json.dumps({"step": step_done, **metrics, "disc_auc_last_gen": fixed}))
        fileio.write_text_atomic(curve_path, "\n".join(lines) + "\n")
        return self._pretraining_record(summary, curve_path)

    @staticmethod
    def _pretraining_record(summary, curve_path):
        """The report's record of one pre-trained model (reproduce/report.py's fields)."""
        heldout = []
        if fileio.exists(curve_path):
            heldout = [json.loads(x) for x in fileio.read_text(curve_path).splitlines() if x]
        return {"global_step": summary["global_step"],
                "trainable_parameters": summary["trainable_parameters"],
                "wall_seconds": summary["wall_seconds"],
                "sequences_per_second": summary["sequences_per_second"],
                "first_step_seconds": summary.get("first_step_seconds"),
                "final_window": summary["final"], "history": summary["history"],
                "heldout": heldout}

    # -------------------------------------------------------------- 4. fine-tuning
    def finetune_hparams(self, task, num_train_examples=None):
        """The task's hparams; with `num_train_examples`, its steps capped at the plan's
        fraction of the official count."""
        from finetune.hparams import FinetuneHParams
        from finetune.trainer import num_train_steps
        values = dict(self.recipe.finetune)
        arch = values.pop("model_hparam_overrides", {})
        hp = FinetuneHParams(**values, model_hparam_overrides=dict(arch),
                             num_trials=self.recipe.max_trials, seed=self.seed + 1)
        if task == "sst":
            hp.num_train_epochs = self.recipe.sst_epochs
        hp = hp.for_task(task)
        fraction = self.results.get("plan", {}).get("finetune_step_fraction", 1.0)
        if num_train_examples is not None and fraction < 1.0:
            full = num_train_steps(num_train_examples, hp.train_batch_size,
                                   hp.num_train_epochs, hp.max_train_steps)
            hp.max_train_steps = max(1, int(full * fraction))
        return hp

    def encoder_configs(self, built):
        return {"convbert": built["convbert"][0].config, "electra": built["electra"][0].config,
                "random": built["convbert"][0].config}

    def start_weights(self, model, built):
        """{official name: array} each model's trials start from."""
        from finetune.jax_trainer import random_encoder_weights
        if model == "random":
            return random_encoder_weights(built["convbert"][0].config, self.seed + 1)
        from model import checkpoints
        _, _, tensors = checkpoints.resolve_checkpoint(
            os.path.join(self.work, "pretrain", model, "discriminator"))
        return tensors

    def finetune(self, built, features):
        from finetune.glue import leaderboard
        from finetune.glue_task import to_predictions
        finetuners = self.finetuners
        configs = self.encoder_configs(built)
        weights = {}
        round_seconds = None
        for trial in range(1, self.recipe.max_trials + 1):
            if trial > 1 and round_seconds is not None and round_seconds > self.left():
                self.log(f"fine-tuning: {self.left():.0f}s left, a round of seeds took "
                         f"{round_seconds:.0f}s: stopping after {trial - 1} seed(s)")
                break
            start = time.time()
            for model in MODELS:
                for task in self.tasks:
                    model_dir = os.path.join(self.work, "finetune", model)
                    metrics_file = os.path.join(model_dir, "results",
                                                f"{task}_dev_metrics_trial{trial}.json")
                    if fileio.exists(metrics_file):
                        continue
                    if model not in weights:
                        weights[model] = self.start_weights(model, built)
                    train, dev, guids = features[task]
                    hp = self.finetune_hparams(task, len(train["input_ids"]))
                    finetuner = finetuners.get(configs[model], task, hp)
                    seed = hp.seed + trial - 1
                    finetuner.start(weights[model], seed)
                    label = f"{model} {task} seed {seed}"
                    finetuner.train(train, hp, seed=seed, label=label)
                    preds = to_predictions(task, finetuner.predict(dev, hp.eval_batch_size))
                    metrics = leaderboard.write_dev_predictions(
                        model_dir, task, guids, preds, dev["label_ids"], trial=trial)
                    self.log(f"{label}: dev " + ", ".join(f"{k} {v:.2f}"
                                                          for k, v in metrics.items()))
                self.report()   # what a cut-off run reached still comes back
            round_seconds = time.time() - start

    def load_features(self):
        from finetune import feature_files
        directory = os.path.join(self.bundle_dir, self.bundle["features_dir"])
        manifest = feature_files.read_manifest(directory)
        feature_files.check_compatible(
            manifest, os.path.join(directory, "manifest.json"),
            max_seq_length=self.recipe.finetune["max_seq_length"])
        features = {}
        for task in self.tasks:
            train, _ = feature_files.load_split(directory, task, "train", manifest)
            dev, guids = feature_files.load_split(directory, task, "dev", manifest)
            if self.recipe.max_eval_examples:
                dev = {k: v[:self.recipe.max_eval_examples] for k, v in dev.items()}
                guids = guids[:self.recipe.max_eval_examples]
            features[task] = (train, dev, list(guids))
        return features

    # -------------------------------------------------------------- 5. report
    def glue_entries(self):
        from finetune.glue.metrics import PAPER_METRIC
        from reproduce.report import task_summary
        return {model: {task: {"metric": PAPER_METRIC.get(task, "accuracy"),
                               "summary": summary}
                        for task in self.tasks
                        if (summary := task_summary(os.path.join(self.work, "finetune", model),
                                                    task)) is not None}
                for model in MODELS}

    def report(self):
        from reproduce import report
        glue = self.glue_entries()
        trials = max([e["summary"][e["metric"]]["n"] for m in glue.values() for e in m.values()]
                     or [0])
        data = {**self.results, "scale": self.recipe.name, "tasks": self.tasks,
                "models": list(MODELS), "num_trials": trials, "glue": glue,
                "pretraining": self.results.get("pretraining", {}),
                "pretraining_helps": report.pretraining_helps(glue), "glue_by_step": {},
                "elapsed_s": round(self.elapsed(), 1)}
        report.write_text(os.path.join(self.out, "results.json"),
                          json.dumps(data, indent=2) + "\n")
        report.write_text(os.path.join(self.out, "results.md"), self.markdown(data))
        if data["pretraining"]:
            report.plot_pretraining(data, os.path.join(self.out, "pretraining_curves.png"))
        if any(glue.values()):
            report.plot_glue(data, os.path.join(self.out, "glue_scores.png"))
        if "throughput" in self.results:
            report.write_text(os.path.join(self.out, "throughput.json"),
                              json.dumps(self.results["throughput"], indent=2) + "\n")

    def markdown(self, data):
        from reproduce import report
        lines = [f"# GPU run, recipe `{self.recipe.name}`", ""]
        tp = data.get("throughput")
        if tp:
            lines += [f"Device: {tp['device']} ({tp['platform']}), JAX {tp['jax']}; budget "
                      f"{self.budget_s:.0f}s, elapsed {data['elapsed_s']:.0f}s; stages (s): "
                      + ", ".join(f"{k} {v:.0f}" for k, v in self.stage_seconds.items()), "",
                      f"RTD pre-training throughput, {tp['precision']}, batch {tp['batch']} x "
                      f"{tp['seq_len']}:", "",
                      "| model | step (ms) | sequences/s | MFU | compiled after (s) |",
                      "|---|---|---|---|---|"]
            for model, row in tp["models"].items():
                mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
                lines.append(f"| {report.MODEL_TITLES[model]} | {row['step_ms']:.2f} | "
                             f"{row['sequences_per_second']:,.0f} | {mfu} | "
                             f"{row['compiled_after_s']} |")
            lines.append("")
        plan = data.get("plan")
        if plan:
            lines += [f"Pre-training steps per model (chosen from the step times above): "
                      f"{plan['steps']}. Fine-tuning steps: "
                      + ("the official count" if plan["finetune_step_fraction"] >= 1.0 else
                         f"{plan['finetune_step_fraction']:.2f} of the official count on every "
                         "task (the budget's cap)") + ".", ""]
        lines += [schedule_text(self.recipe.lr_schedule()), ""]
        lines.append(f"Fine-tuning: official settings, SST-2 capped at {self.recipe.sst_epochs:g} "
                     f"epoch(s); seeds run in rounds while the budget lasts.")
        lines.append("")
        return "\n".join(lines) + report.markdown(data)

    # -------------------------------------------------------------- all stages
    def run(self):
        from data.pretraining_arrays import array_batches, load_arrays
        from pretrain import heldout_eval
        b = self.bundle
        self.log(f"bundle {self.bundle_dir}: {b.get('train_examples')} training examples, "
                 f"budget {self.budget_s:.0f}s")
        train_arrays = load_arrays(os.path.join(self.bundle_dir, b["pretrain_file"]))
        heldout_arrays = load_arrays(os.path.join(self.bundle_dir, b["heldout_file"]))
        heldout = heldout_eval.masked_heldout(
            {k: v[:self.recipe.heldout_examples] for k, v in heldout_arrays.items()},
            **b["special_ids"])
        features = self.load_features()
        built = self._stage("build", lambda: self.build_models(features))
        batch = next(array_batches(train_arrays, self.recipe.pretrain["train_batch_size"],
                                   seed=12345))
        saved_throughput = os.path.join(self.work, "throughput.json")
        if fileio.exists(saved_throughput) and fileio.exists(self.plan_path):
            # A rerun: the first run's timings and plan stand, and only the steps of the stages
            # left are compiled (on a GPU the compile stage is ~2 minutes of device time).
            self.results["throughput"] = json.loads(fileio.read_text(saved_throughput))
            self.log(f"throughput from {saved_throughput}")
            steps = json.loads(fileio.read_text(self.plan_path))["steps"]
            models, finetune = self.work_left(steps)
            self.compile_seconds = self._stage("compile", lambda: self.precompile(
                built, batch, heldout, features, pretrain_models=models, finetune=finetune))
            finetune_step_s = {k: v / 1e3 for k, v in
                               self.results["throughput"]["finetune_step_ms"].items()}
        else:
            self.compile_seconds = self._stage(
                "compile", lambda: self.precompile(built, batch, heldout, features))
            self.results["throughput"] = self._stage("throughput",
                                                     lambda: self.throughput(built, batch))
            finetune_step_s = self._stage("throughput",
                                          lambda: self.finetune_step_seconds(built, features))
            self.results["throughput"]["finetune_step_ms"] = {
                k: round(1e3 * v, 3) for k, v in finetune_step_s.items()}
            self.results["throughput"]["heldout_eval_s"] = round(
                self._stage("throughput", lambda: self.heldout_seconds(heldout)), 2)
            fileio.write_text_atomic(saved_throughput,
                                     json.dumps(self.results["throughput"], indent=2) + "\n")
        self.results["compile_seconds"] = self.compile_seconds
        self.report()
        plan = self.results["plan"] = self._stage("plan", lambda: self.plan(
            self.results["throughput"], self.finetune_round_seconds(features, finetune_step_s)))
        self.results["pretraining"] = {}
        for model in PRETRAINED:
            self.results["pretraining"][model] = self._stage(
                f"pretrain_{model}",
                lambda m=model: self.pretrain(m, built, plan["steps"], train_arrays, heldout))
            self.report()
        self._stage("finetune", lambda: self.finetune(built, features))
        self.report()
        self.log(f"done in {self.elapsed():.0f}s")
        return self.check_outputs()

    def check_outputs(self):
        """Every output file there and a GLUE cell for every model x task; the missing ones."""
        missing = [f for f in OUTPUT_FILES if f != "gpu_run.log"
                   and not fileio.exists(os.path.join(self.out, f))]
        data = json.loads(fileio.read_text(os.path.join(self.out, "results.json")))
        missing += [f"GLUE cell {model} x {task}" for model in MODELS for task in self.tasks
                    if task not in data["glue"].get(model, {})]
        self.log("outputs: " + ("all present" if not missing else "missing " + ", ".join(missing)))
        return missing


def main(argv=None):
    import argparse
    from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle_dir", default="gpu_bundle")
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--work_dir", default=os.path.join("runs", "gpu_budget"))
    ap.add_argument("--budget_s", type=float, default=330.0,
                    help="wall seconds for the whole run (default 330: <= 6 minutes with "
                         "start-up on one H100)")
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
                     args.work_dir, args.budget_s, log, seed=args.seed)
        missing = run.run()
    except (GpuRunError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
