"""The reproduction recipes: what `run_reproduction.py --scale=...` pre-trains and fine-tunes.

One `Recipe` per scale. Every model of a scale (ConvBERT, the ELECTRA baseline and the randomly
initialised ConvBERT) sees the same data, steps, batch and fine-tuning settings; only the encoder
architecture differs.

* `tiny`: the small-compute recipe (docs/RESULTS.md §9): pretrain.hparams.TINY_MODEL (2 layers,
  hidden 128, E 64) with ELECTRA's small recipe (peak lr 5e-4, 1/4-wide generator, temperature 1,
  disc weight 50), warm-up 10% of the 3,000 steps of 32 x 128; fine-tuning with the official
  epochs (3, RTE/STS-B 10) on the first 4,000 examples per task, 64 tokens. About 25 minutes of
  pre-training per model on 2 CPU cores.
* `tiny_3ep`: the same with fine-tuning shortened to 3 epochs on every task (docs/RESULTS.md
  §7-§8).
* `tiny_1k`: the first small-compute recipe (docs/RESULTS.md §1-§3): the same model, peak lr 1e-4,
  warm-up 100, 1,000 steps. Its generator never left the unigram level.
* `small`, `base`: the paper's recipes (ConvBERT Tables 5 and 6, official configure_*.py):
  1M steps of 128 x 128 (small, lr 3e-4) or 256 x 128 (base, lr 2e-4), 10k warm-up; fine-tuning
  with lr 3e-4 (small) / 1e-4 (base), layer-wise decay 0.8, batch 32, 3 epochs (RTE/STS-B 10),
  median over 10 fine-tuning runs. For a TPU v3-8 or GPUs.
* `smoke`: seconds per stage, for the end-to-end test only (numbers mean nothing).
"""
import dataclasses
import json

from base import fileio

# The BERT-architecture ELECTRA baseline: every head is a self-attention head, no convolution.
ELECTRA_ARCHITECTURE = {"conv_type": "none", "head_ratio": 1}
MODELS = ("convbert", "electra", "random")
PRETRAINED = ("convbert", "electra")      # the models of MODELS that are pre-trained
GLUE_TASKS = ("cola", "sst", "mrpc", "sts", "rte")


@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """One model to pre-train: run_pretraining.py's --model_size and --hparams (a reproduction
    pre-trains a {name: PretrainedModel} mapping; analysis/ablation.py hands it one per variant)."""
    model_size: str
    hparams: dict


