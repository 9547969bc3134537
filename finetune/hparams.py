"""Fine-tuning hyper-parameters: one config object, ELECTRA/ConvBERT defaults per model size.

Defaults follow the official `configure_finetuning.py` (yitu-opensource/ConvBert, the ConvBERT
paper's Table 6):

* learning rate 3e-4 for small / medium-small, 1e-4 for base; layer-wise LR decay 0.8;
  weight decay 0.01; warm-up over the first 10% of steps, then linear decay to 0;
* 3 epochs (10 for RTE and STS-B, 2 for SQuAD); batch size 32;
* max_seq_length 128 (512 for SQuAD); MRPC/STS-B train on both sentence orders;
* SQuAD: max_query_length 64, doc_stride 128, n-best 20, max answer 30 tokens, joint end
  prediction with a beam of 20, answerability classifier (weight 0.5), null threshold -2.75.

Overrides come from `--hparams` (a JSON string or a path to a JSON file) and then from explicit
command-line flags. An unknown key is an error (as the official `update()`), so typos never pass
silently. `model_hparam_overrides` changes the encoder config (e.g. a tiny model for tests).

`model_size` may also name a configs/ row ("table1_electra_small"; configs/README.md) or be the
path of a ConvBertConfig JSON file, resolved as in pre-training (pretrain/hparams.py
`resolve_model_size`): without --init_checkpoint the encoder is that config's, and the per-size
learning rate is the one of the official size nearest in hidden size (`recipe_size`).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Optional

from model.config import ConfigError, read_json_object
from training import PRECISIONS

MODEL_SIZES = ("small", "medium-small", "base")
# Peak learning rate per size (configure_finetuning.py).
_SIZE_LEARNING_RATE = {"small": 3e-4, "medium-small": 3e-4, "base": 1e-4}
# Epochs per task (configure_finetuning.py): 3, except RTE/STS-B 10 and SQuAD 2.
_TASK_EPOCHS = {"rte": 10.0, "sts": 10.0, "squad": 2.0, "squadv1": 2.0}
QA_TASKS = ("squad", "squadv1")


class HParamsError(ValueError):
    """Bad hyper-parameters: unknown key, wrong type, or invalid value (one-line message)."""


@dataclasses.dataclass
class FinetuneHParams:
    # -- model
    model_size: str = "small"
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    do_lower_case: bool = True
    # -- optimisation (None = the per-size / per-task default, see `for_task`)
    learning_rate: Optional[float] = None
    layerwise_lr_decay: float = 0.8
    weight_decay_rate: float = 0.01
    warmup_proportion: float = 0.1
    clip_norm: float = 1.0
    precision: str = "fp32"                 # fp32 | bf16 | mixed_float16, as in pre-training
    num_train_epochs: Optional[float] = None
    max_train_steps: Optional[int] = None   # cap on the number of steps (smoke tests)
    train_batch_size: int = 32
    eval_batch_size: int = 32
    predict_batch_size: int = 32
    # -- data
    max_seq_length: Optional[int] = None    # None: 128, 512 for SQuAD
    double_unordered: bool = True           # MRPC / STS-B train on both sentence orders
    max_train_examples: Optional[int] = None  # first N training examples only (smoke tests)
    max_eval_examples: Optional[int] = None   # first N dev/test examples only (smoke tests)
    # -- QA (SQuAD)
    max_query_length: int = 64
    doc_stride: int = 128
    n_best_size: int = 20
    max_answer_length: int = 30
    answerable_classifier: bool = True
    answerable_uses_start_logits: bool = True
    answerable_weight: float = 0.5
    joint_prediction: bool = True
    beam_size: int = 20
    qa_hidden_size: int = 512
    qa_na_threshold: float = -2.75
    # -- bookkeeping
    num_trials: int = 1
    seed: int = 0
    log_every_steps: int = 100
    steps_per_loop: int = 1                 # steps per compiled call (TPU: e.g. 100)
    write_test_outputs: bool = True
    save_finetuned_model: bool = False

    # ------------------------------------------------------------------ overrides
    def update(self, overrides: dict, where: str = "hparams") -> "FinetuneHParams":
        """Apply {key: value}; unknown keys and wrongly-typed values raise HParamsError."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise HParamsError(f"{where}: unknown hparam(s) {', '.join(map(repr, unknown))}; known: "
                               f"{', '.join(sorted(fields))}")
        for key, value in overrides.items():
            setattr(self, key, _coerce(key, getattr(self, key), fields[key], value, where))
        self.validate(where)
        return self

    def validate(self, where: str = "hparams"):
        self.model_size = resolve_model_size(self.model_size, where)[0]
        if not isinstance(self.model_hparam_overrides, dict):
            raise HParamsError(f"{where}: model_hparam_overrides must be a JSON object")
        positive = ("train_batch_size", "eval_batch_size", "predict_batch_size", "num_trials",
                    "max_query_length", "doc_stride", "n_best_size", "max_answer_length",
                    "beam_size", "qa_hidden_size", "log_every_steps", "steps_per_loop")
        for name in positive:
            if getattr(self, name) <= 0:
                raise HParamsError(f"{where}: {name} must be > 0, got {getattr(self, name)}")
        for name in ("learning_rate", "num_train_epochs", "max_train_steps", "max_seq_length",
                     "max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise HParamsError(f"{where}: {name} must be > 0, got {value}")
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise HParamsError(f"{where}: max_seq_length {self.max_seq_length} is too small")
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise HParamsError(f"{where}: warmup_proportion must be in [0, 1]")
        if self.precision not in PRECISIONS:
            raise HParamsError(f"{where}: unknown precision {self.precision!r}; choose one of "
                               f"{', '.join(PRECISIONS)}")
        if not 0.0 < self.layerwise_lr_decay <= 1.0:
            raise HParamsError(f"{where}: layerwise_lr_decay must be in (0, 1]")
        return self

    # ------------------------------------------------------------------ per-task values
    def for_task(self, task_name: str) -> "FinetuneHParams":
        """A copy with every per-size / per-task default (None) filled in."""
        hp = dataclasses.replace(self, model_hparam_overrides=dict(self.model_hparam_overrides))
        if hp.learning_rate is None:
            hp.learning_rate = _SIZE_LEARNING_RATE[recipe_size(hp.model_size)]
        if hp.num_train_epochs is None:
            hp.num_train_epochs = _TASK_EPOCHS.get(task_name, 3.0)
        if hp.max_seq_length is None:
            hp.max_seq_length = 512 if task_name in QA_TASKS else 128
        return hp

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def resolve_model_size(model_size, where="hparams"):
    """`model_size` -> (key, ConvBertConfig or None): an official size ("medium_small" ->
    "medium-small") with None, or a configs/ name / ConvBertConfig .json path with its config.
    One-line HParamsError otherwise (it lists the valid names)."""
    size = str(model_size).strip().lower().replace("_", "-")
    if size in MODEL_SIZES:
        return size, None
    from pretrain.hparams import HParamsError as PretrainHParamsError
    from pretrain.hparams import resolve_model_size as resolve
    try:
        return resolve(model_size, sizes=MODEL_SIZES)
    except PretrainHParamsError as e:
        raise HParamsError(f"{where}: {e}") from None


def recipe_size(model_size):
    """The official size whose fine-tuning defaults `model_size` uses (configs: nearest width)."""
    size, config = resolve_model_size(model_size)
    if config is None:
        return size
    from pretrain.hparams import recipe_size as nearest
    return nearest(config)


def encoder_config(model_size, overrides=None):
    """The ConvBertConfig of `model_size` (a size, configs/ name or .json path) + `overrides`."""
    from model import ConvBertConfig
    size, config = resolve_model_size(model_size)
    overrides = dict(overrides or {})
    if config is None:
        return ConvBertConfig.from_size(size, **overrides)
    return config.replace(**overrides) if overrides else config


def _coerce(key, current, field, value, where):
    """Check a JSON value against the field's type (ints accepted for floats)."""
    type_text = str(field.type)
    if value is None:
        if "Optional" in type_text:
            return None
        raise HParamsError(f"{where}: {key} cannot be null")
    if "dict" in type_text:
        if not isinstance(value, dict):
            raise HParamsError(f"{where}: {key} must be a JSON object, got {value!r}")
        return dict(value)
    if "bool" in type_text:
        if not isinstance(value, bool):
            raise HParamsError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if "float" in type_text:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise HParamsError(f"{where}: {key} must be a number, got {value!r}")
        return float(value)
    if "int" in type_text:
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, float) and value.is_integer())):
            raise HParamsError(f"{where}: {key} must be an integer, got {value!r}")
        return int(value)
    if "str" in type_text:
        if not isinstance(value, str):
            raise HParamsError(f"{where}: {key} must be a string, got {value!r}")
        return value
    return value


