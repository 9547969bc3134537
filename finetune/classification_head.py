"""ELECTRA's GLUE heads (official `finetune/classification/classification_tasks.py`), keras.ops.

* classification: dropout(0.1) on the [CLS] vector h[:, 0] -> dense(num_labels); softmax
  cross-entropy. (Hugging Face's ConvBertForSequenceClassification adds a dense+gelu layer
  first; the official ConvBERT/ELECTRA head does not.)
* regression (STS-B): the same with dense(1); the target is the label scaled to [0, 1]
  ((label - min) / max, i.e. label / 5); squared error. Predictions are mapped back to the label
  scale (x 5) for the TSV files and the leaderboard.

Weights are named as the official checkpoint names them: `task_specific/<task>/dense/{kernel,bias}`.
"""
import keras
from keras import ops

from model.initializers import truncated_normal


@keras.saving.register_keras_serializable(package="convbert")
class ClassificationHead(keras.layers.Layer):
    """call(sequence_output [B, T, H], training) -> logits [B, num_labels] ([B] for regression)."""

    def __init__(self, num_labels, is_regression=False, dropout_rate=0.1,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_labels = int(num_labels)
        self.is_regression = bool(is_regression)
        if self.is_regression and self.num_labels != 1:
            raise ValueError("a regression head has exactly one output")
        self.dropout_rate = float(dropout_rate)
        self.initializer_range = float(initializer_range)
        self.dropout = keras.layers.Dropout(self.dropout_rate)
        self.dense = keras.layers.Dense(
            self.num_labels, name="dense",
            kernel_initializer=truncated_normal(self.initializer_range))

    def build(self, input_shape):
        self.dense.build((None, input_shape[-1]))
        self.built = True

    def call(self, sequence_output, training=None):
        cls = sequence_output[:, 0]
        logits = self.dense(self.dropout(cls, training=training))
        if self.is_regression:
            return ops.squeeze(logits, axis=-1)
        return logits

    def weight_map(self, prefix=""):
        return {f"{prefix}dense/kernel": self.dense.kernel, f"{prefix}dense/bias": self.dense.bias}

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "is_regression": self.is_regression, "dropout_rate": self.dropout_rate,
                "initializer_range": self.initializer_range}


def classification_loss(logits, label_ids, reduction="mean"):
    """Softmax cross-entropy of integer labels [B] against logits [B, C]."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    onehot = ops.one_hot(ops.cast(label_ids, "int32"), ops.shape(logits)[-1], dtype="float32")
    losses = -ops.sum(onehot * log_probs, axis=-1)
    return ops.mean(losses) if reduction == "mean" else losses


def regression_loss(predictions, targets, reduction="mean"):
    """Squared error between the head output [B] and normalised targets [B] (ELECTRA)."""
    losses = ops.square(ops.cast(predictions, "float32") - ops.cast(targets, "float32"))
    return ops.mean(losses) if reduction == "mean" else losses


def normalize_regression_label(label, min_value=0.0, max_value=5.0):
    """ELECTRA's target: (label - min) / max (STS-B: label / 5)."""
    return (label - min_value) / max_value


def denormalize_regression_output(output, min_value=0.0, max_value=5.0):
    return output * max_value + min_value