@dataclasses.dataclass(frozen=True)
class Recipe:
    scale: str
    model_size: str                       # run_pretraining.py --model_size
    model_overrides: dict                 # ConvBertConfig fields on top of model_size
    pretrain: dict                        # PretrainingHParams overrides (both pre-trained models)
    finetune: dict                        # FinetuneHParams overrides (every model, every task)
    num_trials: int                       # fine-tuning seeds per task
    heldout_examples: int = 256           # the fixed held-out batch of the pre-training curves

    def with_pretrain_steps(self, steps):
        """The same recipe pre-trained for `steps` steps (warm-up and peak lr unchanged; the linear
        decay stretches to the new end). Checkpoints are spaced so the kept ones still cover the
        whole run for the held-out curve."""
        if steps < 1:
            raise RecipeError(f"--pretrain_steps must be positive, got {steps}")
        pretrain = dict(self.pretrain, num_train_steps=steps)
        if "save_checkpoints_steps" in pretrain and "keep_checkpoint_max" in pretrain:
            pretrain["save_checkpoints_steps"] = max(
                pretrain["save_checkpoints_steps"], -(-steps // pretrain["keep_checkpoint_max"]))
        return dataclasses.replace(self, pretrain=pretrain)

    def checked_finetune_steps(self, steps):
        """The sorted distinct steps of --finetune_at_steps: each a checkpoint this recipe saves
        (a multiple of save_checkpoints_steps) before its last step (which is always fine-tuned)."""
        total = self.pretrain["num_train_steps"]
        every = self.pretrain.get("save_checkpoints_steps")
        steps = sorted(set(int(s) for s in steps))
        for step in steps:
            if not 0 < step < total:
                raise RecipeError(f"--finetune_at_steps: {step} is not between 0 and the last "
                                  f"pre-training step {total} (which is fine-tuned anyway)")
            if every and step % every:
                raise RecipeError(f"--finetune_at_steps: no checkpoint is saved at step {step} "
                                  f"(one every {every} steps)")
        return steps

    def pretrain_hparams(self, model):
        """--hparams of run_pretraining.py for "convbert" or "electra"."""
        overrides = dict(self.model_overrides)
        if model == "electra":
            overrides.update(ELECTRA_ARCHITECTURE)
        return {**self.pretrain, "model_hparam_overrides": overrides}

    def pretrained_models(self):
        """{name: PretrainedModel}: ConvBERT and the ELECTRA baseline at this recipe's size."""
        return {model: PretrainedModel(self.model_size, self.pretrain_hparams(model))
                for model in PRETRAINED}


# What the tiny recipes share (they differ in schedule, peak learning rate and fine-tuning epochs).
_TINY_PRETRAIN = dict(train_batch_size=32, generator_hidden_size=0.25, shuffle_buffer=10000,
                      keep_checkpoint_max=20, log_every_n_steps=50, export_on_save=False)
# Epochs per task are the official ones (finetune/hparams.py: 3, RTE/STS-B 10) unless a recipe
# shortens them.
_TINY_FINETUNE_OFFICIAL_EPOCHS = dict(learning_rate=3e-4, max_seq_length=64, train_batch_size=32,
                                      eval_batch_size=128, max_train_examples=4000,
                                      log_every_steps=50)
_TINY_FINETUNE_3_EPOCHS = dict(_TINY_FINETUNE_OFFICIAL_EPOCHS, num_train_epochs=3.0)
_TINY_3K_PRETRAIN = dict(_TINY_PRETRAIN, num_train_steps=3000, num_warmup_steps=300,
                         learning_rate=5e-4, save_checkpoints_steps=150)
RECIPES = {
    "tiny": Recipe(
        scale="tiny", model_size="tiny", model_overrides={}, pretrain=_TINY_3K_PRETRAIN,
        finetune=_TINY_FINETUNE_OFFICIAL_EPOCHS, num_trials=3),
    "tiny_3ep": Recipe(
        scale="tiny_3ep", model_size="tiny", model_overrides={}, pretrain=_TINY_3K_PRETRAIN,
        finetune=_TINY_FINETUNE_3_EPOCHS, num_trials=3),
    "tiny_1k": Recipe(
        scale="tiny_1k", model_size="tiny", model_overrides={},
        pretrain=dict(_TINY_PRETRAIN, num_train_steps=1000, num_warmup_steps=100,
                      learning_rate=1e-4, save_checkpoints_steps=100),
        finetune=_TINY_FINETUNE_3_EPOCHS, num_trials=3),
    "small": Recipe(
        scale="small", model_size="small", model_overrides={},
        pretrain=dict(num_train_steps=1000000, num_warmup_steps=10000, learning_rate=3e-4,
                      train_batch_size=128),
        finetune=dict(learning_rate=3e-4),
        num_trials=10),
    "base": Recipe(
        scale="base", model_size="base", model_overrides={},
        pretrain=dict(num_train_steps=1000000, num_warmup_steps=10000, learning_rate=2e-4,
                      train_batch_size=256),
        finetune=dict(learning_rate=1e-4),
        num_trials=10),
    "smoke": Recipe(
        scale="smoke", model_size="small",
        model_overrides=dict(hidden_size=32, embedding_size=32, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=64, num_groups=1),
        pretrain=dict(num_train_steps=4, num_warmup_steps=1, learning_rate=1e-3,
                      train_batch_size=4, max_seq_length=32, shuffle_buffer=16,
                      save_checkpoints_steps=2, keep_checkpoint_max=5, log_every_n_steps=2),
        finetune=dict(max_seq_length=32, train_batch_size=8, eval_batch_size=32,
                      max_train_examples=16, max_eval_examples=24, num_train_epochs=1.0,
                      log_every_steps=1),
        num_trials=2, heldout_examples=8),
}
SCALES = tuple(RECIPES)


class RecipeError(ValueError):
    """An unknown scale; one line."""


def get_recipe(scale):
    if scale not in RECIPES:
        raise RecipeError(f"unknown --scale {scale!r}; choose one of {', '.join(SCALES)}")
    return RECIPES[scale]


# ---------------------------------------------------------------- what a run has done already
# The one "is this stage done?" of both reproductions (reproduce/pipeline.py, the GPU run's
# reproduce/gpu_work.py): read from the files the drivers write, so a rerun skips what is done.
def pretrained_steps(model_dir):
    """The steps the finished pre-training in `model_dir` reached (its
    pretraining_summary.json); None before it finished."""
    path = fileio.join(model_dir, "pretraining_summary.json")
    if not fileio.exists(path):
        return None
    return json.loads(fileio.read_text(path)).get("global_step", 0)


def finetuned(finetune_dir, task, trials):
    """Whether every one of `trials` (numbers; [None]: a run of one trial) of `task` has its dev
    metrics in `finetune_dir`/results, as run_finetuning.py writes them."""
    from finetune.glue.leaderboard import dev_metrics_path
    return all(fileio.exists(dev_metrics_path(finetune_dir, task, trial)) for trial in trials)
