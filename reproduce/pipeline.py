"""The reproduction's stages: corpus -> vocab -> shards -> pre-train -> held-out curves -> GLUE.

Each stage calls the toolkit's own driver (build_pretraining_dataset.py, run_pretraining.py,
run_finetuning.py, reproduce/rtd_reference.py) as a subprocess, so it gets exactly what a user
of that driver gets (checks, one-line errors, progress with ETA, resume), and streams its output
with a `[stage]` prefix into the console and `<output_dir>/logs/<stage>.log`. A stage is skipped
when its result is already there, so rerunning the same command resumes the reproduction:

    <output_dir>/
      vocab.txt                              only when no --vocab_file is given (learned)
      shards/<corpus name>/                  TFRecord shards, one directory per corpus directory
      pretrain/{convbert,electra}/           run_pretraining.py model_dirs (resume inside a stage;
                                             one per entry of `pretrained`, the recipe's by default)
      pretrain/<model>/heldout_curve.jsonl   the fixed held-out batch at every checkpoint
      reference/                             optional: the PyTorch ELECTRA reference (--reference)
      finetune/<model>/                      run_finetuning.py model_dirs (results/)
      pretrain/<model>/steps/<N>/            --finetune_at_steps: the export of kept checkpoint N
      finetune/<model>_step<N>/              ... and its fine-tuning (same tasks, seeds, recipe)
      logs/<stage>.log
      results.md, results.json, pretraining_curves.png, glue_scores.png   (reproduce.report;
      glue_vs_steps.png with --finetune_at_steps)

The held-out batch comes from the last shard of the first corpus directory, which no model
trains on.
"""
import json
import os
import subprocess
import sys
import time

import tensorflow as tf

from reproduce.recipes import GLUE_TASKS, MODELS, finetuned, pretrained_steps

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DONE_FILE = "stage_done.json"  # written when a stage without its own record ends


def pretrain_dir_of(output_dir, model):
    """run_pretraining.py's model_dir of `model` in a reproduction's output directory."""
    return os.path.join(output_dir, "pretrain", model)


def finetune_dir_of(output_dir, model, step=None):
    """run_finetuning.py's model_dir of `model` (the final model, or with `step` the export of
    kept checkpoint `step`) in a reproduction's output directory."""
    return os.path.join(output_dir, "finetune", model if step is None else f"{model}_step{step}")


class ReproductionError(RuntimeError):
    """A stage failed or an input is unusable; the message is one line."""


def _say(message):
    print(message, flush=True)


