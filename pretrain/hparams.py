"""The one configuration object of pre-training: `PretrainingHParams`.

Defaults follow the official ConvBERT `configure_pretraining.py` (itself ELECTRA's) and paper
Table 5; per-size values are applied on top of the common defaults, then user overrides
(`--hparams` JSON string or .json file, then explicit command-line flags) on top of those:

    hp = make_hparams("small", overrides={"learning_rate": 1e-4})

| size          | lr   | batch | generator width | embedding | linear groups |
|---------------|------|-------|-----------------|-----------|---------------|
| small         | 3e-4 | 128   | 1/4             | 128       | 1             |
| medium-small  | 5e-4 | 128   | 1/4             | 128       | 2             |
| base          | 2e-4 | 256   | 1/3             | 768       | 1             |
| tiny (demo)   | 1e-4 | 32    | 1/2             | 64        | 1             |

All sizes: warm-up 10k steps, 1M steps, max_seq_length 128, mask_prob 0.15, disc_weight 50,
keep_checkpoint_max 5, save_checkpoints_steps 10000. `tiny` is not a paper size: it is the
no-flags demo / test model (2 layers, hidden 128) with a short schedule. Its peak learning rate
is 1e-4 because, after a 10-step warm-up, 1e-3 leaves the discriminator at the "nothing was
replaced" prior (AUC 0.5) for the whole run (docs/PRETRAINING.md §6).

`model_size` may also name a config in `configs/` (a row of the paper, e.g.
"table1_convbert_medium_small_bnk_gl"; configs/README.md) or be the path of a ConvBertConfig
JSON file (local or any filesystem base/fileio.py knows). The model is then that file's, and the
training recipe is the one of the official size nearest in hidden size (`recipe_size`); the
file's embedding_size, num_groups, conv_kernel_size, head_ratio, conv_type and
max_position_embeddings become the defaults of the matching hparams, and the BERT rows train
with the MLM objective (`ROW_DEFAULTS`). `--hparams` and flags still override all of these.

An unknown key is an error that lists the valid keys (as the official `update()` does).
"""
import dataclasses
import json
import os
import re
from typing import Optional

from base import fileio
from model.config import CONFIGS_DIR, ConfigError, read_json_object
from training import PRECISIONS  # fp32, bf16, mixed_float16

OFFICIAL_SIZES = ("small", "medium-small", "base")
MODEL_SIZES = OFFICIAL_SIZES + ("tiny",)
DISTRIBUTIONS = ("one_device", "mirrored", "multi_worker", "tpu")

# ConvBertConfig fields of the tiny demo model (sizes of the official ones come from model/).
TINY_MODEL = dict(hidden_size=128, embedding_size=64, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=256, num_groups=1)


class HParamsError(ValueError):
    """A bad pre-training configuration; the message is one line."""


@dataclasses.dataclass
class PretrainingHParams:
    # ---- model
    model_name: str = "convbert_demo"
    model_size: str = "medium-small"
    vocab_size: Optional[int] = None  # None: the size of the vocab file (30522 without one)
    embedding_size: Optional[int] = None  # None: per size
    conv_kernel_size: int = 9
    head_ratio: int = 2
    linear_groups: Optional[int] = None  # None: per size (medium-small 2, else 1)
    conv_type: str = "sdconv"
    max_position_embeddings: int = 512
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)  # ConvBertConfig fields
    do_lower_case: bool = True
    # ---- objective (ELECTRA replaced-token detection)
    electra_objective: bool = True
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    mask_prob: float = 0.15
    max_predictions_per_seq: Optional[int] = None  # None: int((mask_prob + 0.005) * max_seq_length)
    temperature: float = 1.0
    disallow_correct: bool = False
    generator_hidden_size: Optional[float] = None  # None: per size (1/4, base 1/3)
    generator_layers: float = 1.0
    # ---- optimisation
    learning_rate: Optional[float] = None  # None: per size
    lr_decay_power: float = 1.0
    weight_decay_rate: float = 0.01
    num_warmup_steps: int = 10000
    num_train_steps: int = 1000000
    # > 0: the learning rate follows the schedule of a run this long (warm-up num_warmup_steps,
    # linear decay over it) and the run stops after num_train_steps: a short run on the official
    # schedule's first steps (docs/PRETRAINING.md "Mind the learning rate on short runs")
    lr_schedule_steps: int = 0
    # > 0: the learning rate also falls linearly to 0 over the run's last lr_cooldown_steps steps
    # (a short run on the official schedule that still ends at 0: the GPU run's recipe)
    lr_cooldown_steps: int = 0
    train_batch_size: Optional[int] = None  # None: per size; the GLOBAL batch
    max_seq_length: int = 128
    clip_norm: float = 1.0
    # ---- run
    seed: int = 0
    deterministic: bool = False
    precision: str = "fp32"
    jit_compile: Optional[bool] = None  # None: on where it helps (GPU/TPU), off on CPU
    save_checkpoints_steps: int = 10000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 100
    steps_per_loop: int = 1  # steps per compiled call (ELECTRA's iterations_per_loop; TPU: 200)
    shuffle_buffer: int = 10000
    # KERAS_BACKEND=jax: the global batch is made of this many equal shares, share i read from
    # every input_shares-th TFRecord file from the i-th; each process reads its own shares. 0:
    # one per process (one process: the whole input as one stream). Fix it to keep the stream
    # (and exact resume) across process counts that divide it.
    input_shares: int = 0
    export_on_save: bool = True

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self, path=None):
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:  # local, gs:// or ram://, via a temporary file + rename
            fileio.write_text_atomic(os.fspath(path), text)
        return text


