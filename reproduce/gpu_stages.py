"""The one-GPU run's stages (reproduce/gpu_budget.py runs them in this order, in one process on
Keras-on-JAX; each skips what the work folder, reproduce/gpu_work.py, already holds):

1. `load_inputs`: the bundle's pre-training arrays, its held-out batch and GLUE features;
2. `GpuModels` (build): both pre-trainers on JAX training cores, their held-out scorers on the
   device, the fine-tuning models (one per encoder x head shape);
3. `GpuModels.compile`: every program of the stages left, compiled up front in parallel;
4. `throughput`, `finetune_step_seconds`, `heldout_seconds`: the timings the plan
   (reproduce/gpu_plan.py) is made from;
5. `Pretraining`: ConvBERT, then ELECTRA, with held-out points along the way;
6. `Finetuning`: ConvBERT, ELECTRA and random init on the GLUE tasks, seeds in rounds.
"""
import functools
import json
import os
import time

import numpy as np

from base import fileio
from pretrain.task import PretrainingTask
from reproduce.gpu_recipe import finetune_hparams, head_tasks, pretrain_hparams
from reproduce.recipes import MODELS, PRETRAINED


class GpuRunError(RuntimeError):
    """A bad bundle, work folder or flag; one line."""


class PretrainingCollapsed(Exception):
    """Raised at a held-out point whose discriminator is at the prior (`collapse`): the model's
    pre-training stops there."""


def collapse(points, total_steps, recipe):
    """Why the newest of the held-out `points` [(step, disc AUC)] says the discriminator
    collapsed, or None: its AUC is at the prior (at most 0.5 + `recipe.collapse_margin`) after
    an earlier point reached `recipe.learned_auc`, or at or past the middle of a
    `total_steps` run (docs/RESULTS.md §11-§12: 0.50 from the first points on)."""
    if recipe.collapse_margin is None or not points:
        return None
    step, auc = points[-1]
    if auc > 0.5 + recipe.collapse_margin:
        return None
    best = max((a for _, a in points[:-1]), default=0.0)
    if best >= recipe.learned_auc:
        return (f"held-out discriminator AUC fell to {auc:.3f} at step {step} (the prior is "
                f"0.5) from {best:.3f}")
    if 2 * step >= total_steps:
        return (f"held-out discriminator AUC still {auc:.3f} at step {step} of {total_steps} "
                "(the prior is 0.5)")
    return None


class ArrayPretrainingTask(PretrainingTask):
    """The pre-training task (pretrain/task.py) reading the bundle's compact arrays
    (data/pretraining_arrays.py; `arrays` set before training) instead of TFRecord shards."""
    arrays = None

    def host_batches(self, skip_batches):
        from data.pretraining_arrays import array_batches
        return array_batches(self.arrays, self.hp.train_batch_size, seed=self.hp.seed,
                             skip_batches=skip_batches)


# ------------------------------------------------------------------------------ 1. inputs
def read_bundle(bundle_dir):
    """bundle.json of `bundle_dir` (GpuRunError naming it when missing)."""
    path = os.path.join(bundle_dir, "bundle.json")
    if not fileio.exists(path):
        raise GpuRunError(f"{path}: no bundle here (build it with bash scripts/gpu_bundle.sh)")
    return json.loads(fileio.read_text(path))


def load_features(bundle_dir, bundle, recipe, tasks):
    """{task: (train, dev, dev guids)} from the bundle's GLUE features (dev sets cut to
    `recipe.max_eval_examples` when set)."""
    from finetune import feature_files
    directory = os.path.join(bundle_dir, bundle["features_dir"])
    manifest = feature_files.read_manifest(directory)
    feature_files.check_compatible(manifest, os.path.join(directory, "manifest.json"),
                                   max_seq_length=recipe.finetune["max_seq_length"])
    features = {}
    for task in tasks:
        train, _ = feature_files.load_split(directory, task, "train", manifest)
        dev, guids = feature_files.load_split(directory, task, "dev", manifest)
        if recipe.max_eval_examples:
            dev = {k: v[:recipe.max_eval_examples] for k, v in dev.items()}
            guids = guids[:recipe.max_eval_examples]
        features[task] = (train, dev, list(guids))
    return features


