"""Generator sizing of ELECTRA-style ConvBERT pre-training (official `get_generator_config`).

The generator is the discriminator scaled down in width (and optionally depth):

    gen_H      = round(H * generator_hidden_size)
    gen_I      = 4 * gen_H
    gen_heads  = max(1, heads * generator_hidden_size)
    gen_layers = round(L * generator_layers)

Everything else (vocabulary, embedding size E, head_ratio, kernel size, groups, dropouts) is kept, so
the generator can share the discriminator's E-wide embedding table and projects it to gen_H with its
own `embeddings_project`. The official ConvBERT repo uses 1/4 width for small and medium-small and 1/3
for base. For small this gives one head of width 64, so the bottleneck keeps N = 1 attention head and
the attention output dense sees 64 + 64 = 128 channels: its kernel is [128, 64], wider than gen_H.
`ConvBertConfig` models this exactly (`context_width`).
"""
from model.config import ConvBertConfig, ConfigError

# generator_hidden_size per official model size (yitu-opensource/ConvBert configure_pretraining.py).
DEFAULT_GENERATOR_HIDDEN_SIZE = {"small": 0.25, "medium-small": 0.25, "base": 1.0 / 3.0}


def default_generator_hidden_size(size: str) -> float:
    key = size.replace("_", "-")
    if key not in DEFAULT_GENERATOR_HIDDEN_SIZE:
        raise ConfigError(f"unknown model size {size!r}; choose one of "
                          f"{', '.join(DEFAULT_GENERATOR_HIDDEN_SIZE)}")
    return DEFAULT_GENERATOR_HIDDEN_SIZE[key]


def _int(x: float) -> int:
    # heads * fraction is integral for every official size, but 12 * (1/3) may land a hair below 4.
    return int(x + 1e-6)


def generator_config(disc_config: ConvBertConfig, generator_hidden_size: float = 0.25,
                     generator_layers: float = 1.0) -> ConvBertConfig:
    """The generator config for discriminator `disc_config` (official `get_generator_config`)."""
    if not 0 < generator_hidden_size <= 1 or not 0 < generator_layers <= 1:
        raise ConfigError("generator_hidden_size and generator_layers must be fractions in (0, 1], "
                          f"got {generator_hidden_size} and {generator_layers}")
    hidden = int(round(disc_config.hidden_size * generator_hidden_size))
    layers = max(1, int(round(disc_config.num_hidden_layers * generator_layers)))
    heads = max(1, _int(disc_config.num_attention_heads * generator_hidden_size))
    return disc_config.replace(hidden_size=hidden, intermediate_size=4 * hidden,
                               num_attention_heads=heads, num_hidden_layers=layers)
