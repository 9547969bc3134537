"""Cut a sub-network out of a (rewired) elastic ConvBERT into a dense, smaller ConvBERT.

    subnet = Subnet.for_width(encoder.config, 0.5, depth_mult=0.75)
    small = extract(encoder, subnet)              # a ConvBertModel, outputs = sliced_forward's
    export(encoder, subnet, "out/", format="keras")   # ConvBertModel.from_pretrained("out/")
    subnetwork_cost(encoder.config, subnet, seq_len=128)  # {"parameters", "flops_per_token"}

The smaller config keeps hidden size, embeddings and num_attention_heads (so the head size
d = hidden / num_attention_heads is unchanged) and says n heads of each kind with the existing
field `head_ratio = num_attention_heads / n` where n divides num_attention_heads; where it does not
(medium-small's 3 of 4: 8 / 3) it sets the explicit `num_heads_per_kind = n` (model/config.py).
The config has one head count for both kinds, so sub-networks with different self-attention and
convolution head counts (which `sliced_forward` runs) cannot be extracted. Layers are renumbered
0 ... D-1 in order; a classifier head on top is unchanged (it reads the full hidden size).

Hugging Face: its ConvBERT derives the head size from hidden_size, num_attention_heads and
head_ratio assuming the self-attention and convolution heads together are hidden_size wide
(model/hf_convert.py `config_to_hf`), so a sub-network with fewer heads cannot be written in its
format; `export(..., format="hf")` refuses it with a one-line ConfigError. Depth-only (and
FFN-only) sub-networks export and load back.

Hidden size (`Subnet.hidden` = h, elastic/slicing.py): the config gets hidden_size h and
num_attention_heads h / d (d, the head size, unchanged), embedding_size E when the full model has
an E->H projection (its kept columns) and h otherwise (the tables' kept columns); every weight
on the residual stream keeps the sub-network's hidden channels (`HiddenChannels`: the first h, or
the first h/G of each of G FFN groups). An h equal to E in a model with a projection is refused:
the h-wide config would have no projection (ConvBertConfig has one exactly when E != H). Such a
cell is Hugging Face-expressible when its heads fill it (2 n d = h, e.g. the rebuttal's
H = 128 / 256 / 512 of a 768-wide base model with 1 / 2 / 4 heads of each kind): it exports
with format="hf"; other cells are refused in one line.
"""
import os
import re

import numpy as np
from keras import ops

from elastic.slicing import HiddenChannels, check_elastic, heads_of
from model import checkpoints, flops
from model.config import ConfigError

_LAYER_NAME = re.compile(r"^(.*/encoder/layer_)(\d+)/(.+)$")
_EMBEDDINGS_NAME = re.compile(r"^(?:.*/)?(embeddings|embeddings_project)/(.+)$")


