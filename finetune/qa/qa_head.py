"""ELECTRA's span-extraction QA head (SQuAD / MRQA) as a backend-agnostic Keras 3 layer.

Only `keras.ops` is used, so the head runs on the TensorFlow and JAX backends alike.

Given the encoder output h [B, L, H], `input_mask` and `segment_ids` [B, L]:

* answer mask = context tokens (input_mask * segment_ids) plus [CLS] (position 0); masked
  positions get `-1000` added to their logits (ELECTRA's `1000 * (mask - 1)`);
* start logits: dense(1) over h, masked                                           [B, L]
* joint end prediction (`joint_prediction=True`, ELECTRA default): the features of a start
  position are concatenated with every position, concat(h[start], h[j]) -> dense(512, gelu)
  (`qa_hidden`) -> dense(1), masked. With `start_positions` (training: the gold start) this gives
  `end_logits` [B, L]; at inference the `beam_size` best starts (log-softmax top-k) each give a
  row of end logits whose top-k are returned:
  `start_top_log_probs`/`start_top_index` [B, K], `end_top_log_probs`/`end_top_index` [B, K, K];
* plain end prediction (`joint_prediction=False`): end logits dense(1) over h, masked;
* answerability classifier (`answerable_classifier=True`): concat(h[CLS], sum_j softmax(start)_j
  h_j) -> dense(512, gelu) -> dense(1) = `answerable_logit` [B] (label: `is_impossible`; higher
  means *no* answer; it is also the null score used by post-processing).

The concat -> dense(512) is computed as W_start h[start] + W_end h[j] + b with the two halves of the
one [2H, 512] kernel (identical maths, but the [B, K, L, 2H] concat is never built).

`qa_loss(outputs, features)`: mean over the batch of (CE(start) + CE(end)) / 2 +
`answerable_weight` (0.5) * sigmoid-BCE(answerable_logit, is_impossible).
"""
import keras
from keras import ops

from model.initializers import truncated_normal

MASK_PENALTY = 1000.0


def _activation(name):
    if name == "gelu":  # exact erf GELU, as the toolkit's encoder
        return lambda x: ops.gelu(x, approximate=False)
    if name == "gelu_new":  # tanh approximation (BERT/ELECTRA TF1 `modeling.gelu`)
        return lambda x: ops.gelu(x, approximate=True)
    return keras.activations.get(name)


def answer_mask(input_mask, segment_ids, dtype="float32"):
    """1.0 for context tokens (segment 1, not padding) and for [CLS] (position 0), else 0.0."""
    mask = ops.cast(input_mask, dtype) * ops.cast(segment_ids, dtype)
    seq_len = ops.shape(mask)[1]
    cls = ops.cast(ops.equal(ops.arange(seq_len), 0), dtype)
    return ops.minimum(mask + cls[None, :], 1.0)


