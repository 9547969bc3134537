"""`ConvBertConfig`: the one object that describes a ConvBERT encoder.

Field names follow the official ConvBERT / BERT config (and Hugging Face's `ConvBertConfig`), so a
`config.json` from either side maps onto it directly.

Head arithmetic follows the official TF1 code (`attention_layer` in yitu-opensource/ConvBert), not
Hugging Face: the head size is `hidden_size // num_attention_heads`, the model keeps
`num_attention_heads // head_ratio` self-attention heads (at least 1) and as many convolution heads.
At `head_ratio=2` (every released model) this is identical to Hugging Face; at other ratios HF uses a
different head size (see docs/MODEL.md). `num_heads_per_kind` overrides N; only sub-networks cut
from an elastic model set it (elastic/extract.py).
"""
import dataclasses
import json
import os
from typing import Optional

from base import fileio  # user paths: local, gs://, ram:// (base/fileio.py)

CONV_TYPES = ("sdconv", "dynamic", "lightweight", "none")
# Names used elsewhere for the same variants (the official code calls the bottleneck-only model
# "noconv"); accepted on input, normalised on construction.
_CONV_TYPE_ALIASES = {"noconv": "none", "dconv": "dynamic", "lconv": "lightweight"}
HIDDEN_ACTS = ("gelu", "gelu_new", "relu", "tanh")

# Official sizes (util/training_utils.py `get_bert_config` + configure_pretraining.py of
# yitu-opensource/ConvBert): heads = H // 64, except medium-small which uses H // 48; FFN = 4H.
_SIZES = {
    "small": dict(hidden_size=256, embedding_size=128, num_attention_heads=4,
                  intermediate_size=1024, num_groups=1),
    "medium-small": dict(hidden_size=384, embedding_size=128, num_attention_heads=8,
                         intermediate_size=1536, num_groups=2),
    "base": dict(hidden_size=768, embedding_size=768, num_attention_heads=12,
                 intermediate_size=3072, num_groups=1),
}
MODEL_SIZES = tuple(_SIZES)
CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


class ConfigError(ValueError):
    """A ConvBERT configuration that cannot describe a model."""


def read_json_object(text_or_path: str, what: str = "JSON") -> tuple:
    """A JSON object given inline ('{...}') or as a file path -> (dict, where it came from).

    Used by `ConvBertConfig.from_json` and by both drivers' `--hparams`; errors name the file and
    line and are raised as ConfigError.
    """
    text, where = text_or_path, what
    if not text_or_path.lstrip().startswith("{"):
        if not fileio.isfile(text_or_path):
            raise ConfigError(f"{what} {text_or_path!r} is neither a JSON object nor an existing file")
        where = text_or_path
        try:
            text = fileio.read_text(text_or_path)
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not UTF-8 text (invalid byte at offset {e.start})") \
                from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value, where


