"""Importance of every attention head (both kinds) and FFN neuron of a fine-tuned ConvBERT.

    train, held_out = holdout_split(train_features, 512, seed=0)
    scores = compute_importance(encoder, feature_batches(held_out, 32), head_loss_fn(head, loss))
    scores.sa_heads [L, N], scores.conv_heads [L, N], scores.ffn [L, intermediate_size]

As DynaBERT (HPLM run_glue.py `compute_neuron_head_importance`, after Michel et al. 2019):

* head h: |dL/dm_h| summed over batches, m a mask of ones multiplying the head's output before
  the attention output dense (`head_mask` of ConvBertModel: self-attention heads' context, and
  each convolution head's output before the concatenation);
* FFN neuron j (first-order Taylor): |sum_row(W1 * dW1)_j + b1_j * db1_j| + |sum_col(W2 * dW2)_j|,
  summed over batches; for grouped FFN the neuron lives in its group's kernel slice and the scores
  are laid out as the FFN bias (group-major), so rewiring ranks them within each group.

Data: DynaBERT scored on the dev set, which then also selects the model, so its dev numbers
leak; we score on what the caller hands in, by default a held-out slice of train
(`holdout_split`). Gradients are per batch (GradientTape) with dropout off; DynaBERT never zeroed
its .grad between batches, so its scores sum |running gradient sums| instead (slightly different).
The gradients are TensorFlow's (TF backend); the scoring math is numpy.
"""
import dataclasses
from typing import Callable, Dict, Iterable, Iterator, Tuple

import numpy as np
from keras import ops

from elastic.slicing import check_elastic, heads_of

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass
class Importance:
    sa_heads: np.ndarray    # [layers, self-attention heads]
    conv_heads: np.ndarray  # [layers, convolution heads] (0 columns for conv_type "none")
    ffn: np.ndarray         # [layers, intermediate_size], group-major like the FFN bias
    num_examples: int = 0


def holdout_split(features: Dict[str, np.ndarray], num_examples: int, seed: int = 0
                  ) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """(the rest, a random held-out slice of `num_examples`) of a features dict: score importance
    on the slice, not on dev (which selects the model)."""
    total = len(next(iter(features.values())))
    if not 0 < num_examples < total:
        raise ValueError(f"held-out slice of {num_examples} examples needs 0 < n < {total}")
    order = np.random.default_rng(seed).permutation(total)
    held, rest = np.sort(order[:num_examples]), np.sort(order[num_examples:])
    return ({k: v[rest] for k, v in features.items()}, {k: v[held] for k, v in features.items()})


def feature_batches(features: Dict[str, np.ndarray], batch_size: int) -> Iterator[dict]:
    """Consecutive batches of a features dict (the last one may be smaller)."""
    total = len(next(iter(features.values())))
    for start in range(0, total, batch_size):
        yield {k: v[start:start + batch_size] for k, v in features.items()}


def head_loss_fn(head, loss_fn) -> Callable:
    """A GLUE-style (head, loss_fn(outputs, batch)) pair (finetune/glue_task.py
    `glue_model_fns`) as the loss of a sequence output: (sequence_output, batch) -> scalar."""
    def loss(sequence_output, batch):
        return loss_fn({"logits": head(sequence_output, training=False)}, batch)
    return loss


def ffn_neuron_scores(w1, dw1, b1, db1, w2, dw2) -> np.ndarray:
    """Per-neuron |sum_row(W1*dW1) + b1*db1| + |sum_col(W2*dW2)| in Keras layouts: dense W1 [H, I],
    W2 [I, H]; grouped W1 [G, H/G, I/G], W2 [G, I/G, H/G] -> [I], group-major."""
    if np.ndim(w1) == 2:
        incoming = (w1 * dw1).sum(axis=0)
        outgoing = (w2 * dw2).sum(axis=1)
    else:
        incoming = (w1 * dw1).sum(axis=1).reshape(-1)
        outgoing = (w2 * dw2).sum(axis=2).reshape(-1)
    return np.abs(incoming + b1 * db1) + np.abs(outgoing)


def compute_importance(encoder, batches: Iterable[dict], loss_fn: Callable) -> Importance:
    """Scores of `encoder` (a ConvBertModel) over `batches` (dicts with input_ids, input_mask,
    segment_ids and whatever `loss_fn(sequence_output, batch) -> scalar` reads, e.g. label_ids).
    Needs the TensorFlow backend (GradientTape)."""
    import tensorflow as tf
    config = encoder.config
    check_elastic(config)
    num_sa, num_conv = heads_of(config)
    ffn_variables = []
    for layer in encoder.encoder_layers:
        ffn_variables += [layer.intermediate.kernel, layer.intermediate.bias,
                          layer.output_dense.kernel]
    head_mask = tf.ones([config.num_hidden_layers, num_sa + num_conv])

    @tf.function(reduce_retracing=True, autograph=False)  # no tensor control flow
    def gradients(batch):
        with tf.GradientTape() as tape:
            tape.watch(head_mask)
            sequence_output = encoder({k: batch[k] for k in MODEL_INPUTS if k in batch},
                                      training=False, head_mask=head_mask)
            loss = tf.cast(loss_fn(sequence_output, batch), tf.float32)
        return tape.gradient(loss, [head_mask] + ffn_variables)

    heads = np.zeros([config.num_hidden_layers, num_sa + num_conv])
    ffn = np.zeros([config.num_hidden_layers, config.intermediate_size])
    values = [ops.convert_to_numpy(v) for v in ffn_variables]
    examples = 0
    for batch in batches:
        grads = [np.asarray(g) for g in gradients(dict(batch))]
        heads += np.abs(grads[0])
        for i in range(config.num_hidden_layers):
            w1, b1, w2 = values[3 * i:3 * i + 3]
            dw1, db1, dw2 = grads[1 + 3 * i:4 + 3 * i]
            ffn[i] += ffn_neuron_scores(w1, dw1, b1, db1, w2, dw2)
        examples += len(batch["input_ids"])
    if not examples:
        raise ValueError("compute_importance: no batches")
    return Importance(heads[:, :num_sa], heads[:, num_sa:], ffn, examples)