class Inputs:
    """What the stages read from the bundle: `train` (pre-training arrays), `heldout` (the
    masked held-out batch), `features` ({task: (train, dev, guids)}) and `batch` (one fixed
    pre-training batch: the one the programs are compiled and timed on)."""

    def __init__(self, bundle_dir, bundle, recipe, tasks):
        from data.pretraining_arrays import array_batches, load_arrays
        from pretrain import heldout_eval
        self.train = load_arrays(os.path.join(bundle_dir, bundle["pretrain_file"]))
        held = load_arrays(os.path.join(bundle_dir, bundle["heldout_file"]))
        self.heldout = heldout_eval.masked_heldout(
            {k: v[:recipe.heldout_examples] for k, v in held.items()}, **bundle["special_ids"])
        self.bundle_dir, self.bundle = bundle_dir, bundle
        self.features = load_features(bundle_dir, bundle, recipe, tasks)
        self.batch = next(array_batches(self.train, recipe.pretrain["train_batch_size"],
                                        seed=12345))

    def dev_examples(self):
        """({task: dev examples scored}, {task: dev examples in the bundle}): what the report
        names."""
        from finetune import feature_files
        directory = os.path.join(self.bundle_dir, self.bundle["features_dir"])
        full = {e["task"]: e["examples"]
                for e in feature_files.read_manifest(directory)["files"].values()
                if e["split"] == "dev" and e["task"] in self.features}
        return ({task: len(dev["input_ids"]) for task, (_, dev, _) in self.features.items()},
                full)

    def task_sizes(self):
        """{task: (training examples, dev examples)}: what the plan's estimate counts."""
        return {task: (len(train["input_ids"]), len(dev["input_ids"]))
                for task, (train, dev, _) in self.features.items()}


# ------------------------------------------------------------------------------ 2-3. build, compile
class GpuModels:
    """The build stage: {model: (pretrainer, core, program)} in `pretrainers` (the pre-training
    task on a JAX core; its program takes the schedule as an argument, so it serves any planned
    length), the held-out scorers and the fine-tuning models (`finetuners`, one per encoder x
    head shape; "random" shares ConvBERT's)."""

    def __init__(self, recipe, bundle, tasks, seed, log):
        from training.settings import set_precision
        from finetune.jax_trainer import Finetuners
        from pretrain import heldout_eval
        from pretrain.jax_trainer import pretraining_core
        self.recipe, self.bundle, self.tasks, self.seed, self.log = \
            recipe, bundle, list(tasks), seed, log
        set_precision(recipe.pretrain["precision"])
        self.pretrainers, self._scorer_fns, self._scorers = {}, {}, {}
        for model in PRETRAINED:
            hp = pretrain_hparams(recipe, bundle, model, 1, seed)
            task, core = pretraining_core(
                hp, [], hp.vocab_size, bundle["special_ids"], log=log,
                task=ArrayPretrainingTask(hp, [], hp.vocab_size, bundle["special_ids"]))
            self.pretrainers[model] = (task.pretrainer, core, core.train_program())
            # makes the model's device scorer of a held-out batch (heldout_scorer)
            self._scorer_fns[model] = functools.partial(heldout_eval.device_scorer,
                                                        task.pretrainer)
        self.finetuners = Finetuners(log=log)
        for model in PRETRAINED:
            for task in head_tasks(self.tasks):
                self.finetuner(model, task)

    def config(self, model):
        """The encoder config `model` ("convbert", "electra" or "random") fine-tunes."""
        return self.pretrainers["electra" if model == "electra" else "convbert"][0].config

    def finetuner(self, model, task, hp=None):
        """The compiled finetuner of `model`'s encoder and `task`'s head shape."""
        return self.finetuners.get(self.config(model), task,
                                   hp or finetune_hparams(self.recipe, task, self.seed))

    def heldout_scorer(self, model, heldout):
        """`model`'s held-out scorer on the device (pretrain/heldout_eval.DeviceScorer: the
        generator's logits never leave the device), made at its first use: the batch, its masking
        and its sampling noise are uploaded once, and both models share that upload."""
        scorer = self._scorers.get(model)
        if scorer is None or scorer.batch is not heldout:
            uploaded = next((s.heldout for s in self._scorers.values() if s.batch is heldout),
                            heldout)
            scorer = self._scorers[model] = self._scorer_fns[model](
                uploaded, self.recipe.pretrain["temperature"])
        return scorer

    def compile(self, inputs, pretrain_models=PRETRAINED, finetune=True):
        """Every step of the run compiled up front, in parallel (training/jax_programs.precompile):
        those of `pretrain_models`' pre-training and held-out scoring, and with `finetune` the
        fine-tuning and predict steps (a resumed run: only what is left to run). {program:
        seconds until it was compiled}."""
        from training.jax_programs import precompile
        jobs = []
        for model, (_, core, step) in self.pretrainers.items():
            if model not in pretrain_models:
                continue
            jobs.append((f"pretrain {model}", step, core.example_args(inputs.batch)))
            jobs += [(f"{name} {model}", program, args) for name, program, args in
                     self.heldout_scorer(model, inputs.heldout).precompile_jobs()]
        for model in PRETRAINED if finetune else ():
            for task in head_tasks(self.tasks):
                hp = finetune_hparams(self.recipe, task, self.seed)
                jobs += [(f"{name} {model}", step, args) for name, step, args in
                         self.finetuner(model, task, hp).precompile_jobs(
                             inputs.features[task][0], hp.train_batch_size, hp.eval_batch_size)]
        if not jobs:
            self.log("precompile: nothing left to run")
            return {}
        return precompile(jobs, log=self.log)