class Reproduction:
    def __init__(self, recipe, output_dir, corpus_dirs, glue_dir, vocab_file=None,
                 vocab_size=30522, num_shards=16, build_processes=2, models=MODELS, tasks=None, seed=0,
                 reference=False, pretrain_flags=(), finetune_flags=(), log=_say, pretrained=None,
                 heldout_curves=True, finetune_at_steps=()):
        """`pretrained`: {name: recipes.PretrainedModel} of the models to pre-train (default: the
        recipe's ConvBERT and ELECTRA); `models`: which names are fine-tuned (those of
        `pretrained`, and "random": the recipe's ConvBERT with random weights).
        `heldout_curves`: score every kept checkpoint on the held-out batch.
        `finetune_at_steps`: earlier kept checkpoints of each pre-trained model to fine-tune too
        (what pre-training buys as a function of its length)."""
        self.recipe = recipe
        self.pretrained = dict(recipe.pretrained_models() if pretrained is None else pretrained)
        self.heldout_curves = heldout_curves
        self.finetune_at_steps = recipe.checked_finetune_steps(finetune_at_steps)
        self.out = str(output_dir)
        self.corpus_dirs = list(corpus_dirs)
        self.glue_dir = glue_dir
        self.user_vocab = vocab_file
        self.vocab_size = vocab_size
        self.num_shards = num_shards
        self.build_processes = build_processes
        self.models = tuple(models)
        self.seed = seed
        self.reference = reference
        self.pretrain_flags = list(pretrain_flags)
        self.finetune_flags = list(finetune_flags)
        self.log = log
        self.tasks = list(tasks) if tasks else self.present_tasks()
        if not self.corpus_dirs:
            raise ReproductionError("no corpus directory given (--corpus_dirs)")
        if num_shards < 2:
            raise ReproductionError("--num_shards must be at least 2 (one shard is held out)")

    # ------------------------------------------------------------------ paths
    def path(self, *parts):
        return os.path.join(self.out, *parts)

    @property
    def vocab_file(self):
        return self.user_vocab or self.path("vocab.txt")

    def shard_dir(self, corpus_dir):
        return self.path("shards", os.path.basename(os.path.normpath(corpus_dir)))

    def pretrain_dir(self, model):
        return pretrain_dir_of(self.out, model)

    def finetune_dir(self, model, step=None):
        """Fine-tuning of the final model, or (`step`) of the export of kept checkpoint `step`."""
        return finetune_dir_of(self.out, model, step)

    def step_export_dir(self, model, step):
        return os.path.join(self.pretrain_dir(model), "steps", str(step))

    def present_tasks(self):
        """The five GLUE tasks with a train split under --glue_dir (QNLI/MNLI/QQP need one)."""
        from data.errors import DataError
        from finetune.glue.readers import task_file
        present = []
        for task in GLUE_TASKS if self.glue_dir else ():
            try:
                task_file(self.glue_dir, task, "train")   # raises when the file is not there
            except DataError:
                continue
            present.append(task)
        return present

    # ------------------------------------------------------------------ running drivers
    def _run(self, stage, args):
        """Runs `python <args>` from the repository root; output prefixed and logged."""
        tf.io.gfile.makedirs(self.path("logs"))
        log_path = self.path("logs", f"{stage}.log")
        env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        cmd = [sys.executable, *map(str, args)]
        start = time.time()
        self.log(f"[{stage}] {' '.join(cmd[1:])}")
        with tf.io.gfile.GFile(log_path, "w") as log_file:  # buckets cannot append: last attempt
            log_file.write("$ " + " ".join(cmd) + "\n")
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1)
            last = ""
            for line in proc.stdout:
                log_file.write(line)
                line = line.rstrip("\n")
                if line.strip() and not _noise(line):
                    last = line
                    self.log(f"[{stage}] {line}")
            code = proc.wait()
        if code != 0:
            raise ReproductionError(f"stage {stage} failed (exit {code}): {last.strip()} "
                                    f"(full log: {log_path})")
        self.log(f"[{stage}] done in {time.time() - start:.0f}s")

    @staticmethod
    def _mark_done(directory, **info):
        tf.io.gfile.makedirs(directory)
        path = os.path.join(directory, DONE_FILE)
        with tf.io.gfile.GFile(path + ".tmp", "w") as f:
            json.dump({"finished": time.strftime("%Y-%m-%d %H:%M:%S"), **info}, f)
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

    @staticmethod
    def _done(directory):
        return tf.io.gfile.exists(os.path.join(directory, DONE_FILE))

    # ------------------------------------------------------------------ stages
    def build_vocab(self):
        if self.user_vocab:
            if not tf.io.gfile.exists(self.user_vocab):
                raise ReproductionError(f"--vocab_file {self.user_vocab} does not exist")
            return
        if tf.io.gfile.exists(self.vocab_file):
            self.log(f"[vocab] {self.vocab_file} exists, skipped")
            return
        from data.vocab import build_vocab
        build_vocab(self.corpus_dirs, self.vocab_file, "wordpiece", self.vocab_size, min_count=2,
                    log=lambda message: self.log(f"[vocab] {message}"))

    def build_shards(self):
        from data.pretraining_builder import SUMMARY_FILE
        for corpus_dir in self.corpus_dirs:
            target = self.shard_dir(corpus_dir)
            if tf.io.gfile.exists(os.path.join(target, SUMMARY_FILE)):
                self.log(f"[shards] {target} exists, skipped")
                continue
            self._run(f"shards_{os.path.basename(target)}", [
                "build_pretraining_dataset.py", f"--corpus_dir={corpus_dir}",
                f"--vocab_file={self.vocab_file}", f"--output_dir={target}",
                f"--max_seq_length={self.max_seq_length}", f"--num_shards={self.num_shards}",
                f"--num_processes={self.build_processes}", "--noprogress"])

    @property
    def max_seq_length(self):
        return self.recipe.pretrain.get("max_seq_length", 128)

    def shard_files(self):
        """(training shards, held-out shards): the last non-empty shard of the first corpus."""
        from data.tfrecord_io import find_shards
        per_corpus = [[p for p in find_shards(os.path.join(self.shard_dir(d),
                                                           "pretrain_data.tfrecord-*"))
                       if tf.io.gfile.stat(p).length > 0] for d in self.corpus_dirs]
        first = sorted(per_corpus[0], key=lambda p: int(p.rsplit("-of-", 1)[0].rsplit("-", 1)[1]))
        if len(first) < 2:
            raise ReproductionError(f"{self.shard_dir(self.corpus_dirs[0])}: fewer than 2 non-empty "
                                    "shards; one is held out, so give more text or --num_shards")
        heldout = first[-1:]
        train = [p for files in per_corpus for p in files if p not in heldout]
        return train, heldout

    def pretrain(self, model):
        model_dir = self.pretrain_dir(model)
        spec = self.pretrained[model]
        steps = self.recipe.pretrain["num_train_steps"]
        if (pretrained_steps(model_dir) or 0) >= steps:
            self.log(f"[pretrain_{model}] finished ({steps} steps), skipped")
            return
        train, _ = self.shard_files()
        self._run(f"pretrain_{model}", [
            "run_pretraining.py", f"--pretrain_tfrecords={','.join(train)}",
            f"--vocab_file={self.vocab_file}", f"--model_dir={model_dir}",
            f"--model_size={spec.model_size}", f"--model_name={model}",
            f"--seed={self.seed}", f"--hparams={json.dumps(spec.hparams)}",
            *self.pretrain_flags])

    def heldout_curve(self, model):
        """Our run's checkpoints scored on the fixed held-out batch (reproduce/rtd_reference.py)."""
        output = os.path.join(self.pretrain_dir(model), "heldout_curve.jsonl")
        if self._last_step(output) == self.recipe.pretrain["num_train_steps"]:
            self.log(f"[heldout_{model}] {output} is complete, skipped")
            return
        _, heldout = self.shard_files()
        self._run(f"heldout_{model}", [
            "reproduce/rtd_reference.py", "ours", f"--model_dir={self.pretrain_dir(model)}",
            f"--heldout={heldout[0]}", f"--output={output}",
            f"--heldout_examples={self.recipe.heldout_examples}",
            f"--vocab_file={self.vocab_file}"])

    @staticmethod
    def _last_step(jsonl):
        """The step of the last line of a curve file (None when there is none)."""
        if not tf.io.gfile.exists(jsonl):
            return None
        with tf.io.gfile.GFile(jsonl) as f:
            lines = [line for line in f if line.strip()]
        return json.loads(lines[-1])["step"] if lines else None

    def reference_run(self):
        """The PyTorch ELECTRA reference on the ELECTRA run's hparams and batches, and the plot."""
        directory = self.path("reference")
        output = os.path.join(directory, "reference_curve.jsonl")
        train, heldout = self.shard_files()
        if not self._done(directory):
            tf.io.gfile.makedirs(directory)
            self._run("reference", [
                "reproduce/rtd_reference.py", "reference",
                f"--model_dir={self.pretrain_dir('electra')}",
                f"--train_tfrecords={','.join(train)}", f"--heldout={heldout[0]}",
                f"--output={output}", f"--heldout_examples={self.recipe.heldout_examples}",
                f"--eval_every={self.recipe.pretrain['save_checkpoints_steps']}",
                f"--vocab_file={self.vocab_file}"])
            self._mark_done(directory)
        self._run("reference_compare", [
            "reproduce/rtd_reference.py", "compare", f"--reference={output}",
            f"--ours={os.path.join(self.pretrain_dir('electra'), 'heldout_curve.jsonl')}",
            f"--extra={os.path.join(self.pretrain_dir('convbert'), 'heldout_curve.jsonl')}",
            f"--png={os.path.join(directory, 'reference_vs_ours.png')}",
            f"--markdown={os.path.join(directory, 'reference_vs_ours.md')}"])

    def finetune_hparams(self, model):
        hp = dict(self.recipe.finetune)
        if model == "random":  # the ConvBERT discriminator's architecture, random weights
            from data.vocab import load_vocab
            from pretrain.hparams import make_hparams, model_config
            pretrain_hp = make_hparams(self.recipe.model_size,
                                       self.recipe.pretrain_hparams("convbert"))
            config = model_config(pretrain_hp, len(load_vocab(self.vocab_file))).to_dict()
            hp.update(model_size="small", model_hparam_overrides=config)
        return hp

    def finished_tasks(self, model, step=None):
        """Tasks whose every seed has its dev metrics in finetune_dir(model, step)/results."""
        n = self.recipe.num_trials
        trials = [None] if n == 1 else range(1, n + 1)
        return [task for task in self.tasks
                if finetuned(self.finetune_dir(model, step), task, trials)]

    def export_step(self, model, step):
        """The discriminator of kept checkpoint `step`, exported for fine-tuning."""
        from pretrain.export_step import is_exported
        output = self.step_export_dir(model, step)
        if is_exported(output):
            self.log(f"[export_{model}_step{step}] {output} exists, skipped")
            return
        self._run(f"export_{model}_step{step}", [
            "-m", "pretrain.export_step", f"--model_dir={self.pretrain_dir(model)}",
            f"--step={step}", f"--output_dir={output}", f"--vocab_file={self.vocab_file}"])

    def finetune(self, model, step=None):
        """One run_finetuning.py call per model (or per kept checkpoint `step` of a pre-trained
        model) over the tasks not finished yet."""
        stage = f"finetune_{model}" if step is None else f"finetune_{model}_step{step}"
        done = self.finished_tasks(model, step)
        todo = [t for t in self.tasks if t not in done]
        if not todo:
            self.log(f"[{stage}] {', '.join(self.tasks)} done, skipped")
            return
        if done:
            self.log(f"[{stage}] {', '.join(done)} done; running {', '.join(todo)}")
        if model == "random":
            init = []
        else:
            source = self.pretrain_dir(model) if step is None else self.step_export_dir(model, step)
            init = [f"--init_checkpoint={source}"]
        self._run(stage, [
            "run_finetuning.py", f"--data_dir={self.glue_dir}", f"--task_names={','.join(todo)}",
            f"--vocab_file={self.vocab_file}", f"--model_dir={self.finetune_dir(model, step)}", *init,
            f"--num_trials={self.recipe.num_trials}", f"--seed={self.seed}",
            f"--hparams={json.dumps(self.finetune_hparams(model))}", *self.finetune_flags])

    # ------------------------------------------------------------------ everything
    def run(self, report=True):
        start = time.time()
        if not self.tasks:
            raise ReproductionError(f"no GLUE task with a train split under {self.glue_dir} "
                                    f"(looked for {', '.join(GLUE_TASKS)})")
        self.log(f"reproduction ({self.recipe.scale}): models {', '.join(self.models)}; GLUE "
                 f"tasks {', '.join(self.tasks)}; {self.recipe.num_trials} seeds each; output "
                 f"{self.out}")
        self.build_vocab()
        self.build_shards()
        pretrained = [m for m in self.models if m in self.pretrained]
        for model in pretrained:
            self.pretrain(model)
        for model in pretrained if self.heldout_curves else ():
            self.heldout_curve(model)
        if self.reference:
            self.reference_run()
        for model in self.models:
            self.finetune(model)
        for model in pretrained:
            for step in self.finetune_at_steps:
                self.export_step(model, step)
                self.finetune(model, step)
        if report:
            from reproduce import report as report_module
            paths = report_module.write_report(self)
            self.log("report: " + ", ".join(paths))
        self.log(f"reproduction finished in {time.time() - start:.0f}s")


def _noise(line):
    """TensorFlow / XLA start-up chatter that says nothing about the stage."""
    return (line.startswith(("WARNING: All log messages", "I0000 ", "W0000 ", "E0000 "))
            or "cudart_stub" in line or "computation placer" in line)