VALID_KEYS = tuple(f.name for f in dataclasses.fields(PretrainingHParams))

# Per-size values: paper Table 5 / official configure_pretraining.py.
SIZE_DEFAULTS = {
    "small": dict(learning_rate=3e-4, train_batch_size=128, generator_hidden_size=0.25,
                  embedding_size=128, linear_groups=1),
    "medium-small": dict(learning_rate=5e-4, train_batch_size=128, generator_hidden_size=0.25,
                         embedding_size=128, linear_groups=2),
    "base": dict(learning_rate=2e-4, train_batch_size=256, generator_hidden_size=1.0 / 3,
                 embedding_size=768, linear_groups=1),
    "tiny": dict(learning_rate=1e-4, train_batch_size=32, generator_hidden_size=0.5,
                 embedding_size=64, linear_groups=1, num_warmup_steps=10, num_train_steps=100,
                 save_checkpoints_steps=50, log_every_n_steps=10, shuffle_buffer=1000),
}


# Pre-training defaults of configs/ rows beyond their architecture: the paper's BERT baselines
# are trained with the BERT (masked-LM) objective, not replaced-token detection.
ROW_DEFAULTS = {
    "table1_bert_small": dict(electra_objective=False),
    "table1_bert_base": dict(electra_objective=False),
}
# The ConvBertConfig fields that have an hparam of their own (hparam name -> config field).
_CONFIG_HPARAMS = dict(embedding_size="embedding_size", linear_groups="num_groups",
                       conv_kernel_size="conv_kernel_size", head_ratio="head_ratio",
                       conv_type="conv_type", max_position_embeddings="max_position_embeddings")


def config_names():
    """Names of the configs shipped in configs/ (file names without .json), in natural order."""
    names = (fileio.basename(p)[:-len(".json")] for p in fileio.list_files(CONFIGS_DIR, "*.json"))
    return sorted(names, key=lambda n: [int(t) if t.isdigit() else t
                                        for t in re.split(r"(\d+)", n)])


def _stem(key):
    """"configs/table1_bert_small.json" -> "table1_bert_small" (a name stays as it is)."""
    base = fileio.basename(key)
    return base[:-len(".json")] if base.endswith(".json") else base


def _load_config(path, key):
    from model.config import ConvBertConfig
    try:
        return ConvBertConfig.from_json(path)
    except (ConfigError, OSError) as e:
        raise HParamsError(f"model_size {key!r}: {' '.join(str(e).split())}") from None


