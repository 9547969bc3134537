"""Sub-networks of an elastic ConvBERT: which units a (heads, FFN, depth) choice keeps, and that
sub-network's forward pass computed from slices of the full model's variables.

    subnet = Subnet.for_width(config, width_mult=0.5, depth_mult=0.75)   # per-size head table
    subnet = Subnet.make(config, heads=1, ffn_fraction=0.5, depth_mult=0.5)
    out = sliced_forward(encoder, inputs, subnet, output_hidden_states=True)

Width keeps a prefix of each permutation group of every layer (most important first once the
model is rewired, elastic/rewire.py): the first `sa_heads` self-attention heads (their query blocks,
which also feed the convolution-kernel generator), the first `conv_heads` convolution heads and
the first `ffn_per_group` FFN neurons of each FFN group. Hidden size, embeddings and LayerNorms
stay full (DynaBERT's width). Depth keeps DynaBERT's layers (`kept_layers`).

`sliced_forward` is the reference an extracted model (elastic/extract.py) must equal and the
forward elastic training differentiates: gradients reach the full model's variables.
"""
import dataclasses
import math
from typing import Optional, Tuple

from keras import ops

from model.config import ConfigError
from model.mixed_attention import attention_bias_from_mask
from model.span_dynamic_conv import _DYNAMIC_CONV, resolve_implementation

# DynaBERT's multipliers (HPLM run_glue.py `width_mult_list`, `depth_mult_list`).
WIDTH_MULTS = (1.0, 0.75, 0.5, 0.25)
DEPTH_MULTS = (1.0, 0.75, 0.5)

# Heads of each kind kept at each width multiplier, by N (heads of each kind in the full model):
# small 2, medium-small 4, base 6. DynaBERT's round(12 * mw) would give small 0 heads at 0.25 and
# Python's banker's rounding 4 (not 5) of base's 4.5; the rule here is round half up, at least 1,
# written out for the official sizes (other N use the same rule, `head_count`).
HEAD_COUNTS = {
    2: {1.0: 2, 0.75: 2, 0.5: 1, 0.25: 1},
    4: {1.0: 4, 0.75: 3, 0.5: 2, 0.25: 1},
    6: {1.0: 6, 0.75: 5, 0.5: 3, 0.25: 2},
}


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def head_count(num_heads: int, width_mult: float) -> int:
    """Heads of one kind kept at `width_mult` of `num_heads` (HEAD_COUNTS; never 0)."""
    for mult, count in HEAD_COUNTS.get(num_heads, {}).items():
        if abs(mult - width_mult) < 1e-9:
            return count
    return min(num_heads, max(1, round_half_up(num_heads * width_mult)))


def kept_layers(num_layers: int, depth_mult: float) -> Tuple[int, ...]:
    """DynaBERT's depth rule (modeling_bert.py `BertEncoder`): keep layer floor(i / md) for
    i < round(L * md) (Python's round, as the official code; at least one layer). md 0.5 of 12
    keeps every other layer, 0.75 drops every fourth; the last layer always goes when md < 1."""
    if not 0 < depth_mult <= 1:
        raise ConfigError(f"depth multiplier must be in (0, 1], got {depth_mult!r}")
    depth = max(1, round(num_layers * depth_mult))
    return tuple(int(math.floor(i / depth_mult + 1e-9)) for i in range(depth))


def heads_of(config) -> Tuple[int, int]:
    """(self-attention heads, convolution heads) per layer of `config`."""
    return (config.num_self_attention_heads if config.use_self_attention else 0,
            config.num_conv_heads)


def check_elastic(config):
    """Elastic width needs the query blocks to belong to self-attention heads."""
    if not config.use_self_attention:
        raise ConfigError("elastic ConvBERT does not support the convolution-only ablation "
                          "(use_self_attention=false): its query blocks have no self-attention "
                          "head to rank")


