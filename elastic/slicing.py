"""Sub-networks of an elastic ConvBERT: which units a (heads, FFN, depth[, hidden size]) choice
keeps, and that sub-network's forward pass computed from slices of the full model's variables.

    subnet = Subnet.for_width(config, width_mult=0.5, depth_mult=0.75)   # per-size head table
    subnet = Subnet.make(config, heads=1, ffn_fraction=0.5, depth_mult=0.5)
    subnet = Subnet.for_hidden(config, 256, num_layers=4)     # the rebuttal's (L, H) = (4, 256)
    out = sliced_forward(encoder, inputs, subnet, output_hidden_states=True)

Width keeps a prefix of each permutation group of every layer (most important first once the
model is rewired, elastic/rewire.py): the first `sa_heads` self-attention heads (their query blocks,
which also feed the convolution-kernel generator), the first `conv_heads` convolution heads and
the first `ffn_per_group` FFN neurons of each FFN group. With `hidden` unset (DynaBERT's width)
hidden size, embeddings and LayerNorms stay full. Depth keeps DynaBERT's layers (`kept_layers`).

Hidden size (`Subnet.hidden`, the rebuttal's elastic pre-training, `Subnet.for_hidden`): every
tensor on the residual stream keeps the same h of the H channels (`HiddenChannels`): the first h,
or with grouped FFN (G groups) the first h/G of each group, so the h-wide model's grouped linear
layers see the same inputs. That is the E->H projection's output columns (or, without a projection,
the embedding tables' columns and the embedding LayerNorm), every LayerNorm (statistics over the
h channels, as an h-wide model computes them), the input rows of every dense layer that reads the
hidden state (queries, keys, values, the span-aware key's depthwise and pointwise kernels, the conv
values, FFN in) and the output columns of every dense layer that writes it (attention output, FFN
out). The head size stays H / num_attention_heads.

`sliced_forward` is the reference an extracted model (elastic/extract.py) must equal and the
forward elastic training differentiates: gradients reach the full model's variables.
"""
import dataclasses
import math
from typing import Optional, Tuple

import numpy as np
from keras import ops

from model.config import ConfigError
from model.mixed_attention import attention_bias_from_mask
from model.span_dynamic_conv import (_DYNAMIC_CONV, _cut, compiled_by_xla,
                                     depthwise_conv_shifted_sum, resolve_implementation)

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


def layers_for_count(num_layers: int, count: int) -> Tuple[int, ...]:
    """`count` of `num_layers` layers by DynaBERT's rule at md = count / num_layers (evenly spread
    drops, the last layer always dropped when count < num_layers): 4 of 6 keeps (0, 1, 3, 4),
    3 of 6 keeps (0, 2, 4). The rebuttal's L = 4 of an elastic 6-layer model."""
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or \
            not 1 <= count <= num_layers:
        raise ConfigError(f"layer count must be an integer in [1, {num_layers}], got {count!r}")
    layers = kept_layers(num_layers, count / num_layers)
    assert len(layers) == count, (num_layers, count, layers)
    return layers


def heads_of(config) -> Tuple[int, int]:
    """(self-attention heads, convolution heads) per layer of `config`."""
    return (config.num_self_attention_heads if config.use_self_attention else 0,
            config.num_conv_heads)


def check_elastic(config):
    """Elastic width needs the query blocks to belong to self-attention heads; the sliced forward
    is bidirectional (the encoder), not the causal language model."""
    if not config.use_self_attention:
        raise ConfigError("elastic ConvBERT does not support the convolution-only ablation "
                          "(use_self_attention=false): its query blocks have no self-attention "
                          "head to rank")
    if config.causal:
        raise ConfigError("elastic ConvBERT does not support causal (language-model) configs: "
                          "the sliced forward has no causal masking")


