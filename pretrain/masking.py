"""Dynamic masking for MLM / replaced-token detection, as the official ELECTRA / ConvBERT `mask`.

For each example:

* candidates are the `input_mask` tokens except [CLS], [SEP] and [MASK] ([PAD] is out through
  `input_mask`);
* num_to_predict = max(1, min(max_predictions_per_seq, round(num_real_tokens * mask_prob))), where
  num_real_tokens = sum(input_mask) counts [CLS] and [SEP] (round half to even, as tf.round);
* max_predictions_per_seq positions are drawn uniformly among the candidates *with replacement*;
  slots beyond num_to_predict get weight 0, position 0 and label id 0;
* 85% of the chosen slots put [MASK] at their position; the other 15% leave the token unchanged
  (no random-token replacement). Duplicates and position 0 behave as the official `scatter_update`.

Randomness comes from `pretrain.sampling` keyed by (seed, step, example_id), so the result for an
example does not depend on which batch, replica or run computes it. One deviation from the official
code, for an example without any candidate token (only [CLS]/[SEP]): every slot gets weight 0
(the official code samples from an all -inf distribution there).
"""
from keras import ops

from pretrain import sampling

# BERT uncased vocabulary ids.
CLS_ID, SEP_ID, MASK_ID = 101, 102, 103


def default_max_predictions_per_seq(max_seq_length: int, mask_prob: float = 0.15) -> int:
    """The official default int((mask_prob + 0.005) * max_seq_length): 19 at 128."""
    return int((mask_prob + 0.005) * max_seq_length)


def num_to_predict(input_mask, mask_prob=0.15, max_predictions_per_seq=19):
    """[B] int32 number of weighted prediction slots of each example (depends on input_mask only)."""
    num_tokens = ops.sum(ops.cast(input_mask, "float32"), axis=-1)
    count = ops.cast(ops.round(num_tokens * ops.cast(mask_prob, "float32")), "int32")
    return ops.maximum(1, ops.minimum(max_predictions_per_seq, count))


def scatter_update(sequence, updates, positions):
    """Official `pretrain_helpers.scatter_update` in keras.ops.

    sequence [B, T] (int) or [B, T, D] (float); updates [B, N] or [B, N, D]; positions [B, N].
    Position 0 is never updated (it is where unused slots point); a position hit by several slots
    gets the mean of their updates (floor division for integers). Returns (updated sequence,
    updates_mask [B, T] int32 = 1 where some slot wrote).
    """
    seq_len = ops.shape(sequence)[1]
    one_hot = ops.one_hot(positions, seq_len, dtype="int32")                  # [B, N, T]
    not_first = ops.cast(ops.arange(seq_len) > 0, "int32")
    counts = ops.sum(one_hot, axis=1) * not_first                              # [B, T]
    hit = ops.minimum(counts, 1)
    if len(sequence.shape) == 2:
        updates = ops.cast(updates, sequence.dtype)
        summed = ops.sum(ops.cast(one_hot, sequence.dtype) * ops.expand_dims(updates, -1), axis=1)
        if "int" in str(sequence.dtype):
            values = ops.floor_divide(summed, ops.cast(ops.maximum(counts, 1), sequence.dtype))
        else:
            values = summed / ops.cast(ops.maximum(counts, 1), sequence.dtype)
        mask = ops.cast(hit, sequence.dtype)
        return (1 - mask) * sequence + mask * values, hit
    summed = ops.einsum("bnt,bnd->btd", ops.cast(one_hot, updates.dtype), updates)
    values = summed / ops.cast(ops.expand_dims(ops.maximum(counts, 1), -1), updates.dtype)
    mask = ops.cast(ops.expand_dims(hit, -1), sequence.dtype)
    return (1 - mask) * sequence + mask * ops.cast(values, sequence.dtype), hit


def gather_positions(sequence, positions):
    """[B, T, ...] gathered at positions [B, N] -> [B, N, ...]."""
    index = positions
    for _ in range(len(sequence.shape) - 2):
        index = ops.expand_dims(index, -1)
    return ops.take_along_axis(sequence, index, axis=1)


def mask_inputs(input_ids, input_mask, example_id, step, seed=0, mask_prob=0.15,
                max_predictions_per_seq=19, cls_id=CLS_ID, sep_id=SEP_ID, mask_id=MASK_ID):
    """Mask a batch. Returns a dict of int32/float32 tensors:

    input_ids [B, T] (masked), masked_lm_positions [B, N], masked_lm_ids [B, N] (original ids),
    masked_lm_weights [B, N] float32, keys [B] uint32 (the per-example random keys of this step).
    """
    input_ids = ops.cast(input_ids, "int32")
    input_mask = ops.cast(input_mask, "int32")
    n = int(max_predictions_per_seq)
    keys = sampling.example_keys(seed, step, example_id)

    candidates = input_mask * ops.cast((input_ids != cls_id) & (input_ids != sep_id)
                                       & (input_ids != mask_id), "int32")      # [B, T]
    num_candidates = ops.sum(candidates, axis=-1)                              # [B]
    has_candidates = ops.cast(num_candidates > 0, "int32")
    weights = ops.cast(ops.expand_dims(ops.arange(n), 0)
                       < ops.expand_dims(num_to_predict(input_mask, mask_prob, n), 1), "int32")
    weights = weights * ops.expand_dims(has_candidates, 1)                     # [B, N]

    # Slot j takes the k-th candidate, k = floor(u * C): uniform with replacement.
    u = sampling.uniform(sampling.stream_keys(keys, sampling.STREAM_MASK_POSITIONS), n)
    c = ops.expand_dims(num_candidates, 1)
    k = ops.cast(ops.floor(u * ops.cast(c, "float32")), "int32")
    k = ops.minimum(k, ops.maximum(c - 1, 0))                                  # [B, N]
    cumulative = ops.cumsum(candidates, axis=-1)                               # [B, T]
    positions = ops.sum(ops.cast(ops.expand_dims(cumulative, 1) <= ops.expand_dims(k, -1), "int32"),
                        axis=-1)                                               # [B, N]
    positions = positions * weights
    masked_lm_ids = gather_positions(input_ids, positions) * weights

    u_replace = sampling.uniform(sampling.stream_keys(keys, sampling.STREAM_MASK_REPLACE), n)
    replace_positions = positions * ops.cast(u_replace < 0.85, "int32")
    masked_ids, _ = scatter_update(input_ids, ops.full_like(positions, mask_id), replace_positions)
    return {"input_ids": ops.stop_gradient(masked_ids), "masked_lm_positions": positions,
            "masked_lm_ids": masked_lm_ids, "masked_lm_weights": ops.cast(weights, "float32"),
            "keys": keys}