@dataclasses.dataclass(frozen=True)
class Subnet:
    """One sub-network: heads of each kind and FFN neurons per group kept in every kept layer."""
    sa_heads: int
    conv_heads: int
    ffn_per_group: int
    layers: Tuple[int, ...]

    @classmethod
    def make(cls, config, heads: Optional[int] = None, sa_heads: Optional[int] = None,
             conv_heads: Optional[int] = None, ffn_fraction: float = 1.0,
             depth_mult: float = 1.0) -> "Subnet":
        """`heads` sets both kinds (what a ConvBertConfig can express); `sa_heads` /
        `conv_heads` set one kind each; unset = all. FFN neurons per group: ffn_fraction of
        them, rounded half up, at least 1."""
        full_sa, full_conv = heads_of(config)
        if heads is not None:
            sa_heads = heads if sa_heads is None else sa_heads
            conv_heads = heads if conv_heads is None else conv_heads
        sa_heads = full_sa if sa_heads is None else sa_heads
        conv_heads = full_conv if (conv_heads is None or not full_conv) else conv_heads
        if not 0 < ffn_fraction <= 1:
            raise ConfigError(f"FFN fraction must be in (0, 1], got {ffn_fraction!r}")
        per_group = config.intermediate_size // config.num_groups
        subnet = cls(int(sa_heads), int(conv_heads),
                     max(1, round_half_up(per_group * ffn_fraction)),
                     kept_layers(config.num_hidden_layers, depth_mult))
        subnet.validate(config)
        return subnet

    @classmethod
    def for_width(cls, config, width_mult: float, depth_mult: float = 1.0) -> "Subnet":
        """DynaBERT's (mw, md) cell: heads from HEAD_COUNTS, FFN fraction mw."""
        full_sa, full_conv = heads_of(config)
        return cls.make(config, sa_heads=head_count(full_sa, width_mult),
                        conv_heads=head_count(full_conv, width_mult) if full_conv else 0,
                        ffn_fraction=width_mult, depth_mult=depth_mult)

    @classmethod
    def full(cls, config) -> "Subnet":
        return cls.make(config)

    def validate(self, config):
        check_elastic(config)
        full_sa, full_conv = heads_of(config)
        per_group = config.intermediate_size // config.num_groups
        problems = []
        if not 1 <= self.sa_heads <= full_sa:
            problems.append(f"self-attention heads {self.sa_heads} not in [1, {full_sa}]")
        if full_conv and not 1 <= self.conv_heads <= full_conv:
            problems.append(f"convolution heads {self.conv_heads} not in [1, {full_conv}]")
        if not full_conv and self.conv_heads:
            problems.append(f"conv_type 'none' has no convolution heads, got {self.conv_heads}")
        if not 1 <= self.ffn_per_group <= per_group:
            problems.append(f"FFN neurons per group {self.ffn_per_group} not in [1, {per_group}]")
        layers = list(self.layers)
        if not layers or layers != sorted(set(layers)) or not all(
                0 <= i < config.num_hidden_layers for i in layers):
            problems.append(f"layers {self.layers} are not increasing indices below "
                            f"{config.num_hidden_layers}")
        if problems:
            raise ConfigError("sub-network does not fit the model: " + "; ".join(problems))

    def is_full_width(self, config) -> bool:
        return (self.sa_heads, self.conv_heads) == heads_of(config) and \
            self.ffn_per_group * config.num_groups == config.intermediate_size


# ----------------------------------------------------------------------------------- forward
def _value(variable, dtype):
    return ops.cast(variable, dtype)


def sliced_attention_context(attention, hidden, attention_bias, sa_heads, conv_heads,
                             training=None):
    """MixedAttention with only the first `sa_heads` / `conv_heads` heads:
    [B, T, (sa_heads + conv_heads) * d], self-attention channels first (as the full layer)."""
    batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
    d, dtype = attention.head_size, hidden.dtype
    width = sa_heads * d

    def project(dense, columns):
        return ops.matmul(hidden, _value(dense.kernel, dtype)[:, :columns]) + \
            _value(dense.bias, dtype)[:columns]

    def heads(x, n):
        return ops.reshape(x, (batch, seq_len, n, d))

    query = project(attention.query, width)
    q, k, v = heads(query, sa_heads), heads(project(attention.key, width), sa_heads), \
        heads(project(attention.value, width), sa_heads)
    scores = ops.einsum("bqnd,bknd->bnqk", q, k) * ops.cast(1.0 / math.sqrt(d), dtype)
    if attention_bias is not None:
        scores = scores + ops.cast(attention_bias, scores.dtype)
    probs = attention.probs_dropout(ops.softmax(scores, axis=-1), training=training)
    context = ops.reshape(ops.einsum("bnqk,bknd->bqnd", probs, v), (batch, seq_len, width))
    sdc = attention.span_dynamic_conv
    if sdc is None:
        return context
    taps = sdc.kernel_size
    if sdc.conv_type == "lightweight":
        logits = ops.reshape(_value(sdc.lightweight_kernel, dtype)[:conv_heads],
                             (1, 1, conv_heads, taps))
    else:
        generator_input = query
        if sdc.conv_type == "sdconv":  # the span-aware key of the kept query blocks (computed
            # full width and cut: the layer's own depthwise-conv dispatch, at A instead of a
            # columns of one pointwise matmul)
            generator_input = query * sdc.span_key(hidden)[..., :width]
        kernel_dense = sdc.conv_attn_kernel
        logits = ops.matmul(generator_input,
                            _value(kernel_dense.kernel, dtype)[:width, :conv_heads * taps]) + \
            _value(kernel_dense.bias, dtype)[:conv_heads * taps]
        logits = ops.reshape(logits, (batch, seq_len, conv_heads, taps))
    conv_kernel = ops.softmax(logits, axis=-1)
    values = heads(project(sdc.conv_attn_point, conv_heads * d), conv_heads)
    implementation = resolve_implementation(sdc.implementation, hidden.shape[1])
    conv = _DYNAMIC_CONV[implementation](values, conv_kernel)
    return ops.concatenate([context, ops.reshape(conv, (batch, seq_len, conv_heads * d))], axis=-1)