def resolve_model_size(spec, sizes=MODEL_SIZES):
    """A `model_size` -> (key, ConvBertConfig or None); a one-line HParamsError if it is none of:

    * one of `sizes` ("small", "medium_small" -> "medium-small", ...): (size, None);
    * the path of a ConvBertConfig JSON file (local, gs://, ram://): (path, its config);
    * a configs/ name, with or without ".json" ("table1_electra_small"): (name, its config).
    """
    text = str(spec).strip()
    size = text.lower().replace("_", "-")
    if size in sizes:
        return size, None
    if fileio.isfile(text):
        return text, _load_config(text, text)
    names = config_names()
    name = _stem(text).replace("-", "_")
    if name in names and fileio.basename(text) == text:
        return name, _load_config(fileio.join(CONFIGS_DIR, name + ".json"), name)
    if text.endswith(".json") or "/" in text or os.sep in text:
        raise HParamsError(f"model_size {text!r}: no such file (give one of {', '.join(sizes)}, "
                           "a configs/ name or an existing ConvBertConfig .json file)")
    raise HParamsError(f"unknown model_size {text!r}; choose one of {', '.join(sizes)}, a "
                       f"configs/ name ({', '.join(names)}) or the path of a ConvBertConfig "
                       ".json file")


def recipe_size(config):
    """The official size whose training recipe a config's model follows: the nearest in hidden
    size (256 small, 384 medium-small, 768 base; each ablation row trains like its size)."""
    from model.config import ConvBertConfig
    widths = {s: ConvBertConfig.from_size(s).hidden_size for s in OFFICIAL_SIZES}
    return min(OFFICIAL_SIZES, key=lambda s: abs(widths[s] - config.hidden_size))


def normalize_size(size):
    """An official size's key ("medium_small" -> "medium-small"), a configs/ name or the path of
    a config file (`resolve_model_size`)."""
    return resolve_model_size(size)[0]


def _row_defaults(key, config):
    """Hparam defaults from a configs/ row or config file: its own values, then ROW_DEFAULTS."""
    values = {hp_name: getattr(config, field) for hp_name, field in _CONFIG_HPARAMS.items()}
    values["model_name"] = _stem(key)
    values.update(ROW_DEFAULTS.get(_stem(key), {}))
    return values


