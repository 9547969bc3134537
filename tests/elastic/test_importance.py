"""Head and FFN-neuron importance (elastic/importance.py) and the head-mask hook it relies on."""
import numpy as np
import pytest

import keras
from keras import ops

from elastic.importance import (compute_importance, feature_batches, ffn_neuron_scores,
                                head_loss_fn, holdout_split)
from finetune.classification_head import classification_loss
from model.mixed_attention import attention_bias_from_mask
from tests.elastic.test_rewire import CONFIGS, classifier, randomized_model
from tests.model.test_checkpoints import tiny_inputs

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="importance uses TensorFlow's GradientTape")


def features(num_examples=6, seed=0):
    inputs = tiny_inputs(batch=num_examples, vocab=100, seed=seed)
    inputs["label_ids"] = (np.arange(num_examples) % 3).astype("int32")
    return inputs


def loss_fn(head):
    return head_loss_fn(head, lambda outputs, batch: classification_loss(outputs["logits"],
                                                                          batch["label_ids"]))


def output_rows(layer, head_index):
    """Rows of the attention output dense that read head `head_index` (SA heads first)."""
    d = layer.attention.head_size
    return slice(head_index * d, (head_index + 1) * d)


@pytest.mark.parametrize("name", ["sdconv", "groups2", "bert"])
def test_scores_have_the_model_shapes(name):
    model = randomized_model(**CONFIGS[name])
    head = classifier(model.config.hidden_size)
    scores = compute_importance(model, feature_batches(features(), 4), loss_fn(head))
    config = model.config
    conv = 0 if config.conv_type == "none" else config.num_self_attention_heads
    assert scores.sa_heads.shape == (2, config.num_self_attention_heads)
    assert scores.conv_heads.shape == (2, conv)
    assert scores.ffn.shape == (2, config.intermediate_size)
    assert scores.num_examples == 6
    for array in (scores.sa_heads, scores.conv_heads, scores.ffn):
        assert np.isfinite(array).all() and (array >= 0).all()
    assert (scores.sa_heads > 0).all() and (scores.ffn > 0).mean() > 0.9


def test_a_head_nobody_reads_scores_zero():
    """Zero the output-dense rows of SA head 1 in layer 0 and of convolution head 0 in layer 1:
    their mask gradients, hence scores, are exactly 0; the other heads' are not."""
    model = randomized_model(**CONFIGS["sdconv"])
    n = model.config.num_self_attention_heads
    for layer_index, head_index in ((0, 1), (1, n + 0)):
        layer = model.encoder_layers[layer_index]
        kernel = ops.convert_to_numpy(layer.attention_output.kernel)
        kernel[output_rows(layer, head_index)] = 0.0
        layer.attention_output.kernel.assign(kernel)
    head = classifier(model.config.hidden_size)
    scores = compute_importance(model, feature_batches(features(), 3), loss_fn(head))
    assert scores.sa_heads[0, 1] == 0.0 and scores.conv_heads[1, 0] == 0.0
    assert scores.sa_heads[0, 0] > 0 and scores.conv_heads[1, 1] > 0
    assert (scores.sa_heads[1] > 0).all() and (scores.conv_heads[0] > 0).all()


def test_head_mask_hook():
    """Ones = no mask (exactly); a zero = that head's output-dense rows zeroed, for both kinds."""
    model = randomized_model(**CONFIGS["sdconv"])
    inputs = tiny_inputs(vocab=100)
    heads = 2 * model.config.num_self_attention_heads
    plain = ops.convert_to_numpy(model(inputs))
    ones = ops.convert_to_numpy(model(inputs, head_mask=np.ones((2, heads), "float32")))
    np.testing.assert_array_equal(ones, plain)
    for head_index in (0, heads - 1):   # an SA head, a convolution head
        mask = np.ones((2, heads), "float32")
        mask[1, head_index] = 0.0
        masked = ops.convert_to_numpy(model(inputs, head_mask=mask))
        layer = model.encoder_layers[1]
        kernel = ops.convert_to_numpy(layer.attention_output.kernel)
        zeroed = kernel.copy()
        zeroed[output_rows(layer, head_index)] = 0.0
        layer.attention_output.kernel.assign(zeroed)
        np.testing.assert_allclose(masked, ops.convert_to_numpy(model(inputs)), atol=1e-5)
        layer.attention_output.kernel.assign(kernel)
        assert np.abs(masked - plain).max() > 1e-3