@dataclasses.dataclass
class ConvBertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    embedding_size: Optional[int] = None  # None -> hidden_size (no E->H projection)
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    head_ratio: int = 2
    conv_kernel_size: int = 9
    num_groups: int = 1
    conv_type: str = "sdconv"
    # False drops the self-attention heads: a convolution-only model (only the query stays, as
    # the kernel generator's input). Not in the official code; an ablation.
    use_self_attention: bool = True
    # True: a left-to-right model (the language model, lm/): self-attention masked to keys ≤ t,
    # the convolutions (dynamic and span-key) padded with K-1 zeros on the left only.
    causal: bool = False
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    # N given explicitly instead of derived from num_attention_heads / head_ratio: a sub-network cut
    # from an elastic model (elastic/extract.py) whose head count does not divide the heads, e.g.
    # 3 of medium-small's 4. None (every ordinary config) = the official arithmetic.
    num_heads_per_kind: Optional[int] = None

    def __post_init__(self):
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        if isinstance(self.conv_type, str):
            self.conv_type = _CONV_TYPE_ALIASES.get(self.conv_type, self.conv_type)
        self.validate()

    # ---------------------------------------------------------------- derived head arithmetic
    @property
    def head_size(self) -> int:
        """d: width of every attention head and every convolution head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def num_self_attention_heads(self) -> int:
        """N: self-attention heads kept after the head_ratio bottleneck (official: at least 1), or
        `num_heads_per_kind` when set."""
        if self.num_heads_per_kind is not None:
            return self.num_heads_per_kind
        return max(1, int(self.num_attention_heads / self.head_ratio))

    @property
    def num_conv_heads(self) -> int:
        return self.num_self_attention_heads if self.conv_type != "none" else 0

    @property
    def attention_width(self) -> int:
        """A = N * d: width of Q, K, V (and of the conv values)."""
        return self.num_self_attention_heads * self.head_size

    @property
    def context_width(self) -> int:
        """Input width of the attention output dense: attention heads ‖ convolution heads."""
        return self.attention_width * (int(self.use_self_attention) + int(self.conv_type != "none"))

    # ---------------------------------------------------------------- validation
    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ConfigError(msg)

        for name in ("vocab_size", "hidden_size", "embedding_size", "num_hidden_layers",
                     "num_attention_heads", "head_ratio", "conv_kernel_size", "num_groups",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                 f"{name} must be a positive integer, got {value!r}")
        need(self.num_heads_per_kind is None or (
            isinstance(self.num_heads_per_kind, int) and not isinstance(self.num_heads_per_kind, bool)
            and 0 < self.num_heads_per_kind <= self.num_attention_heads),
             f"num_heads_per_kind must be null (derived from head_ratio) or an integer in "
             f"[1, num_attention_heads = {self.num_attention_heads}], got {self.num_heads_per_kind!r}")
        need(self.conv_type in CONV_TYPES,
             f"unknown conv_type {self.conv_type!r}; choose one of {', '.join(CONV_TYPES)}")
        need(isinstance(self.use_self_attention, bool),
             f"use_self_attention must be true or false, got {self.use_self_attention!r}")
        need(isinstance(self.causal, bool), f"causal must be true or false, got {self.causal!r}")
        need(self.use_self_attention or self.conv_type != "none",
             "use_self_attention=false needs a convolution (conv_type other than 'none')")
        need(self.hidden_size % self.num_attention_heads == 0,
             f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
             f"{self.num_attention_heads}")
        need(self.conv_kernel_size % 2 == 1,
             f"conv_kernel_size must be odd ('same' padding of (K-1)/2), got {self.conv_kernel_size}")
        need(self.hidden_size % self.num_groups == 0 and self.intermediate_size % self.num_groups == 0,
             f"num_groups {self.num_groups} must divide hidden_size {self.hidden_size} and "
             f"intermediate_size {self.intermediate_size}")
        need(self.hidden_act in HIDDEN_ACTS,
             f"unknown hidden_act {self.hidden_act!r}; choose one of {', '.join(HIDDEN_ACTS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool)
                 and 0.0 <= value < 1.0,
                 f"{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                 f"{name} must be a number > 0, got {value!r}")

    # ---------------------------------------------------------------- constructors / IO
    @classmethod
    def from_size(cls, size: str, **overrides) -> "ConvBertConfig":
        """The official `small`, `medium-small` or `base` ConvBERT (underscores accepted)."""
        key = size.replace("_", "-")
        if key not in _SIZES:
            raise ConfigError(f"unknown model size {size!r}; choose one of {', '.join(MODEL_SIZES)}")
        return cls(**{**_SIZES[key], **overrides})

    @classmethod
    def from_name(cls, name: str) -> "ConvBertConfig":
        """A config shipped in the repository's `configs/` directory, e.g. "electra_small"."""
        path = os.path.join(CONFIGS_DIR, name + ".json")
        if not os.path.exists(path):
            known = sorted(f[:-5] for f in os.listdir(CONFIGS_DIR) if f.endswith(".json"))
            raise ConfigError(f"unknown model name {name!r}; known: {', '.join(known)}")
        return cls.from_json(path)

    @classmethod
    def from_any(cls, spec: str) -> "ConvBertConfig":
        """A size ("small"), a configs/ name ("electra_small"), a JSON file or a JSON string."""
        if spec.replace("_", "-") in _SIZES:
            return cls.from_size(spec)
        if spec.lstrip().startswith("{") or fileio.exists(spec):
            return cls.from_json(spec)
        return cls.from_name(spec)

    @classmethod
    def from_dict(cls, d: dict, strict: bool = True) -> "ConvBertConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown and strict:
            raise ConfigError(f"unknown ConvBertConfig field(s): {', '.join(map(repr, unknown))}")
        return cls(**{k: v for k, v in d.items() if k in fields})

    @classmethod
    def from_json(cls, path_or_text: str, strict: bool = True) -> "ConvBertConfig":
        """Load from a JSON file path or a JSON string. Unknown keys are an error when `strict`."""
        d, where = read_json_object(path_or_text, "config")
        try:
            return cls.from_dict(d, strict=strict)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, path: Optional[str] = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:
            fileio.write_text_atomic(os.fspath(path), text)
        return text

    def replace(self, **changes) -> "ConvBertConfig":
        return dataclasses.replace(self, **changes)
