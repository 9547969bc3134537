"""Function-preserving rewiring: reorder every layer's units so the most important come first.

    permutations = rewire(encoder, compute_importance(encoder, batches, loss_fn))

After it, any width is a prefix (elastic/slicing.py), as in DynaBERT (`reorder_neuron_head`). Each
layer has three permutation groups (the reference note §2.2), applied to the variables in their
Keras (= official TF1) layouts, d = head size, K = kernel taps, A = N * d:

* P_q over self-attention heads (query blocks), by SA-head importance: columns of block h
  (h*d ... (h+1)*d) of query, key, value (kernels [H, A], biases [A]) and of the span-aware key's
  pointwise kernel [1, H, A] and bias; input rows of block h of the kernel generator
  `conv_attn_kernel` [A, N*K] (the query feeds it, times the span key); rows of block h of the
  attention output dense [2A, H] (its self-attention half, rows 0 ... A).
* P_c over convolution heads, by conv-head importance: output columns g*K ... (g+1)*K (and bias)
  of `conv_attn_kernel`; rows of `lightweight_kernel` [N, K]; columns of block g of the
  convolution values `conv_attn_point` [H, A]; rows A + block g of the attention output dense.
* P_f over FFN neurons, by neuron importance, within each group for grouped FFN: columns of the
  intermediate kernel ([H, I] or [G, H/G, I/G]) and its bias (flat, group-major), rows of the
  output kernel ([I, H] or [G, I/G, H/G]).

The depthwise span convolution, LayerNorms and output biases are untouched (they live on the
hidden size). The fused Q/K/V/conv-value matmul of MixedAttention concatenates these variables at
call time, so permuting the variables is enough.
"""
from typing import Dict, List

import numpy as np
from keras import ops

from elastic.slicing import check_elastic


def descending(scores) -> np.ndarray:
    """Indices of `scores`, largest first (ties keep their order)."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def block_indices(order, block: int) -> np.ndarray:
    """Channel indices of blocks `order` of `block` channels each, e.g. heads of width d."""
    order = np.asarray(order, dtype=np.int64)
    return (order[:, None] * block + np.arange(block)[None, :]).reshape(-1)


def _permute(variable, indices, axis):
    value = ops.convert_to_numpy(variable)
    variable.assign(np.take(value, indices, axis=axis))


def rewire_layer(layer, sa_order, conv_order, ffn_order):
    """Permute one ConvBertLayer in place. `ffn_order` indexes the flat intermediate width
    (group-major); for grouped FFN it must keep every neuron inside its group."""
    attention = layer.attention
    d, width = attention.head_size, attention.num_heads * attention.head_size
    query_channels = block_indices(sa_order, d)
    for dense in (attention.query, attention.key, attention.value):
        _permute(dense.kernel, query_channels, 1)
        _permute(dense.bias, query_channels, 0)
    output_rows = query_channels
    sdc = attention.span_dynamic_conv
    if sdc is not None:
        conv_channels = block_indices(conv_order, d)
        if sdc.conv_type == "sdconv":
            _permute(sdc.conv_attn_key.pointwise_kernel, query_channels, 2)
            _permute(sdc.conv_attn_key.bias, query_channels, 0)
        if sdc.conv_type in ("sdconv", "dynamic"):
            taps = block_indices(conv_order, sdc.kernel_size)
            _permute(sdc.conv_attn_kernel.kernel, query_channels, 0)
            _permute(sdc.conv_attn_kernel.kernel, taps, 1)
            _permute(sdc.conv_attn_kernel.bias, taps, 0)
        if sdc.conv_type == "lightweight":
            _permute(sdc.lightweight_kernel, np.asarray(conv_order), 0)
        _permute(sdc.conv_attn_point.kernel, conv_channels, 1)
        _permute(sdc.conv_attn_point.bias, conv_channels, 0)
        output_rows = np.concatenate([query_channels, width + conv_channels])
    _permute(layer.attention_output.kernel, output_rows, 0)

    ffn_order = np.asarray(ffn_order, dtype=np.int64)
    _permute(layer.intermediate.bias, ffn_order, 0)
    groups = layer.num_groups
    if groups == 1:
        _permute(layer.intermediate.kernel, ffn_order, 1)
        _permute(layer.output_dense.kernel, ffn_order, 0)
        return
    per_group = len(ffn_order) // groups
    local = ffn_order.reshape(groups, per_group) - (np.arange(groups) * per_group)[:, None]
    if local.min() < 0 or local.max() >= per_group:
        raise ValueError("a grouped FFN neuron can only move within its group")
    w1 = ops.convert_to_numpy(layer.intermediate.kernel)      # [G, H/G, I/G]
    w2 = ops.convert_to_numpy(layer.output_dense.kernel)      # [G, I/G, H/G]
    layer.intermediate.kernel.assign(np.stack([w1[g][:, local[g]] for g in range(groups)]))
    layer.output_dense.kernel.assign(np.stack([w2[g][local[g], :] for g in range(groups)]))


def ffn_order(scores, num_groups: int) -> np.ndarray:
    """Flat neuron order sorting each group's neurons by descending score."""
    scores = np.asarray(scores)
    per_group = len(scores) // num_groups
    return np.concatenate([g * per_group + descending(scores[g * per_group:(g + 1) * per_group])
                           for g in range(num_groups)])


def rewire(encoder, importance) -> List[Dict[str, np.ndarray]]:
    """Reorder every layer of `encoder` (a ConvBertModel) in place by `importance`
    (elastic/importance.py `Importance`). Returns the applied orders per layer
    ({"sa_heads", "conv_heads", "ffn"}): new unit i is old unit order[i]. `importance` itself
    keeps the old order (index it with these orders to follow the units)."""
    config = encoder.config
    check_elastic(config)
    applied = []
    for i, layer in enumerate(encoder.encoder_layers):
        orders = {"sa_heads": descending(importance.sa_heads[i]),
                  "conv_heads": descending(importance.conv_heads[i]),
                  "ffn": ffn_order(importance.ffn[i], config.num_groups)}
        rewire_layer(layer, orders["sa_heads"], orders["conv_heads"], orders["ffn"])
        applied.append(orders)
    return applied