@pytest.mark.parametrize("groups", [1, 2])
def test_ffn_scores_match_a_hand_computation(groups):
    """On a 1-layer model, sum_row(W1*dW1) + b1*db1 = sum over tokens of z*dL/dz (z the FFN
    pre-activation) and sum_col(W2*dW2) = sum over tokens of a*dL/da (a = act(z)): the score is
    |sum z dz| + |sum a da| per neuron, computed here from the layer's own pieces."""
    import tensorflow as tf
    name = "groups2" if groups == 2 else "sdconv"
    model = randomized_model(**dict(CONFIGS[name], num_hidden_layers=1))
    head = classifier(model.config.hidden_size)
    batch = features(4)
    scores = compute_importance(model, [batch], loss_fn(head))

    layer = model.encoder_layers[0]
    with tf.GradientTape() as tape:
        hidden = model.embeddings_project(model.embeddings(batch["input_ids"], batch["segment_ids"]))
        bias = attention_bias_from_mask(batch["input_mask"])
        attention_out = layer.attention_layer_norm(
            hidden + layer.attention_output(layer.attention(hidden, bias)))
        z = layer.intermediate(attention_out)
        a = layer.act(z)
        out = layer.output_layer_norm(attention_out + layer.output_dense(a))
        loss = classification_loss(head(out), batch["label_ids"])
    dz, da = (ops.convert_to_numpy(g) for g in tape.gradient(loss, [z, a]))
    np.testing.assert_allclose(ops.convert_to_numpy(out), ops.convert_to_numpy(model(batch)),
                               atol=1e-6)
    z, a = ops.convert_to_numpy(z), ops.convert_to_numpy(a)
    expected = np.abs((z * dz).sum(axis=(0, 1))) + np.abs((a * da).sum(axis=(0, 1)))
    np.testing.assert_allclose(scores.ffn[0], expected, rtol=1e-4, atol=1e-7)


def test_ffn_formula_on_numbers():
    w1, dw1 = np.array([[1.0, 2.0], [3.0, -1.0]]), np.array([[0.5, 1.0], [1.0, 2.0]])
    b1, db1 = np.array([1.0, -2.0]), np.array([2.0, 1.0])
    w2, dw2 = np.array([[1.0, 1.0], [2.0, 0.0]]), np.array([[-3.0, 1.0], [1.0, 5.0]])
    # neuron 0: |1*.5 + 3*1 + 1*2| + |1*-3 + 1*1| = 5.5 + 2; neuron 1: |2 - 2 - 2| + |2| = 2 + 2
    np.testing.assert_allclose(ffn_neuron_scores(w1, dw1, b1, db1, w2, dw2), [7.5, 4.0])


def test_holdout_split_is_disjoint_and_seeded():
    data = {"input_ids": np.arange(20)[:, None], "label_ids": np.arange(20)}
    rest, held = holdout_split(data, 5, seed=1)
    assert len(held["label_ids"]) == 5 and len(rest["label_ids"]) == 15
    assert sorted(np.concatenate([rest["label_ids"], held["label_ids"]])) == list(range(20))
    np.testing.assert_array_equal(held["input_ids"][:, 0], held["label_ids"])
    np.testing.assert_array_equal(holdout_split(data, 5, seed=1)[1]["label_ids"], held["label_ids"])
    with pytest.raises(ValueError):
        holdout_split(data, 20)
    assert [len(b["label_ids"]) for b in feature_batches(data, 8)] == [8, 8, 4]
