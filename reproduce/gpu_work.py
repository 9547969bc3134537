"""The one-GPU run's work folder (`--work_dir`): where each stage keeps what it made, and what a
rerun finds done.

    <work_dir>/
      work.json                            what the folder was made for: recipe (and a hash of
                                           its fields), model, seed, bundle (`claim`)
      throughput.json                      the throughput stage's timings (a rerun keeps them)
      plan.json                            the plan (a rerun keeps it: same schedule)
      calls.json                           each call's budget, stage seconds and compiles after
                                           its compile stage (a call adds its own)
      gpu_run.log                          every call's console, appended (scripts/gpu_run.sh;
                                           --fresh starts it anew)
      pretrain/{convbert,electra}/         pretraining_summary.json, heldout_curve.jsonl,
                                           heldout_points.jsonl (each point as scored), the
                                           exported discriminator, jax_checkpoints/;
                                           collapsed.json when the collapse stop ended it
      finetune/{convbert,electra,random}/  results/<task>_dev_metrics_trial<N>.json (the layout
                                           of run_finetuning.py and reproduce/pipeline.py)
      jax_cache/                           JAX's compilation cache (scripts/gpu_run.sh)

A folder belongs to one run: a plan, checkpoints or results made for another recipe, model size,
seed or bundle are refused in one line naming the folder (`--fresh` starts it afresh). The
rehearsal and the real run have different default folders (`default_work_dir`).
"""
import json
import os

from base import fileio
from reproduce.recipes import MODELS, PRETRAINED


STAMP = "work.json"
# What a run writes here, and what --fresh removes (the compile cache stays: its programs are
# keyed by what they compute, not by the run).
RUN_FILES = (STAMP, "throughput.json", "plan.json", "calls.json", "pretrain", "finetune")


def default_work_dir(rehearse):
    """The work folder of `--rehearse` and of the real run when --work_dir is not given."""
    return os.path.join("runs", "gpu_rehearsal" if rehearse else "gpu_budget")


class WorkFolderError(RuntimeError):
    """A work folder made for another run; one line naming it."""


def bundle_identity(bundle):
    """The fields of bundle.json that decide what a run trains on."""
    return {k: bundle.get(k) for k in ("made", "vocab_size", "max_seq_length", "train_examples",
                                       "heldout_examples")}


class WorkFolder:
    def __init__(self, path, recipe):
        self.root, self.recipe = str(path), recipe

    def identity(self, bundle, seed):
        """What this folder is made for (work.json)."""
        r = self.recipe
        return {"recipe": r.scale, "recipe_fingerprint": r.fingerprint(),
                "model": r.model_summary(), "seed": seed, "bundle": bundle_identity(bundle)}

    def claim(self, bundle, seed, fresh=False):
        """Make the folder this run's: refuse (WorkFolderError) one that holds another run's
        plan, checkpoints or results, unless `fresh`, which removes them first; then work.json."""
        mine = self.identity(bundle, seed)
        held = [name for name in RUN_FILES if fileio.exists(self.path(name))]
        if held and fresh:
            for name in held:
                target = self.path(name)
                (fileio.remove_tree if fileio.isdir(target) else fileio.remove)(target)
            held = []
        if held:
            stamp = self.path(STAMP)
            if not fileio.exists(stamp):
                raise WorkFolderError(
                    f"{self.root}: holds {', '.join(held)} of a run that did not record what it "
                    "was made for (no work.json); give another --work_dir, or --fresh to start "
                    "it afresh")
            theirs = self.read_json(stamp)
            differences = self.differences(theirs, mine)
            if differences:
                raise WorkFolderError(
                    f"{self.root}: a work folder of another run ({'; '.join(differences)}); give "
                    "another --work_dir, or --fresh to start it afresh")
            return
        fileio.makedirs(self.root)
        self.write_json(self.path(STAMP), mine)

    @staticmethod
    def differences(theirs, mine):
        """What differs between two identities, in words ("recipe smoke (...), not ...")."""
        out = []
        if theirs.get("recipe") != mine["recipe"] or theirs.get("model") != mine["model"]:
            out.append(f"recipe {theirs.get('recipe')} ({theirs.get('model')}), not "
                       f"{mine['recipe']} ({mine['model']})")
        elif theirs.get("recipe_fingerprint") != mine["recipe_fingerprint"]:
            out.append(f"recipe {mine['recipe']} with other settings (fingerprint "
                       f"{theirs.get('recipe_fingerprint')}, not {mine['recipe_fingerprint']})")
        if theirs.get("seed") != mine["seed"]:
            out.append(f"seed {theirs.get('seed')}, not {mine['seed']}")
        if theirs.get("bundle") != mine["bundle"]:
            old, new = theirs.get("bundle") or {}, mine["bundle"]
            keys = [k for k in new if old.get(k) != new[k]]
            out.append("bundle " + ", ".join(f"{k} {old.get(k)}, not {new[k]}" for k in keys))
        return out

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    @property
    def plan_path(self):
        """plan.json: the first run's plan, which a rerun keeps."""
        return self.path("plan.json")

    @property
    def throughput_path(self):
        """throughput.json: the first run's timings, which a rerun keeps."""
        return self.path("throughput.json")

    @property
    def calls_path(self):
        """calls.json: every call's record (reproduce/gpu_budget.py GpuRun.record_call)."""
        return self.path("calls.json")

    def calls(self):
        """The records of the calls made on this folder so far ([] before the first)."""
        if not fileio.exists(self.calls_path):
            return []
        return self.read_json(self.calls_path)

    def write_calls(self, calls):
        self.write_json(self.calls_path, calls)

    def pretrain_dir(self, model):
        return self.path("pretrain", model)

    def finetune_dir(self, model):
        return self.path("finetune", model)

    def metrics_file(self, model, task, trial):
        from finetune.glue.leaderboard import dev_metrics_path
        return dev_metrics_path(self.finetune_dir(model), task, trial)

    def pretrained_steps(self, model):
        """The steps `model`'s finished pre-training reached (None before it finished)."""
        from reproduce.recipes import pretrained_steps
        return pretrained_steps(self.pretrain_dir(model))

    def collapsed_path(self, model):
        return os.path.join(self.pretrain_dir(model), "collapsed.json")

    def collapsed(self, model):
        """{"reason", "record"} when `model`'s pre-training was stopped by the collapse check,
        else None (also for None: random init)."""
        if model is None or not fileio.exists(self.collapsed_path(model)):
            return None
        return self.read_json(self.collapsed_path(model))

    def work_left(self, steps, tasks):
        """(models whose pre-training has not reached `steps` nor stopped, whether a fine-tuning
        trial of `tasks` is missing for a model that is fine-tuned) from what the folder
        holds."""
        stopped = {m for m in PRETRAINED if self.collapsed(m) is not None}
        models = tuple(m for m in PRETRAINED
                       if m not in stopped and (self.pretrained_steps(m) or 0) < steps)
        finetune = any(not fileio.exists(self.metrics_file(model, task, trial))
                       for model in MODELS if model not in stopped for task in tasks
                       for trial in range(1, self.recipe.num_trials + 1))
        return models, finetune

    def read_json(self, path):
        return json.loads(fileio.read_text(path))

    def write_json(self, path, value):
        fileio.write_text_atomic(path, json.dumps(value, indent=2) + "\n")
