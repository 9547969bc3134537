"""Parameter and FLOPs calculator for ConvBERT / ELECTRA / BERT encoders.

Counting convention: ELECTRA's `flops_computation.py` (google-research/electra), which the ConvBERT
paper's Tables 3, 4 and 7 follow:
  * an "operation" is a mathematical op: a matmul of [m, n] by [n] costs 2·m·n, an exp or add 1;
  * per-token element-wise constants: dropout 4, LayerNorm 5, GELU 8, softmax 5 (per element);
  * embeddings are *dense* lookups (a one-hot matmul, 2·E·V per token);
  * backward = forward, so training costs 2 × forward per example;
  * pre-training = discriminator (binary head on every token) + generator (MLM softmax on
    `output_frac` = 0.15625 of the tokens, i.e. 20 of 128 positions);
  * biases, residuals, attention scaling count one op per element.
Differences from ELECTRA's script, all O(hidden) per token: LayerNorm after attention counts
5·H (ELECTRA's script counts 5, a slip); attention weighted-sum and scores use the Q/K/V width A
(ELECTRA assumes A = H). ConvBERT additions (per token and layer, N conv heads of width d, A = N·d,
kernel K): depthwise span conv 2·K·H, pointwise 2·H·A + A, query ⊙ span-key A, kernel generator
2·A·N·K + N·K, softmax over K 5·N·K, conv-value projection 2·H·A + A, the convolution 2·K·A.
Grouped linear FFN (G groups) costs 1/G of the dense FFN matmuls.
"""
import dataclasses

from model.config import ConvBertConfig

DROPOUT_FLOPS = 4
LAYER_NORM_FLOPS = 5
ACTIVATION_FLOPS = 8
SOFTMAX_FLOPS = 5
OUTPUT_FRAC = 0.15625


# ----------------------------------------------------------------------------------- parameters
def layer_parameters(cfg: ConvBertConfig) -> int:
    h, a, c = cfg.hidden_size, cfg.attention_width, cfg.context_width
    n, k, i, g = cfg.num_self_attention_heads, cfg.conv_kernel_size, cfg.intermediate_size, cfg.num_groups
    p = (3 if cfg.use_self_attention else 1) * (h * a + a)  # query, key, value
    if cfg.conv_type == "sdconv":
        p += k * h + h * a + a                            # separable conv: depthwise, pointwise, bias
    if cfg.conv_type in ("sdconv", "dynamic"):
        p += a * n * k + n * k                            # conv_attn_kernel
    if cfg.conv_type == "lightweight":
        p += n * k
    if cfg.conv_type != "none":
        p += h * a + a                                    # conv_attn_point
    p += c * h + h + 2 * h                                # attention output dense + LayerNorm
    p += h * i // g + i + i * h // g + h + 2 * h          # FFN (grouped) + LayerNorm
    return p


def embedding_parameters(cfg: ConvBertConfig) -> int:
    e, h = cfg.embedding_size, cfg.hidden_size
    p = (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size) * e + 2 * e
    if e != h:
        p += e * h + h
    return p


def encoder_parameters(cfg: ConvBertConfig) -> int:
    """Parameters of the encoder without heads (Hugging Face `ConvBertModel` / `ElectraModel`)."""
    return embedding_parameters(cfg) + cfg.num_hidden_layers * layer_parameters(cfg)