def _sliced_ffn(layer, hidden, per_group):
    dtype, groups = hidden.dtype, layer.num_groups
    w1, b1 = _value(layer.intermediate.kernel, dtype), _value(layer.intermediate.bias, dtype)
    w2, b2 = _value(layer.output_dense.kernel, dtype), _value(layer.output_dense.bias, dtype)
    if groups == 1:
        inner = layer.act(ops.matmul(hidden, w1[:, :per_group]) + b1[:per_group])
        return ops.matmul(inner, w2[:per_group]) + b2
    leading = ops.shape(hidden)[:-1]
    grouped = ops.reshape(hidden, (-1, groups, w1.shape[1]))
    inner = ops.einsum("mgi,gio->mgo", grouped, w1[:, :, :per_group]) + \
        ops.reshape(b1, (groups, -1))[:, :per_group]
    out = ops.einsum("mgi,gio->mgo", layer.act(inner), w2[:, :per_group, :])
    return ops.reshape(out, (*leading, w2.shape[0] * w2.shape[2])) + b2


def sliced_layer(layer, hidden, attention_bias, subnet, training=None):
    """One ConvBertLayer restricted to the sub-network's heads and FFN neurons."""
    attention = layer.attention
    context = sliced_attention_context(attention, hidden, attention_bias, subnet.sa_heads,
                                       subnet.conv_heads, training)
    d, full_width = attention.head_size, attention.num_heads * attention.head_size
    rows = _value(layer.attention_output.kernel, hidden.dtype)
    kept_rows = [rows[:subnet.sa_heads * d]]
    if attention.span_dynamic_conv is not None:  # the convolution half starts at full_width
        kept_rows.append(rows[full_width:full_width + subnet.conv_heads * d])
    attended = ops.matmul(context, ops.concatenate(kept_rows, axis=0)) + \
        _value(layer.attention_output.bias, hidden.dtype)
    attention_out = layer.attention_layer_norm(
        hidden + layer.attention_dropout(attended, training=training))
    ffn = _sliced_ffn(layer, attention_out, subnet.ffn_per_group)
    return layer.output_layer_norm(attention_out + layer.output_dropout(ffn, training=training))


def sliced_forward(encoder, inputs, subnet, training=None, output_hidden_states=False):
    """The sub-network `subnet` of `encoder` (a ConvBertModel) on `inputs` ({input_ids,
    input_mask, segment_ids}): the sequence output [B, T, H], or with `output_hidden_states` the
    dict {sequence_output, embedding_output, hidden_states} (embeddings output + each kept
    layer's output), as ConvBertModel returns them."""
    subnet.validate(encoder.config)
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    if input_mask is None:
        input_mask = ops.ones_like(input_ids)
    embedded = encoder.embeddings(input_ids, inputs.get("segment_ids"), training=training)
    hidden = embedded
    if encoder.embeddings_project is not None:
        hidden = encoder.embeddings_project(hidden)
    bias = attention_bias_from_mask(input_mask, hidden.dtype)
    hidden_states = [hidden]
    for index in subnet.layers:
        hidden = sliced_layer(encoder.encoder_layers[index], hidden, bias, subnet, training)
        hidden_states.append(hidden)
    if not output_hidden_states:
        return hidden
    return {"sequence_output": hidden, "embedding_output": embedded,
            "hidden_states": hidden_states}