@keras.saving.register_keras_serializable(package="convbert")
class ElectraQAHead(keras.layers.Layer):
    """ELECTRA QA head; see the module docstring.

    call(sequence_output, input_mask, segment_ids, start_positions=None, training=None,
         return_beam=None) -> dict of tensors:
        start_logits [B, L] (masked); answerable_logit [B] (if the classifier is on);
        end_logits [B, L] (plain head, or joint head with start_positions);
        start_top_log_probs, start_top_index [B, K], end_top_log_probs, end_top_index [B, K, K]
        (joint head when return_beam, which defaults to `not training`).
    """

    def __init__(self, beam_size=20, qa_hidden_size=512, joint_prediction=True,
                 answerable_classifier=True, answerable_uses_start_logits=True,
                 hidden_act="gelu", initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.beam_size = int(beam_size)
        self.qa_hidden_size = int(qa_hidden_size)
        self.joint_prediction = bool(joint_prediction)
        self.answerable_classifier = bool(answerable_classifier)
        self.answerable_uses_start_logits = bool(answerable_uses_start_logits)
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.act = _activation(hidden_act)
        init = lambda: truncated_normal(initializer_range)  # noqa: E731
        self.start_dense = keras.layers.Dense(1, kernel_initializer=init(), name="start_logits")
        if self.joint_prediction:
            self.qa_hidden = keras.layers.Dense(self.qa_hidden_size, kernel_initializer=init(),
                                                name="qa_hidden")
        self.end_dense = keras.layers.Dense(1, kernel_initializer=init(), name="end_logits")
        if self.answerable_classifier:
            if self.answerable_uses_start_logits:
                self.answerable_hidden = keras.layers.Dense(
                    self.qa_hidden_size, kernel_initializer=init(), name="answerable_hidden")
            self.answerable_dense = keras.layers.Dense(1, kernel_initializer=init(),
                                                       name="answerable_logits")

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.start_dense.build((None, None, hidden))
        if self.joint_prediction:
            self.qa_hidden.build((None, None, 2 * hidden))
            self.end_dense.build((None, None, self.qa_hidden_size))
        else:
            self.end_dense.build((None, None, hidden))
        if self.answerable_classifier:
            if self.answerable_uses_start_logits:
                self.answerable_hidden.build((None, 2 * hidden))
                self.answerable_dense.build((None, self.qa_hidden_size))
            else:
                self.answerable_dense.build((None, hidden))
        self.built = True

    # -- pieces ---------------------------------------------------------------------------------
    def _end_hidden(self, start_features, sequence_output):
        """gelu(qa_hidden(concat(start_features[..., None, :], h))) without building the concat.

        start_features [B, K, H] (K starts) -> [B, K, L, qa_hidden_size]."""
        hidden = ops.shape(sequence_output)[-1]
        kernel = ops.cast(self.qa_hidden.kernel, sequence_output.dtype)
        bias = ops.cast(self.qa_hidden.bias, sequence_output.dtype)
        from_start = ops.matmul(start_features, kernel[:hidden])          # [B, K, D]
        from_end = ops.matmul(sequence_output, kernel[hidden:]) + bias    # [B, L, D]
        return self.act(from_start[:, :, None, :] + from_end[:, None, :, :])

    def _joint_end_logits(self, start_features, sequence_output, penalty):
        """End logits [B, K, L] for K start feature vectors [B, K, H]."""
        z = self._end_hidden(start_features, sequence_output)
        logits = ops.squeeze(self.end_dense(z), axis=-1)
        return logits + penalty[:, None, :]

    def call(self, sequence_output, input_mask, segment_ids, start_positions=None,
             training=None, return_beam=None):
        h = sequence_output
        dtype = h.dtype
        seq_len = ops.shape(h)[1]
        mask = answer_mask(input_mask, segment_ids, dtype)
        penalty = (mask - 1.0) * MASK_PENALTY                              # 0 or -1000
        start_logits = ops.squeeze(self.start_dense(h), axis=-1) + penalty
        outputs = {"start_logits": start_logits}

        if not self.joint_prediction:
            outputs["end_logits"] = ops.squeeze(self.end_dense(h), axis=-1) + penalty
        else:
            if return_beam is None:
                return_beam = not training
            if start_positions is None and not return_beam:
                raise ValueError("the joint QA head needs start_positions when training "
                                 "(or return_beam=True)")
            if start_positions is not None:
                gold = ops.one_hot(ops.cast(start_positions, "int32"), seq_len, dtype=dtype)
                start_feat = ops.einsum("bl,blh->bh", gold, h)[:, None, :]   # [B, 1, H]
                end = self._joint_end_logits(start_feat, h, penalty)
                outputs["end_logits"] = end[:, 0, :]
            if return_beam:
                k = self.beam_size
                if isinstance(h.shape[1], int):
                    k = min(k, h.shape[1])
                start_log_probs = ops.log_softmax(ops.cast(start_logits, "float32"), axis=-1)
                top_lp, top_idx = ops.top_k(start_log_probs, k=k)            # [B, K]
                onehot = ops.one_hot(top_idx, seq_len, dtype=dtype)          # [B, K, L]
                start_feat = ops.einsum("bkl,blh->bkh", onehot, h)           # [B, K, H]
                end = self._joint_end_logits(start_feat, h, penalty)          # [B, K, L]
                end_log_probs = ops.log_softmax(ops.cast(end, "float32"), axis=-1)
                end_lp, end_idx = ops.top_k(end_log_probs, k=k)              # [B, K, K]
                outputs.update(start_top_log_probs=top_lp, start_top_index=top_idx,
                               end_top_log_probs=end_lp, end_top_index=end_idx)

        if self.answerable_classifier:
            cls = h[:, 0]
            if self.answerable_uses_start_logits:
                start_p = ops.softmax(ops.cast(start_logits, "float32"), axis=-1)
                pooled = ops.einsum("bl,blh->bh", ops.cast(start_p, dtype), h)
                rep = self.act(self.answerable_hidden(ops.concatenate([cls, pooled], axis=-1)))
            else:
                rep = cls
            outputs["answerable_logit"] = ops.squeeze(self.answerable_dense(rep), axis=-1)
        return outputs

    def weight_map(self):
        """ELECTRA TF1 names relative to `task_specific/squad/` (dense layers in creation order)."""
        m = {"dense/kernel": self.start_dense.kernel, "dense/bias": self.start_dense.bias}
        if self.joint_prediction:
            m.update({"qa_hidden/kernel": self.qa_hidden.kernel,
                      "qa_hidden/bias": self.qa_hidden.bias})
        m.update({"dense_1/kernel": self.end_dense.kernel, "dense_1/bias": self.end_dense.bias})
        if self.answerable_classifier:
            if self.answerable_uses_start_logits:
                m.update({"dense_2/kernel": self.answerable_hidden.kernel,
                          "dense_2/bias": self.answerable_hidden.bias,
                          "dense_3/kernel": self.answerable_dense.kernel,
                          "dense_3/bias": self.answerable_dense.bias})
            else:
                m.update({"dense_2/kernel": self.answerable_dense.kernel,
                          "dense_2/bias": self.answerable_dense.bias})
        return m

    def get_config(self):
        return {**super().get_config(), "beam_size": self.beam_size,
                "qa_hidden_size": self.qa_hidden_size, "joint_prediction": self.joint_prediction,
                "answerable_classifier": self.answerable_classifier,
                "answerable_uses_start_logits": self.answerable_uses_start_logits,
                "hidden_act": self.hidden_act, "initializer_range": self.initializer_range}


def _position_ce(logits, positions):
    logits = ops.cast(logits, "float32")
    log_probs = ops.log_softmax(logits, axis=-1)
    onehot = ops.one_hot(ops.cast(positions, "int32"), ops.shape(logits)[-1], dtype="float32")
    return -ops.sum(onehot * log_probs, axis=-1)


def sigmoid_bce_with_logits(logits, labels):
    """Numerically stable sigmoid cross-entropy, elementwise."""
    x = ops.cast(logits, "float32")
    z = ops.cast(labels, "float32")
    return ops.relu(x) - x * z + ops.log1p(ops.exp(-ops.abs(x)))


def qa_loss(outputs, features, answerable_weight=0.5, reduction="mean"):
    """ELECTRA's QA loss from the head outputs and the feature labels.

    `features` needs `start_positions`, `end_positions` and, when the outputs contain
    `answerable_logit`, `is_impossible`. Per example: (CE(start) + CE(end)) / 2 +
    answerable_weight * BCE(answerable_logit, is_impossible). reduction: "mean" or "none".
    """
    if "end_logits" not in outputs:
        raise ValueError("qa_loss needs end_logits: call the joint head with start_positions")
    losses = (_position_ce(outputs["start_logits"], features["start_positions"])
              + _position_ce(outputs["end_logits"], features["end_positions"])) / 2.0
    if "answerable_logit" in outputs and answerable_weight:
        losses = losses + answerable_weight * sigmoid_bce_with_logits(
            outputs["answerable_logit"], features["is_impossible"])
    if reduction == "none":
        return losses
    if reduction == "mean":
        return ops.mean(losses)
    raise ValueError(f"unknown reduction {reduction!r}")