# ----------------------------------------------------------------------------------- FLOPs
def attention_flops(cfg: ConvBertConfig, seq_len: int, include_output=True) -> dict:
    """Forward FLOPs per token of the attention block: self-attention heads, convolution heads
    and (by default) the output dense + dropout + residual + LayerNorm (BERT's `BertAttention`)."""
    h, a, n, s, k = (cfg.hidden_size, cfg.attention_width, cfg.num_self_attention_heads, seq_len,
                     cfg.conv_kernel_size)
    f = dict(kqv=3 * 2 * h * a, kqv_bias=3 * a,
             attention_scores=2 * a * s, attn_softmax=SOFTMAX_FLOPS * s * n,
             attention_dropout=DROPOUT_FLOPS * s * n, attention_scale=s * n,
             attention_weighted_avg_values=2 * a * s)
    if not cfg.use_self_attention:  # convolution-only ablation: the query alone remains
        f = dict(kqv=2 * h * a, kqv_bias=a)
    if cfg.conv_type == "sdconv":
        f.update(span_depthwise=2 * k * h, span_pointwise=2 * h * a + a, query_times_key=a)
    if cfg.conv_type in ("sdconv", "dynamic"):
        f.update(conv_kernel=2 * a * n * k + n * k, conv_kernel_softmax=SOFTMAX_FLOPS * n * k)
    if cfg.conv_type != "none":
        f.update(conv_value=2 * h * a + a, dynamic_conv=2 * k * a)
    if include_output:
        c = cfg.context_width
        f.update(attn_output=2 * c * h, attn_output_bias=h, attn_output_dropout=DROPOUT_FLOPS * h,
                 attn_output_residual=h, attn_output_layer_norm=LAYER_NORM_FLOPS * h)
    return f


def block_flops(cfg: ConvBertConfig, seq_len: int) -> dict:
    """Forward FLOPs per token of one encoder block."""
    h, i, g = cfg.hidden_size, cfg.intermediate_size, cfg.num_groups
    f = attention_flops(cfg, seq_len)
    f.update(intermediate=2 * h * i // g, intermediate_act=ACTIVATION_FLOPS * i, intermediate_bias=i,
             output=2 * h * i // g, output_bias=h, output_dropout=DROPOUT_FLOPS * h,
             output_residual=h, output_layer_norm=LAYER_NORM_FLOPS * h)
    return f


def embedding_flops(cfg: ConvBertConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the input embeddings (dense lookup) and E->H projection."""
    e, h = cfg.embedding_size, cfg.hidden_size
    f = 2 * e * cfg.vocab_size + 2 * e * (seq_len + 2) + 2 * e + LAYER_NORM_FLOPS * e + DROPOUT_FLOPS * e
    if e != h:
        f += 2 * h * e + h
    return f


def mlm_head_flops(cfg: ConvBertConfig, output_frac=OUTPUT_FRAC) -> float:
    """Per-token forward FLOPs of the generator's MLM head (applied to output_frac of tokens)."""
    e, h, v = cfg.embedding_size, cfg.hidden_size, cfg.vocab_size
    f = (2 * e * v + 2 * h * e + e + ACTIVATION_FLOPS * e + LAYER_NORM_FLOPS * e
         + SOFTMAX_FLOPS * v + 2 * v)
    return output_frac * f


def discriminator_head_flops(cfg: ConvBertConfig) -> float:
    h = cfg.hidden_size
    return 2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h


def forward_flops_per_token(cfg: ConvBertConfig, seq_len: int, head="discriminator") -> float:
    """Encoder forward FLOPs per token (+ head: "discriminator", "mlm" or None)."""
    f = cfg.num_hidden_layers * sum(block_flops(cfg, seq_len).values()) + embedding_flops(cfg, seq_len)
    if head == "discriminator":
        f += discriminator_head_flops(cfg)
    elif head == "mlm":
        f += mlm_head_flops(cfg)
    return f


def train_flops(cfg: ConvBertConfig, batch_size, steps, seq_len, head="discriminator") -> float:
    """FLOPs to train one model: 2 (forward + backward) x batch x steps x tokens x per-token."""
    return 2 * batch_size * steps * seq_len * forward_flops_per_token(cfg, seq_len, head)


# ----------------------------------------------------------------------------------- pre-training
# Peak dense bf16 FLOP/s of the accelerators MFU is quoted against (vendor datasheets, SXM parts).
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def peak_bf16_tflops(device_kind):
    """The datasheet peak of a JAX `device_kind` ("NVIDIA H100 80GB HBM3", ...), or None."""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in str(device_kind)), None)


