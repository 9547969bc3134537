"""The one-GPU run's work folder (`--work_dir`): where each stage keeps what it made, and what a
rerun finds done.

    <work_dir>/
      throughput.json                      the throughput stage's timings (a rerun keeps them)
      plan.json                            the plan (a rerun keeps it: same schedule)
      pretrain/{convbert,electra}/         pretraining_summary.json, heldout_curve.jsonl, the
                                           exported discriminator, jax_checkpoints/
      finetune/{convbert,electra,random}/  results/<task>_dev_metrics_trial<N>.json (the layout
                                           of run_finetuning.py and reproduce/pipeline.py)
      jax_cache/                           JAX's compilation cache (scripts/gpu_run.sh)
"""
import json
import os

from base import fileio
from reproduce.gpu_recipe import PRETRAINED
from reproduce.recipes import MODELS


class WorkFolder:
    def __init__(self, path, recipe):
        self.root, self.recipe = str(path), recipe

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

    def pretrain_dir(self, model):
        return self.path("pretrain", model)

    def finetune_dir(self, model):
        return self.path("finetune", model)

    def metrics_file(self, model, task, trial):
        return os.path.join(self.finetune_dir(model), "results",
                            f"{task}_dev_metrics_trial{trial}.json")

    def pretrained_steps(self, model):
        """The steps `model`'s finished pre-training reached (None before it finished)."""
        path = os.path.join(self.pretrain_dir(model), "pretraining_summary.json")
        if not fileio.exists(path):
            return None
        return json.loads(fileio.read_text(path))["global_step"]

    def work_left(self, steps, tasks):
        """(models whose pre-training has not reached `steps`, whether a fine-tuning trial of
        `tasks` is missing) from what the folder holds."""
        models = tuple(m for m in PRETRAINED
                       if (self.pretrained_steps(m) or 0) < steps)
        finetune = any(not fileio.exists(self.metrics_file(model, task, trial))
                       for model in MODELS for task in tasks
                       for trial in range(1, self.recipe.max_trials + 1))
        return models, finetune

    def read_json(self, path):
        return json.loads(fileio.read_text(path))

    def write_json(self, path, value):
        fileio.write_text_atomic(path, json.dumps(value, indent=2) + "\n")