def parse_overrides(text):
    """`--hparams`: a JSON object string or the path of a .json file holding one -> dict."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if isinstance(text, dict):
        return dict(text)
    try:
        return read_json_object(text, "--hparams")[0]
    except ConfigError as e:
        raise HParamsError(str(e)) from None


def _check_types(hp):
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def need(cond, msg):
        if not cond:
            raise HParamsError(msg)

    def positive_int(name):
        v = getattr(hp, name)
        need(isinstance(v, int) and not isinstance(v, bool) and v > 0,
             f"{name} must be a positive integer, got {v!r}")

    for name in ("num_train_steps", "train_batch_size", "max_seq_length", "save_checkpoints_steps",
                 "keep_checkpoint_max", "log_every_n_steps", "steps_per_loop",
                 "max_position_embeddings",
                 "conv_kernel_size", "head_ratio", "linear_groups", "shuffle_buffer"):
        positive_int(name)
    for name in ("num_warmup_steps", "lr_schedule_steps", "lr_cooldown_steps", "input_shares"):
        v = getattr(hp, name)
        need(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
             f"{name} must be an integer >= 0, got {v!r}")
    need(number(hp.learning_rate) and hp.learning_rate > 0,
         f"learning_rate must be a number > 0, got {hp.learning_rate!r}")
    need(number(hp.mask_prob) and 0.0 < hp.mask_prob < 1.0,
         f"mask_prob must be in (0, 1), got {hp.mask_prob!r}")
    need(hp.precision in PRECISIONS,
         f"unknown precision {hp.precision!r}; choose one of {', '.join(PRECISIONS)}")
    need(hp.generator_hidden_size is None or (number(hp.generator_hidden_size)
                                              and hp.generator_hidden_size > 0),
         f"generator_hidden_size must be > 0, got {hp.generator_hidden_size!r}")
    need(isinstance(hp.model_hparam_overrides, dict),
         "model_hparam_overrides must be a JSON object of ConvBertConfig fields")
    need(hp.vocab_size is None or (isinstance(hp.vocab_size, int) and hp.vocab_size > 0),
         f"vocab_size must be a positive integer, got {hp.vocab_size!r}")
    for name in ("deterministic", "electra_objective", "disallow_correct", "do_lower_case",
                 "export_on_save"):
        need(isinstance(getattr(hp, name), bool), f"{name} must be true or false, "
             f"got {getattr(hp, name)!r}")


def make_hparams(model_size=None, overrides=None, flag_overrides=None):
    """Common defaults <- size defaults <- `overrides` (--hparams) <- `flag_overrides` (flags).

    `model_size` may also come from either override dict (flags win). Raises HParamsError.
    """
    merged = {}
    for source in (overrides or {}, flag_overrides or {}):
        unknown = sorted(set(source) - set(VALID_KEYS))
        if unknown:
            raise HParamsError(f"unknown hparam(s) {', '.join(map(repr, unknown))}; valid keys: "
                               f"{', '.join(sorted(VALID_KEYS))}")
        merged.update({k: v for k, v in source.items() if v is not None or k == "vocab_size"})
    size, config = resolve_model_size(merged.pop("model_size", None) or model_size or "medium-small")
    if config is None:
        values = {**SIZE_DEFAULTS[size], **merged, "model_size": size}
    else:  # a configs/ row or a config file: its size's recipe, then the file's own values
        values = {**SIZE_DEFAULTS[recipe_size(config)], **_row_defaults(size, config), **merged,
                  "model_size": size}
    if size == "tiny" and "model_name" not in merged:
        values["model_name"] = "convbert_demo"
    elif "model_name" not in merged and config is None:
        values["model_name"] = f"convbert_{size.replace('-', '_')}"
    try:
        hp = PretrainingHParams(**values)
    except TypeError as e:  # pragma: no cover - keys are checked above
        raise HParamsError(str(e)) from None
    # JSON gives floats for ints written as 1e6; accept integral floats for integer fields.
    for name in ("num_train_steps", "num_warmup_steps", "lr_schedule_steps", "lr_cooldown_steps",
                 "train_batch_size",
                 "save_checkpoints_steps", "keep_checkpoint_max", "log_every_n_steps",
                 "steps_per_loop", "max_seq_length", "max_predictions_per_seq", "seed"):
        v = getattr(hp, name)
        if isinstance(v, float) and v.is_integer():
            setattr(hp, name, int(v))
    _check_types(hp)
    if hp.max_predictions_per_seq is None:   # after the type checks: numbers by now
        hp.max_predictions_per_seq = int((hp.mask_prob + 0.005) * hp.max_seq_length)
    return hp


def model_config(hp, vocab_size):
    """The discriminator's ConvBertConfig for `hp` (vocab_size from the vocab file)."""
    from model import ConvBertConfig
    fields = dict(vocab_size=vocab_size, conv_kernel_size=hp.conv_kernel_size,
                  head_ratio=hp.head_ratio, conv_type=hp.conv_type,
                  max_position_embeddings=hp.max_position_embeddings)
    if hp.embedding_size is not None:
        fields["embedding_size"] = hp.embedding_size
    if hp.linear_groups is not None:
        fields["num_groups"] = hp.linear_groups
    fields.update(hp.model_hparam_overrides)
    size, config = resolve_model_size(hp.model_size)
    try:
        if size == "tiny":
            return ConvBertConfig(**{**TINY_MODEL, **fields})
        if config is not None:  # a configs/ row or a config file
            return config.replace(**fields)
        return ConvBertConfig.from_size(size, **fields)
    except (ConfigError, TypeError) as e:
        raise HParamsError(f"model configuration: {e}") from None


def train_settings(hp):
    """The training core's settings (training/settings.py) of a pre-training run: the one place
    pre-training hyper-parameters become core settings, for the TensorFlow and the JAX core."""
    from training.settings import TrainSettings
    return TrainSettings(
        total_steps=hp.num_train_steps, batch_size=hp.train_batch_size,
        learning_rate=hp.learning_rate, warmup_steps=hp.num_warmup_steps,
        lr_decay_power=hp.lr_decay_power, weight_decay_rate=hp.weight_decay_rate,
        clip_norm=hp.clip_norm, precision=hp.precision, jit_compile=hp.jit_compile,
        log_every=hp.log_every_n_steps, steps_per_loop=hp.steps_per_loop,
        save_every=hp.save_checkpoints_steps,
        keep_checkpoints=hp.keep_checkpoint_max, export_on_save=hp.export_on_save,
        schedule_steps=hp.lr_schedule_steps or None, cooldown_steps=hp.lr_cooldown_steps)