def subnetwork_config(config, subnet):
    """The ConvBertConfig of `subnet` of a model with `config`."""
    subnet.validate(config)
    full_sa, full_conv = heads_of(config)
    if full_conv and subnet.sa_heads != subnet.conv_heads:
        raise ConfigError(f"a ConvBERT config has one head count for both kinds; cannot extract "
                          f"{subnet.sa_heads} self-attention + {subnet.conv_heads} convolution heads")
    changes = dict(num_hidden_layers=len(subnet.layers),
                   intermediate_size=subnet.ffn_per_group * config.num_groups)
    num_attention_heads = config.num_attention_heads
    if subnet.hidden is not None:
        hidden = subnet.hidden
        projected = config.embedding_size != config.hidden_size
        if projected and hidden == config.embedding_size:
            raise ConfigError(
                f"cannot extract hidden size {hidden}: it equals the embedding size of a model "
                f"with an embedding projection, and a ConvBERT config with embedding_size == "
                f"hidden_size has none; choose another hidden size")
        num_attention_heads = hidden // config.head_size
        changes.update(hidden_size=hidden, num_attention_heads=num_attention_heads,
                       embedding_size=config.embedding_size if projected else hidden)
    heads = subnet.sa_heads
    if heads != config.num_self_attention_heads or subnet.hidden is not None:
        if num_attention_heads % heads == 0:
            changes.update(head_ratio=num_attention_heads // heads, num_heads_per_kind=None)
        else:
            changes.update(num_heads_per_kind=heads)
    sub = config.replace(**changes)
    assert heads_of(sub) == (subnet.sa_heads, subnet.conv_heads)
    assert sub.head_size == config.head_size
    return sub


def _slice_layer_weight(name, array, config, subnet):
    """One layer weight (name relative to encoder/layer_i/, Keras layout) cut to `subnet`: heads
    and FFN neurons, then the hidden channels (`HiddenChannels`) of every axis that is the hidden
    state's."""
    d = config.head_size
    full_width = config.attention_width
    sa, conv = subnet.sa_heads * d, subnet.conv_heads * d
    taps, per_group = config.conv_kernel_size, subnet.ffn_per_group
    groups = config.num_groups
    channels = HiddenChannels.of(config, subnet)
    rows = channels.take_array    # the hidden state's channels along an axis
    kept = channels.keep // groups   # hidden channels per FFN group
    if re.fullmatch(r"attention/self/(query|key|value)/kernel", name):
        return rows(array[:, :sa], 0)
    if re.fullmatch(r"attention/self/(query|key|value)/bias", name):
        return array[:sa]
    if name == "attention/self/conv_attn_key/depthwise_kernel":    # [K, H, 1]
        return rows(array, 1)
    if name == "attention/self/conv_attn_key/pointwise_kernel":    # [1, H, A]
        return rows(array[:, :, :sa], 1)
    if name == "attention/self/conv_attn_key/bias":
        return array[:sa]
    if name == "attention/self/conv_attn_kernel/kernel":           # [A, N*K]
        return array[:sa, :subnet.conv_heads * taps]
    if name == "attention/self/conv_attn_kernel/bias":
        return array[:subnet.conv_heads * taps]
    if name == "attention/self/lightweight_kernel":                # [N, K]
        return array[:subnet.conv_heads]
    if name == "attention/self/conv_attn_point/kernel":            # [H, A]
        return rows(array[:, :conv], 0)
    if name == "attention/self/conv_attn_point/bias":
        return array[:conv]
    if name == "attention/output/dense/kernel":                    # [SA ‖ conv, H]
        if config.conv_type == "none":
            return rows(array[:sa], 1)
        return rows(np.concatenate([array[:sa], array[full_width:full_width + conv]], axis=0), 1)
    if name == "intermediate/dense/kernel":                        # [H, I]
        return rows(array[:, :per_group], 0)
    if name == "output/dense/kernel":                              # [I, H]
        return rows(array[:per_group], 1)
    if name == "intermediate/g_dense/kernel":                      # [G, H/G, I/G]
        return array[:, :kept, :per_group]
    if name == "output/g_dense/kernel":                            # [G, I/G, H/G]
        return array[:, :per_group, :kept]
    if re.fullmatch(r"intermediate/(g_)?dense/bias", name):       # flat, group-major
        return array.reshape(groups, -1)[:, :per_group].reshape(-1)
    # output biases, LayerNorms: hidden-size wide
    if re.fullmatch(r"(attention/output/dense|output/(g_)?dense)/bias|.*LayerNorm/(gamma|beta)",
                    name):
        return rows(array, 0)
    raise ValueError(f"no slicing rule for the layer weight {name!r}")


def _slice_embedding_weight(kind, name, array, config, subnet):
    """An `embeddings/...` or `embeddings_project/...` weight cut to the sub-network's hidden
    channels: the projection's output columns, or without a projection the tables' columns and
    the embedding LayerNorm; embeddings followed by a projection stay E wide."""
    channels = HiddenChannels.of(config, subnet)
    if kind == "embeddings_project":                               # kernel [E, H], bias [H]
        return channels.take_array(array, -1)
    if config.embedding_size != config.hidden_size:
        return array
    return channels.take_array(array, -1)                          # tables [V, H], LayerNorm [H]


def subnetwork_weights(encoder, subnet):
    """{official TF1 name: array} of the extracted model: kept layers renumbered 0 ... D-1."""
    config = encoder.config
    subnet.validate(config)
    new_index = {old: new for new, old in enumerate(subnet.layers)}
    tensors = {}
    for name, variable in encoder.weight_map().items():
        array = ops.convert_to_numpy(variable)
        match = _LAYER_NAME.match(name)
        if match is None:
            top = _EMBEDDINGS_NAME.match(name)
            tensors[name] = array if top is None else np.ascontiguousarray(
                _slice_embedding_weight(top.group(1), top.group(2), array, config, subnet))
            continue
        old = int(match.group(2))
        if old in new_index:
            tensors[f"{match.group(1)}{new_index[old]}/{match.group(3)}"] = np.ascontiguousarray(
                _slice_layer_weight(match.group(3), array, config, subnet))
    return tensors


def extract(encoder, subnet):
    """A new, dense ConvBertModel equal to `subnet` of `encoder` (its sliced forward)."""
    from model import ConvBertModel
    check_elastic(encoder.config)
    model = ConvBertModel(subnetwork_config(encoder.config, subnet),
                          conv_implementation=encoder.conv_implementation)
    checkpoints.assign_weights(model.weight_map(), subnetwork_weights(encoder, subnet),
                               where="extracted sub-network")
    return model


def export(encoder, subnet, directory, format="keras"):
    """Write `subnet` of `encoder` as a checkpoint `ConvBertModel.from_pretrained` loads:
    format "keras" (native) or "tf1" for any sub-network, "hf" (transformers) only for those with
    every head (depth and FFN reductions) or, with a smaller hidden size, whose heads fill it
    (2 n d = h); returns the directory written."""
    full_sa, full_conv = heads_of(encoder.config)
    if format == "hf" and subnet.hidden is None and \
            (subnet.sa_heads, subnet.conv_heads) != (full_sa, full_conv):
        raise ConfigError(
            f"cannot export a sub-network with fewer heads ({subnet.sa_heads} of {full_sa}) to "
            "Hugging Face format: HF ConvBERT assumes the attention and convolution heads together "
            "are hidden_size wide; use format='keras' (loads with ConvBertModel.from_pretrained)")
    sub_config = subnetwork_config(encoder.config, subnet)   # errors before anything is written
    if format == "hf":
        from model import hf_convert
        try:
            hf_convert.config_to_hf(sub_config)
        except ConfigError as e:
            if subnet.hidden is None:
                raise
            raise ConfigError(
                f"cannot export the hidden-size-{subnet.hidden} sub-network ({subnet.sa_heads} "
                f"heads of each kind of {sub_config.head_size}) to Hugging Face format: {e}; use "
                "format='keras' (loads with ConvBertModel.from_pretrained)") from None
    return extract(encoder, subnet).save_pretrained(os.fspath(directory), format=format)


def subnetwork_cost(config, subnet, seq_len=128):
    """Encoder parameters (no heads) and forward FLOPs per token (model/flops.py conventions,
    no task head) of `subnet`."""
    sub = subnetwork_config(config, subnet)
    return {"parameters": flops.encoder_parameters(sub),
            "flops_per_token": flops.forward_flops_per_token(sub, seq_len, head=None)}