def parse_hparams_arg(text: Optional[str]) -> tuple[dict, str]:
    """`--hparams` value (JSON string or path to a JSON file) -> ({key: value}, where)."""
    if not text:
        return {}, "--hparams"
    try:
        return read_json_object(text, "--hparams")
    except ConfigError as e:
        raise HParamsError(str(e)) from None


def load_hparams(hparams_arg: Optional[str] = None, **flag_overrides) -> FinetuneHParams:
    """Defaults, then `--hparams`, then explicit flags (those not None)."""
    hp = FinetuneHParams()
    overrides, where = parse_hparams_arg(hparams_arg)
    hp.update(overrides, where)
    flags = {k: v for k, v in flag_overrides.items() if v is not None}
    if flags:
        hp.update(flags, "command-line flags")
    return hp


def parse_task_names(text):
    from finetune.glue.tasks import DataError, normalize_task_name
    from finetune.console import UsageError
    if not text:
        raise UsageError("--task_names is required (e.g. --task_names mrpc,rte or squad)")
    names = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        key = raw.lower().replace("-", "").replace("_", "")
        if key in ("squad", "squad2", "squadv2", "squadv20", "squad20"):
            name = "squad"
        elif key in ("squadv1", "squad1", "squadv11", "squad11"):
            name = "squadv1"
        else:
            try:
                name = normalize_task_name(raw)
            except DataError:
                raise DataError(f"unknown task name {raw!r} in --task_names; known: cola, sst, "
                                f"mrpc, sts, qqp, mnli, qnli, rte, wnli, squad, squadv1") from None
            if name == "ax":
                raise DataError("task 'ax' (the GLUE diagnostic) is predicted with the MNLI "
                                "model: use --task_names mnli --do_predict")
        if name not in names:
            names.append(name)
    if not names:
        raise UsageError("--task_names is empty")
    return names


def train_settings(hp, num_layers, total_steps=1, **overrides):
    """The training cores' settings (training/settings.py) of a fine-tuning run: the one place
    fine-tuning hyper-parameters become core settings, for both backends' finetuners and
    DynaBERT (elastic/train.py). ELECTRA's AdamW (weight decay, clipping), warm-up over
    `warmup_proportion` of `total_steps` then linear decay, layer-wise LR decay over `num_layers`
    encoder layers; `overrides`: other TrainSettings fields (jit_compile, save_every)."""
    from training.settings import TrainSettings
    return TrainSettings(
        total_steps=total_steps, batch_size=hp.train_batch_size, learning_rate=hp.learning_rate,
        warmup_proportion=hp.warmup_proportion, weight_decay_rate=hp.weight_decay_rate,
        clip_norm=hp.clip_norm, layerwise_lr_decay=hp.layerwise_lr_decay,
        num_layers=num_layers, precision=hp.precision,
        log_every=max(1, int(hp.log_every_steps)),
        steps_per_loop=max(1, int(hp.steps_per_loop)), **overrides)
