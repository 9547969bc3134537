"""Rewiring (elastic/rewire.py) is function-preserving: outputs equal to <= 1e-5 after reordering
every head of both kinds and every FFN neuron (within groups)."""
import numpy as np
import pytest

import keras
from keras import ops

from elastic.importance import Importance
from elastic.rewire import block_indices, descending, ffn_order, rewire
from elastic.slicing import heads_of
from model import ConvBertConfig, ConvBertModel
from tests.model.test_checkpoints import tiny_inputs

TINY = dict(vocab_size=100, hidden_size=32, embedding_size=16, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# head_ratio 2 with SDConv (2 + 2 heads of 8); 8 heads of 4 and two FFN groups (4 + 4 heads);
# BERT (4 self-attention heads, no convolution).
CONFIGS = {
    "sdconv": dict(TINY),
    "groups2": dict(TINY, num_attention_heads=8, num_groups=2),
    "bert": dict(TINY, head_ratio=1, conv_type="none"),
    "dynamic": dict(TINY, conv_type="dynamic"),
    "lightweight": dict(TINY, conv_type="lightweight"),
}


def randomized_model(seed=0, **config):
    """A tiny ConvBertModel whose every weight (biases and LayerNorms included) is random, so a
    wrongly permuted variable of any kind changes the outputs."""
    keras.utils.set_random_seed(seed)
    model = ConvBertModel(ConvBertConfig(**config))
    rng = np.random.default_rng(seed)
    for name, variable in model.weight_map().items():
        shape = tuple(variable.shape)
        value = rng.normal(0.0, 0.3, shape)
        if name.endswith("gamma"):
            value = 1.0 + 0.2 * value
        variable.assign(value.astype("float32"))
    return model


def random_importance(config, seed=0):
    """Head scores rising with the index (so each layer's head order is reversed, never the
    identity) plus noise; random FFN scores."""
    rng = np.random.default_rng(seed)
    num_sa, num_conv = heads_of(config)
    layers = config.num_hidden_layers

    def rising(n):
        return np.arange(n)[None, :] + 0.5 * rng.random((layers, n))
    return Importance(rising(num_sa), rising(num_conv),
                      rng.random((layers, config.intermediate_size)))


def classifier(hidden_size, seed=0):
    from finetune.classification_head import ClassificationHead
    keras.utils.set_random_seed(seed)
    head = ClassificationHead(3, dropout_rate=0.0)
    head.build((None, None, hidden_size))
    return head


def test_orders_and_blocks():
    np.testing.assert_array_equal(descending([0.1, 0.5, 0.5, 0.2]), [1, 2, 3, 0])
    np.testing.assert_array_equal(block_indices([1, 0], 3), [3, 4, 5, 0, 1, 2])
    np.testing.assert_array_equal(ffn_order([1, 3, 2, 9, 0, 5], 2), [1, 2, 0, 3, 5, 4])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rewiring_preserves_the_function(name):
    model = randomized_model(**CONFIGS[name])
    head = classifier(model.config.hidden_size)
    inputs = tiny_inputs(vocab=100)
    before = ops.convert_to_numpy(model(inputs))
    logits_before = ops.convert_to_numpy(head(model(inputs)))
    weights_before = {n: ops.convert_to_numpy(v) for n, v in model.weight_map().items()}
    orders = rewire(model, random_importance(model.config))
    after = ops.convert_to_numpy(model(inputs))
    np.testing.assert_allclose(after, before, atol=1e-5, rtol=0)
    np.testing.assert_allclose(ops.convert_to_numpy(head(model(inputs))), logits_before,
                               atol=1e-5, rtol=0)
    # The permutation really moved things: some head and FFN order is not the identity, and the
    # query / FFN weights changed.
    assert any((o["sa_heads"] != np.arange(len(o["sa_heads"]))).any() for o in orders)
    assert any((o["ffn"] != np.arange(len(o["ffn"]))).any() for o in orders)
    changed = [n for n, v in model.weight_map().items()
               if not np.array_equal(ops.convert_to_numpy(v), weights_before[n])]
    assert any(n.endswith("self/query/kernel") for n in changed)
    assert any("intermediate/" in n for n in changed)
    if model.config.conv_type != "none":
        assert any((o["conv_heads"] != np.arange(len(o["conv_heads"]))).any() for o in orders)
        assert any("conv_attn_point/kernel" in n for n in changed)


def test_grouped_ffn_neurons_stay_in_their_group():
    config = ConvBertConfig(**CONFIGS["groups2"])
    orders = rewire(randomized_model(**CONFIGS["groups2"]), random_importance(config, seed=3))
    per_group = config.intermediate_size // 2
    for order in orders:
        assert sorted(order["ffn"][:per_group]) == list(range(per_group))
        assert sorted(order["ffn"][per_group:]) == list(range(per_group, 2 * per_group))


def test_most_important_units_come_first():
    """After rewiring, re-scoring in the new order is sorted: new unit i was old unit order[i]."""
    config = ConvBertConfig(**CONFIGS["sdconv"])
    importance = random_importance(config, seed=5)
    orders = rewire(randomized_model(**CONFIGS["sdconv"]), importance)
    for i, order in enumerate(orders):
        for key, scores in (("sa_heads", importance.sa_heads[i]),
                            ("conv_heads", importance.conv_heads[i]), ("ffn", importance.ffn[i])):
            reordered = scores[order[key]]
            assert (np.diff(reordered) <= 0).all()