# ------------------------------------------------------------------------------ 4. timings
def throughput(models, inputs, compile_seconds, log):
    """RTD pre-training throughput (docs/PERFORMANCE.md P4): each model's program timed on one
    fixed batch in interleaved rounds (ConvBERT, ELECTRA, ConvBERT, ...), calls of the size
    training makes, state donated; median step, sequences/s and MFU (model FLOPs counted as
    benchmarks/gpu_pretrain.py counts them: model/flops.py)."""
    import jax
    from model.flops import peak_bf16_tflops, rtd_model_flops_per_sequence
    from training.jax_programs import seconds_per_step
    r = models.recipe
    built = models.pretrainers
    args = {model: core.example_args(inputs.batch) for model, (_, core, _) in built.items()}
    times = {model: [] for model in built}
    calls = {model: max(1, r.throughput_steps // int(args[model].num_steps)) for model in built}
    for round_index in range(r.throughput_rounds):
        for model, (_, _, step) in built.items():
            figures, args[model] = seconds_per_step(step, args[model], calls[model],
                                                    warm_up=round_index == 0)
            times[model] += figures
    device = jax.devices()[0]
    peak = peak_bf16_tflops(device.device_kind)
    b, t = inputs.batch["input_ids"].shape
    rows = {}
    for model, (pretrainer, _, _) in built.items():
        step_s = float(np.median(times[model]))
        flops = rtd_model_flops_per_sequence(pretrainer.config, pretrainer.gen_config, t)
        seqs = b / step_s
        rows[model] = {"step_ms": round(1e3 * step_s, 3), "sequences_per_second": round(seqs, 1),
                       "model_flops_per_sequence": flops,
                       "compiled_after_s": compile_seconds.get(f"pretrain {model}"),
                       "mfu": None if peak is None else round(seqs * flops / (peak * 1e12), 4),
                       "round_step_ms": [round(1e3 * x, 3) for x in times[model]]}
        log(f"{model}: {1e3 * step_s:.2f} ms/step, {seqs:,.0f} seq/s, MFU "
            + ("n/a" if peak is None else f"{100 * rows[model]['mfu']:.1f}%"))
    return {"device": device.device_kind, "platform": device.platform,
            "jax": jax.__version__, "precision": r.pretrain["precision"],
            "batch": int(b), "seq_len": int(t), "peak_bf16_tflops": peak,
            "rounds": r.throughput_rounds, "steps_per_round": r.throughput_steps,
            "models": rows,
            "convbert_over_electra": round(rows["convbert"]["sequences_per_second"]
                                           / rows["electra"]["sequences_per_second"], 3),
            "counting": "median step over interleaved rounds of one fixed batch; model "
                        "FLOPs = 3 x seq_len x (F_disc + F_gen) (model/flops.py); one "
                        "jitted step = masking + generator + sampling + discriminator + "
                        "backward + AdamW, as benchmarks/gpu_pretrain.py"}


def finetune_step_seconds(models, inputs, log):
    """{model: seconds per fine-tuning step} of the binary head at the recipe's batch, timed as
    the throughput steps are (the step that fine-tunes, compiled already); "random" is
    ConvBERT's."""
    from training.jax_programs import seconds_per_step
    r = models.recipe
    task = head_tasks(models.tasks)[0]
    hp = finetune_hparams(r, task, models.seed)
    seconds = {}
    for model in PRETRAINED:
        finetuner = models.finetuner(model, task, hp)
        args = finetuner.example_train_args(inputs.features[task][0], hp.train_batch_size)
        times, _ = seconds_per_step(finetuner.train_program, args,
                                    max(1, r.throughput_steps // int(args.num_steps)),
                                    rounds=r.throughput_rounds)
        seconds[model] = float(np.median(times))
        log(f"{model}: fine-tuning step {1e3 * seconds[model]:.2f} ms (batch "
            f"{hp.train_batch_size})")
    seconds["random"] = seconds["convbert"]
    return seconds


def heldout_seconds(models, inputs, log):
    """Wall of one held-out evaluation of each pre-trained model, summed (the programs are
    compiled already): what each held-out point costs the pre-training stage."""
    start = time.perf_counter()
    for model in PRETRAINED:
        models.heldout_scorer(model, inputs.heldout).evaluate()
    seconds = time.perf_counter() - start
    log(f"held-out evaluation: {seconds:.1f}s for both models")
    return seconds


# ------------------------------------------------------------------------------ 5. pre-training
class HeldoutPoints:
    """One model's held-out points in step order: (step, metrics, snapshot of the variables).
    Their metrics go to heldout_points.jsonl beside the model as each is scored, so a run
    stopped mid-way keeps them: its rerun resumes from the stop's checkpoint and scores only the
    points after it, and the collapse check and the curve still see every point (those from
    before the stop without a snapshot: no `disc_auc_last_gen`)."""

    FILE = "heldout_points.jsonl"

    def __init__(self, model_dir):
        from reproduce.report import read_jsonl
        self.path = os.path.join(model_dir, self.FILE)
        self.points = [(m.pop("step"), m, None) for m in read_jsonl(self.path)]

    def add(self, step, metrics, values):
        """A point scored now; one of an earlier run at or after `step` is from steps this run
        trains again (it resumed from an earlier checkpoint, or from none), so it goes."""
        self.points = [p for p in self.points if p[0] < step] + [(step, dict(metrics), values)]
        fileio.write_text_atomic(self.path, "".join(
            json.dumps({"step": s, **m}) + "\n" for s, m, _ in self.points))

    def aucs(self):
        """[(step, disc AUC)]: what `collapse` reads."""
        return [(s, m["disc_auc"]) for s, m, _ in self.points]

    def last_step(self):
        return self.points[-1][0]

    def curve(self, discriminate):
        """heldout_curve.jsonl's rows; `discriminate(snapshot)`: the point's AUC on the fixed
        corruption, for the points that have their snapshot."""
        return [{"step": s, **m, **({} if values is None else
                                    {"disc_auc_last_gen": discriminate(values)})}
                for s, m, values in self.points]


class Pretraining:
    """One model's pre-training for the planned steps: the training core's `fit_task` on the
    bundle's arrays; every 1/`evaluations` of the run the fixed held-out batch is scored (a
    point at which the discriminator has collapsed to the prior, `collapse`, stops the model's
    pre-training: work.json's folder keeps collapsed.json, and the model is not fine-tuned), and
    at the end every point's discriminator against the last generator's replacements;
    checkpoints at the middle and the end (a rerun resumes from them)."""

    def __init__(self, models, inputs, work, log):
        self.models, self.inputs, self.work, self.log = models, inputs, work, log

    def run(self, model, steps):
        """The report's record of `model` pre-trained for `steps` (reproduce/report.py's
        `pretraining_record`), training only what is not done yet."""
        from pretrain import heldout_eval
        from pretrain.hparams import train_settings
        from reproduce.report import pretraining_record
        recipe = self.models.recipe
        model_dir = self.work.pretrain_dir(model)
        done = self.work.pretrained_steps(model)
        if done is not None and done >= steps:
            self.log(f"{model}: pre-trained ({steps} steps), skipped")
            return pretraining_record(model_dir)
        collapsed = self.work.collapsed(model)
        if collapsed is not None:
            self.log(f"{model}: pre-training stopped earlier, {collapsed['reason']}; skipped")
            return collapsed["record"]
        pretrainer, core, step = self.models.pretrainers[model]
        hp = pretrain_hparams(recipe, self.models.bundle, model, steps, self.models.seed)
        fileio.makedirs(model_dir)
        hp.to_json(os.path.join(model_dir, "hparams.json"))
        scorer = self.models.heldout_scorer(model, self.inputs.heldout)
        points = HeldoutPoints(model_dir)

        def score(step_done):
            metrics = scorer.evaluate()
            points.add(step_done, metrics, heldout_eval.snapshot(pretrainer))
            self.log(f"{model} step {step_done}: held-out gen acc "
                     f"{metrics['gen_accuracy']:.3f}, disc AUC {metrics['disc_auc']:.3f}")
            why = collapse(points.aucs(), steps, recipe)
            if why:
                raise PretrainingCollapsed(why)

        core.set_settings(train_settings(hp))
        core.label = model
        core.task.arrays = self.inputs.train
        started = time.time()
        try:
            core.fit_task(
                checkpoint_dir=os.path.join(model_dir, "jax_checkpoints"), export_dir=model_dir,
                summary_path=os.path.join(model_dir, "pretraining_summary.json"),
                summary_extra={"model_name": model, "model_size": hp.model_size},
                program=step, after_save=score,
                # A checkpoint (every variable, ~200 MB at small size) at the middle and the end
                # only: the held-out points in between need none.
                checkpoint_every=hp.save_checkpoints_steps * max(1, recipe.evaluations // 2))
        except PretrainingCollapsed as e:
            self.write_curve(model_dir, scorer, points)
            return self.stopped(model, model_dir, str(e), points, core, hp, started)
        self.write_curve(model_dir, scorer, points)
        return pretraining_record(model_dir)

    @staticmethod
    def write_curve(model_dir, scorer, points):
        """heldout_curve.jsonl: every point, and each point's discriminator on one fixed
        corruption (the last generator's)."""
        last = scorer.corrupt()
        lines = points.curve(lambda values: scorer.discriminate(last, values=values)["disc_auc"])
        fileio.write_text_atomic(os.path.join(model_dir, "heldout_curve.jsonl"),
                                 "\n".join(json.dumps(line) for line in lines) + "\n")

    def stopped(self, model, model_dir, reason, points, core, hp, started):
        """The record of a pre-training stopped by `collapse` (also kept in collapsed.json, so a
        rerun neither trains it again nor fine-tunes it)."""
        from reproduce.report import read_jsonl
        step = points.last_step()
        wall = time.time() - started
        self.log(f"{model}: pre-training stopped at step {step}: {reason}; it is not fine-tuned")
        record = {"global_step": step, "collapsed": reason,
                  "trainable_parameters": int(core.num_params), "wall_seconds": round(wall, 2),
                  "sequences_per_second": round(step * hp.train_batch_size / max(wall, 1e-9), 1),
                  "first_step_seconds": None, "final_window": None, "history": [],
                  "heldout": read_jsonl(os.path.join(model_dir, "heldout_curve.jsonl"))}
        self.work.write_json(self.work.collapsed_path(model), {"reason": reason,
                                                               "record": record})
        return record


# ------------------------------------------------------------------------------ 6. fine-tuning
class Finetuning:
    """ConvBERT, ELECTRA and random init on every task, seed by seed and, within a seed, task by
    task with every model on a task before the next one (`order`), while the budget lasts: a
    budget cut removes whole tasks of a seed, never one model's cell (random init, the baseline,
    runs beside the others on each task). Each trial's dev metrics are written as
    run_finetuning.py writes them, so a rerun skips the trials done. `fraction`: of the official
    steps (the plan's); `trial_seconds`: {(model, task): estimated seconds of one trial}."""

    def __init__(self, models, inputs, work, log, fraction=1.0, trial_seconds=None, seeds=None):
        self.models, self.inputs, self.work, self.log = models, inputs, work, log
        self.fraction, self.trial_seconds = fraction, trial_seconds or {}
        # the seeds this call may run (None: every seed of the recipe): call 1 of a two-call
        # plan runs its own, leaving the others to call 2
        self.seeds = seeds
        self._weights = {}

    @staticmethod
    def pretrained_of(model):
        """The pre-trained model `model` fine-tunes (None: random init)."""
        return model if model in PRETRAINED else None

    def start_weights(self, model):
        """{official name: array} each of `model`'s trials starts from."""
        from finetune.jax_trainer import random_encoder_weights
        if model not in self._weights:
            if model == "random":
                self._weights[model] = random_encoder_weights(self.models.config("random"),
                                                              self.models.seed + 1)
            else:
                from model import checkpoints
                _, _, self._weights[model] = checkpoints.resolve_checkpoint(
                    os.path.join(self.work.pretrain_dir(model), "discriminator"))
        return self._weights[model]

    def trial(self, model, task, trial):
        """One seed of `model` on `task` (finetune/glue_task.py `glue_trial`, the trial of every
        fine-tuning run): trained, dev predictions and metrics written as run_finetuning.py
        writes them."""
        from finetune.finetuner import trial as numbered_trial
        from finetune.glue_task import GlueSets, glue_trial
        train, dev, guids = self.inputs.features[task]
        hp = finetune_hparams(self.models.recipe, task, self.models.seed, self.fraction,
                              len(train["input_ids"]))
        model_dir = self.work.finetune_dir(model)
        this = numbered_trial(hp, task, model_dir, trial)
        this = this._replace(label=f"{model} {task} seed {this.seed}")
        glue_trial(task, hp, GlueSets(task, train, [(task, dev, guids)], []),
                   self.models.finetuner(model, task, hp), self.start_weights(model), this,
                   model_dir, log=self.log)

    def order(self):
        """[(seed, task, [models])]: the cells in the order they run, the models stopped by the
        collapse check left out."""
        models = [m for m in MODELS if self.work.collapsed(self.pretrained_of(m)) is None]
        seeds = self.seeds or range(1, self.models.recipe.num_trials + 1)
        return [(trial, task, models) for trial in seeds for task in self.models.tasks]

    def run(self, left, after_task):
        """Every trial not done yet, in `order`, while the budget lasts: a seed starts only while
        `left()` seconds cover the last seed's wall, a task only while they cover the estimates
        of all its models' trials. after_task(): called after each task (the report, so what a
        cut-off run reached still comes back). The cells not run, [(seed, task)]."""
        for model in MODELS:
            stopped = self.work.collapsed(self.pretrained_of(model))
            if stopped is not None:
                self.log(f"{model}: not fine-tuned, its pre-training stopped: "
                         f"{stopped['reason']}")
        order = self.order()
        seed_seconds, seed_started, current = None, time.time(), 1
        for index, (trial, task, models) in enumerate(order):
            if trial != current:
                seed_seconds, seed_started, current = time.time() - seed_started, time.time(), \
                    trial
            todo = [m for m in models
                    if not fileio.exists(self.work.metrics_file(m, task, trial))]
            if not todo:
                continue
            needs = sum(self.trial_seconds.get((m, task), 0.0) for m in todo)
            if trial > 1 and seed_seconds is not None and task == self.models.tasks[0] \
                    and seed_seconds > left():
                self.log(f"fine-tuning: {left():.0f}s left, a seed took {seed_seconds:.0f}s: "
                         f"stopping before seed {trial}")
                return self.not_run(order[index:])
            if needs > left():
                self.log(f"fine-tuning: {left():.0f}s left, {task} seed {trial} is estimated at "
                         f"{needs:.0f}s for {len(todo)} model(s): stopping there")
                return self.not_run(order[index:])
            for model in todo:
                self.trial(model, task, trial)
            after_task()
        return []

    def not_run(self, cells):
        """[(seed, task)] of `cells` whose trials are not all written."""
        return [(trial, task) for trial, task, models in cells
                if any(not fileio.exists(self.work.metrics_file(m, task, trial))
                       for m in models)]