def rtd_model_flops_per_sequence(disc_cfg: ConvBertConfig, gen_cfg: ConvBertConfig,
                                 seq_len: int) -> float:
    """Model FLOPs of one RTD training sequence for MFU: 3 x seq_len x (F_disc + F_gen), forward +
    backward = 3 x forward (the usual MFU convention; ELECTRA's tables count 2 x)."""
    f_disc = forward_flops_per_token(disc_cfg, seq_len, head="discriminator")
    f_gen = forward_flops_per_token(gen_cfg, seq_len, head="mlm")
    return 3 * seq_len * (f_disc + f_gen)


def generator_config(disc: ConvBertConfig, generator_hidden_size: float) -> ConvBertConfig:
    """The generator the official code builds: width round(H·f), heads max(1, heads·f) (ConvBERT's
    `get_generator_config`), FFN 4x, same layers, embeddings shared (so E stays)."""
    hidden = int(round(disc.hidden_size * generator_hidden_size))
    if disc.conv_type == "none":   # ELECTRA: heads = H // 64
        heads = max(1, hidden // 64)
    else:
        heads = max(1, int(disc.num_attention_heads * generator_hidden_size))
    return disc.replace(hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden,
                        num_groups=disc.num_groups if hidden % disc.num_groups == 0 else 1)


def pretrain_flops(disc: ConvBertConfig, batch_size, steps, seq_len, generator_hidden_size) -> dict:
    """ELECTRA-style replaced-token-detection pre-training FLOPs (discriminator + generator)."""
    gen = generator_config(disc, generator_hidden_size)
    d = train_flops(disc, batch_size, steps, seq_len, "discriminator")
    g = train_flops(gen, batch_size, steps, seq_len, "mlm")
    return {"discriminator": d, "generator": g, "total": d + g}


def electra_config(size: str) -> ConvBertConfig:
    """ELECTRA / BERT of the given size: every head self-attention, no convolution."""
    return ConvBertConfig.from_size(size, head_ratio=1, conv_type="none", num_groups=1)


# The paper's pre-training recipes (ConvBERT Table 3/4/7; ELECTRA Table 1/8 and its script).
RECIPES = {
    "convbert-small": dict(config=lambda: ConvBertConfig.from_size("small"), batch_size=128,
                           steps=1_000_000, seq_len=128, generator_hidden_size=0.25, paper=1.3e18),
    "convbert-medium-small": dict(config=lambda: ConvBertConfig.from_size("medium-small"),
                                  batch_size=128, steps=1_000_000, seq_len=128,
                                  generator_hidden_size=0.25, paper=None),
    "convbert-base": dict(config=lambda: ConvBertConfig.from_size("base"), batch_size=256,
                          steps=1_000_000, seq_len=128, generator_hidden_size=1 / 3, paper=1.9e19),
    # ELECTRA's paper lists 1.4e18 for ELECTRA-Small; that figure comes out with a half-width
    # (128) generator. Its script's `electra_small` entry (64-wide generator) gives 1.29e18.
    "electra-small": dict(config=lambda: electra_config("small"), batch_size=128, steps=1_000_000,
                          seq_len=128, generator_hidden_size=0.5, paper=1.4e18),
    "electra-base": dict(config=lambda: electra_config("base"), batch_size=256, steps=766_000,
                         seq_len=512, generator_hidden_size=1 / 3, paper=6.4e19),
}


@dataclasses.dataclass
class Summary:
    name: str
    parameters: int
    forward_flops_per_token: float
    pretrain_flops: float
    paper: float = None


def summarize(name: str) -> Summary:
    r = RECIPES[name]
    cfg = r["config"]()
    total = pretrain_flops(cfg, r["batch_size"], r["steps"], r["seq_len"],
                           r["generator_hidden_size"])["total"]
    return Summary(name, encoder_parameters(cfg), forward_flops_per_token(cfg, r["seq_len"]),
                   total, r["paper"])