class HiddenChannels:
    """The h of H hidden channels a sub-network keeps on the residual stream: the first h, or with
    G > 1 FFN groups the first h/G channels of each group of H/G (group-major), so that an h-wide
    model's grouped linear layers (G groups of h/G) read exactly these channels in this order."""

    def __init__(self, full: int, keep: int, groups: int = 1):
        self.full, self.keep, self.groups = int(full), int(keep), int(groups)

    @classmethod
    def of(cls, config, subnet) -> "HiddenChannels":
        keep = config.hidden_size if subnet.hidden is None else subnet.hidden
        return cls(config.hidden_size, keep, config.num_groups)

    @property
    def is_full(self) -> bool:
        return self.keep == self.full

    def indices(self) -> np.ndarray:
        """The kept channels' indices in the full model, in the order the h-wide model has them."""
        per_group, kept = self.full // self.groups, self.keep // self.groups
        return np.concatenate([g * per_group + np.arange(kept) for g in range(self.groups)])

    def take(self, x, axis=-1):
        """`x` (a tensor, H wide along `axis`) with only the kept channels (differentiable: a
        split, or a reshape to [.., G, H/G, ..] and a split, never a gather)."""
        if self.is_full:
            return x
        axis = axis % len(x.shape)
        if self.groups == 1:
            return _cut(x, 0, self.keep, axis)
        shape = list(ops.shape(x))
        grouped = ops.reshape(x, shape[:axis] + [self.groups, self.full // self.groups]
                              + shape[axis + 1:])
        kept = _cut(grouped, 0, self.keep // self.groups, axis + 1)
        return ops.reshape(kept, shape[:axis] + [self.keep] + shape[axis + 1:])

    def take_array(self, array, axis=-1):
        """The same on a NumPy array (extraction)."""
        return array if self.is_full else np.take(array, self.indices(), axis=axis)


@dataclasses.dataclass(frozen=True)
class Subnet:
    """One sub-network: heads of each kind and FFN neurons per group kept in every kept layer, and
    optionally the hidden size h kept on the residual stream (None: all of it)."""
    sa_heads: int
    conv_heads: int
    ffn_per_group: int
    layers: Tuple[int, ...]
    hidden: Optional[int] = None

    @classmethod
    def make(cls, config, heads: Optional[int] = None, sa_heads: Optional[int] = None,
             conv_heads: Optional[int] = None, ffn_fraction: float = 1.0,
             depth_mult: float = 1.0, hidden: Optional[int] = None,
             layers: Optional[Tuple[int, ...]] = None) -> "Subnet":
        """`heads` sets both kinds (what a ConvBertConfig can express); `sa_heads` /
        `conv_heads` set one kind each; unset = all. FFN neurons per group: ffn_fraction of
        them, rounded half up, at least 1. `hidden`: the hidden size kept (None or H: all);
        `layers`: explicit kept layer indices instead of `depth_mult`."""
        full_sa, full_conv = heads_of(config)
        if heads is not None:
            sa_heads = heads if sa_heads is None else sa_heads
            conv_heads = heads if conv_heads is None else conv_heads
        sa_heads = full_sa if sa_heads is None else sa_heads
        conv_heads = full_conv if (conv_heads is None or not full_conv) else conv_heads
        if not 0 < ffn_fraction <= 1:
            raise ConfigError(f"FFN fraction must be in (0, 1], got {ffn_fraction!r}")
        per_group = config.intermediate_size // config.num_groups
        if layers is None:
            layers = kept_layers(config.num_hidden_layers, depth_mult)
        if hidden is not None:
            check_hidden_size(config, hidden)
            # the full hidden size is the same sub-network as leaving it unset
            hidden = None if hidden == config.hidden_size else int(hidden)
        subnet = cls(int(sa_heads), int(conv_heads),
                     max(1, round_half_up(per_group * ffn_fraction)), tuple(layers), hidden)
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
    def for_hidden(cls, config, hidden_size: int, num_layers: Optional[int] = None,
                   depth_mult: Optional[float] = None) -> "Subnet":
        """The rebuttal's (L, H) cell: hidden size h; heads of each kind `head_count(N, h/H)`
        (never 0; head size stays H / num_attention_heads) and FFN neurons per group h/H of
        them; depth `num_layers` layers (`layers_for_count`: DynaBERT's rule at L / layers) or
        DynaBERT's `depth_mult` (default: every layer)."""
        if num_layers is not None and depth_mult is not None:
            raise ConfigError("give the depth as num_layers or depth_mult, not both")
        check_hidden_size(config, hidden_size)
        fraction = hidden_size / config.hidden_size
        full_sa, full_conv = heads_of(config)
        layers = (layers_for_count(config.num_hidden_layers, num_layers)
                  if num_layers is not None
                  else kept_layers(config.num_hidden_layers, 1.0 if depth_mult is None
                                   else depth_mult))
        return cls.make(config, sa_heads=head_count(full_sa, fraction),
                        conv_heads=head_count(full_conv, fraction) if full_conv else 0,
                        ffn_fraction=fraction, hidden=hidden_size, layers=layers)

    @classmethod
    def full(cls, config) -> "Subnet":
        return cls.make(config)

    def hidden_size(self, config) -> int:
        return config.hidden_size if self.hidden is None else self.hidden

    def validate(self, config):
        check_elastic(config)
        full_sa, full_conv = heads_of(config)
        per_group = config.intermediate_size // config.num_groups
        problems = []
        if self.hidden is not None:
            check_hidden_size(config, self.hidden)
            room = self.hidden // config.head_size   # num_attention_heads of the h-wide model
            if max(self.sa_heads, self.conv_heads) > room:
                problems.append(f"{max(self.sa_heads, self.conv_heads)} heads of one kind do not "
                                f"fit hidden size {self.hidden} ({room} heads of "
                                f"{config.head_size})")
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
            self.ffn_per_group * config.num_groups == config.intermediate_size and \
            self.hidden_size(config) == config.hidden_size


def check_hidden_size(config, hidden):
    """A hidden size a sub-network of `config` can keep: an integer in [1, H], a multiple of the
    head size (the h-wide model has h / d heads of the same size d) and of num_groups."""
    d, groups, full = config.head_size, config.num_groups, config.hidden_size
    if isinstance(hidden, bool) or not isinstance(hidden, (int, np.integer)) or \
            not 1 <= hidden <= full or hidden % d or hidden % groups:
        raise ConfigError(
            f"hidden size {hidden!r} does not fit the model: need an integer in [1, {full}] that "
            f"is a multiple of the head size {d}" + (f" and of num_groups {groups}"
                                                     if groups > 1 else ""))


# ----------------------------------------------------------------------------------- forward
def _value(variable, dtype):
    return ops.cast(variable, dtype)


_ALL = HiddenChannels(1, 1)   # "every hidden channel" (what a sub-network without `hidden` keeps)


def _layer_norm(layer, x, channels):
    """A LayerNormalization over the kept channels only (its gamma / beta cut to them; mean and
    variance over those h channels, as the h-wide model's LayerNorm computes them)."""
    if channels.is_full:
        return layer(x)
    gamma = channels.take(ops.convert_to_tensor(layer.gamma), 0)
    beta = channels.take(ops.convert_to_tensor(layer.beta), 0)
    out = ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=layer.epsilon)
    return ops.cast(out, layer.compute_dtype)


def _span_key(sdc, hidden, channels, width):
    """The span-aware key of the kept query blocks on the kept hidden channels (SpanDynamicConv's
    `span_key` on cut kernels: depthwise [K, h], pointwise [h, width]; same dispatch)."""
    layer, dtype = sdc.conv_attn_key, hidden.dtype
    depthwise = channels.take(_value(layer.depthwise_kernel, dtype), 1)          # [K, h, 1]
    pointwise = channels.take(_value(layer.pointwise_kernel, dtype)[0], 0)[:, :width]
    if compiled_by_xla():
        spanned = depthwise_conv_shifted_sum(hidden, depthwise[:, :, 0])
    else:
        spanned = ops.squeeze(ops.depthwise_conv(ops.expand_dims(hidden, 2),
                                                 ops.expand_dims(depthwise, 1),
                                                 padding="same"), 2)
    return ops.matmul(spanned, pointwise) + _value(layer.bias, dtype)[:width]


def sliced_attention_context(attention, hidden, attention_bias, sa_heads, conv_heads,
                             training=None, channels=_ALL):
    """MixedAttention with only the first `sa_heads` / `conv_heads` heads (reading the hidden
    state's kept `channels`): [B, T, (sa_heads + conv_heads) * d], self-attention channels first
    (as the full layer)."""
    batch, seq_len = ops.shape(hidden)[0], ops.shape(hidden)[1]
    d, dtype = attention.head_size, hidden.dtype
    width = sa_heads * d

    def project(dense, columns):
        kernel = channels.take(_value(dense.kernel, dtype)[:, :columns], 0)
        return ops.matmul(hidden, kernel) + _value(dense.bias, dtype)[:columns]

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
        if sdc.conv_type == "sdconv" and channels.is_full:
            # the span-aware key of the kept query blocks (computed full width and cut: the
            # layer's own depthwise-conv dispatch, at A instead of a columns of one matmul)
            generator_input = query * sdc.span_key(hidden)[..., :width]
        elif sdc.conv_type == "sdconv":   # on the kept hidden channels only
            generator_input = query * _span_key(sdc, hidden, channels, width)
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


def _sliced_ffn(layer, hidden, per_group, channels=_ALL):
    dtype, groups = hidden.dtype, layer.num_groups
    w1, b1 = _value(layer.intermediate.kernel, dtype), _value(layer.intermediate.bias, dtype)
    w2, b2 = _value(layer.output_dense.kernel, dtype), _value(layer.output_dense.bias, dtype)
    b2 = channels.take(b2, 0)
    if groups == 1:
        inner = layer.act(ops.matmul(hidden, channels.take(w1[:, :per_group], 0))
                          + b1[:per_group])
        return ops.matmul(inner, channels.take(w2[:per_group], 1)) + b2
    # [G, H/G, I/G] / [G, I/G, H/G]: the kept channels are the first h/G of each group
    kept = (w1.shape[1] if channels.is_full else channels.keep // groups)
    w1, w2 = w1[:, :kept, :per_group], w2[:, :per_group, :kept]
    leading = ops.shape(hidden)[:-1]
    grouped = ops.reshape(hidden, (-1, groups, kept))
    inner = ops.einsum("mgi,gio->mgo", grouped, w1) + \
        ops.reshape(b1, (groups, -1))[:, :per_group]
    out = ops.einsum("mgi,gio->mgo", layer.act(inner), w2)
    return ops.reshape(out, (*leading, groups * kept)) + b2


def sliced_layer(layer, hidden, attention_bias, subnet, training=None, channels=_ALL):
    """One ConvBertLayer restricted to the sub-network's heads and FFN neurons (and with
    `channels`, its hidden channels: `hidden` is then h wide)."""
    attention = layer.attention
    context = sliced_attention_context(attention, hidden, attention_bias, subnet.sa_heads,
                                       subnet.conv_heads, training, channels)
    d, full_width = attention.head_size, attention.num_heads * attention.head_size
    rows = _value(layer.attention_output.kernel, hidden.dtype)
    kept_rows = [rows[:subnet.sa_heads * d]]
    if attention.span_dynamic_conv is not None:  # the convolution half starts at full_width
        kept_rows.append(rows[full_width:full_width + subnet.conv_heads * d])
    attended = ops.matmul(context, channels.take(ops.concatenate(kept_rows, axis=0), 1)) + \
        channels.take(_value(layer.attention_output.bias, hidden.dtype), 0)
    attention_out = _layer_norm(layer.attention_layer_norm,
                                hidden + layer.attention_dropout(attended, training=training),
                                channels)
    ffn = _sliced_ffn(layer, attention_out, subnet.ffn_per_group, channels)
    return _layer_norm(layer.output_layer_norm,
                       attention_out + layer.output_dropout(ffn, training=training), channels)


def _sliced_embeddings(encoder, inputs, channels, training=None):
    """(embedding output, encoder input) of the sub-network: with an E->H projection the
    embeddings stay E wide and the projection keeps the kept columns; without one (E == H) the
    tables' kept columns (looked up full, then cut) and the embedding LayerNorm over them."""
    embeddings = encoder.embeddings
    project = encoder.embeddings_project
    input_ids, segment_ids = inputs["input_ids"], inputs.get("segment_ids")
    if channels.is_full or project is not None:
        embedded = embeddings(input_ids, segment_ids, training=training)
        if project is None:
            return embedded, embedded
        kernel = channels.take(_value(project.kernel, embedded.dtype), 1)
        bias = channels.take(_value(project.bias, embedded.dtype), 0)
        return embedded, ops.matmul(embedded, kernel) + bias
    # ConvBertEmbeddings.call on the kept channels
    seq_len = ops.shape(input_ids)[1]
    if segment_ids is None:
        segment_ids = ops.zeros_like(input_ids)
    x = ops.take(embeddings.word_embeddings, input_ids, axis=0)
    x = x + ops.take(embeddings.token_type_embeddings, segment_ids, axis=0)
    x = x + ops.expand_dims(embeddings.position_embeddings[:seq_len], 0)
    x = channels.take(ops.cast(x, embeddings.compute_dtype), -1)
    x = embeddings.dropout(_layer_norm(embeddings.layer_norm, x, channels), training=training)
    return x, x


def sliced_forward(encoder, inputs, subnet, training=None, output_hidden_states=False):
    """The sub-network `subnet` of `encoder` (a ConvBertModel) on `inputs` ({input_ids,
    input_mask, segment_ids}): the sequence output [B, T, h] (h: the sub-network's hidden size),
    or with `output_hidden_states` the dict {sequence_output, embedding_output, hidden_states}
    (embeddings output + each kept layer's output), as ConvBertModel returns them."""
    subnet.validate(encoder.config)
    channels = HiddenChannels.of(encoder.config, subnet)
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    if input_mask is None:
        input_mask = ops.ones_like(input_ids)
    embedded, hidden = _sliced_embeddings(encoder, inputs, channels, training)
    bias = attention_bias_from_mask(input_mask, hidden.dtype)
    hidden_states = [hidden]
    for index in subnet.layers:
        hidden = sliced_layer(encoder.encoder_layers[index], hidden, bias, subnet, training,
                              channels)
        hidden_states.append(hidden)
    if not output_hidden_states:
        return hidden
    return {"sequence_output": hidden, "embedding_output": embedded,
            "hidden_states": hidden_states}


def sliced_discriminator_head(head, hidden, subnet, config):
    """ELECTRA's discriminator head (model/heads.py `DiscriminatorHead`: dense H->H, activation,
    dense H->1) on a sub-network's output: with a smaller hidden size both of its dense layers
    keep the sub-network's hidden channels (input rows, and the inner width cut the same way)."""
    channels = HiddenChannels.of(config, subnet)
    if channels.is_full:
        return head(hidden)
    dtype = hidden.dtype
    kernel = channels.take(channels.take(_value(head.dense.kernel, dtype), 0), 1)
    inner = head.act(ops.matmul(hidden, kernel)
                     + channels.take(_value(head.dense.bias, dtype), 0))
    logits = ops.matmul(inner, channels.take(_value(head.dense_prediction.kernel, dtype), 0)) + \
        _value(head.dense_prediction.bias, dtype)
    return ops.squeeze(logits, axis=-1)
