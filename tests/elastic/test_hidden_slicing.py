"""Hidden size as an elastic dimension (elastic/slicing.py `Subnet.for_hidden`, `HiddenChannels`;
elastic/extract.py): the rebuttal's (L, H) cells of a base-size model; the extracted h-wide
ConvBERT loads with `ConvBertModel.from_pretrained` and equals `sliced_forward` (with and without
an embedding projection, 1 and 2 FFN groups, every conv type); the kept channels are the ones
documented (the first h, or the first h/G of each group) and only they matter; gradients reach the
full variables on the kept channels only; Hugging Face export where the heads fill h; the
discriminator head cut to h. Runs on TensorFlow and JAX."""
import json
import os

import numpy as np
import pytest

import keras
from keras import ops

from elastic.extract import export, extract, subnetwork_config, subnetwork_cost, \
    subnetwork_weights
from elastic.slicing import (HiddenChannels, Subnet, layers_for_count, sliced_discriminator_head,
                             sliced_forward)
from model import ConvBertConfig, ConvBertModel, flops
from model.config import ConfigError
from tests.elastic.test_extract import transformers_output
from tests.elastic.test_rewire import randomized_model
from tests.model.test_checkpoints import tiny_inputs

ATOL = 1e-5
# hidden 64, 3 layers, 4 heads of 16 (2 self-attention + 2 convolution), FFN 128.
BASE = dict(vocab_size=100, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=32, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
CONFIGS = {
    "projection": dict(BASE, embedding_size=24),            # E -> H projection
    "no_projection": dict(BASE),                             # E == H: the tables are cut
    "groups2": dict(BASE, num_attention_heads=8, num_groups=2, embedding_size=24),  # 4 + 4 of 8
    "groups2_no_projection": dict(BASE, num_attention_heads=8, num_groups=2),
    "bert": dict(BASE, head_ratio=1, conv_type="none"),
    "dynamic": dict(BASE, conv_type="dynamic"),
    "lightweight": dict(BASE, conv_type="lightweight", embedding_size=24),
}
CELLS = [(16, 2), (32, 3), (48, 2)]     # (h, L) below the full 64 x 3


def numpy(x):
    return ops.convert_to_numpy(x)


# ------------------------------------------------------------------------------- the grid
def test_rebuttal_cells_of_a_base_model():
    """H = 128 / 256 / 512 / 768 x L = 4 / 6 of a 6-layer base model (6 + 6 heads of 64): heads
    never 0 and filling h (so Hugging Face can express every cell), FFN h/H, L = 4 keeps DynaBERT's
    layers 0, 1, 3, 4; cost falls with h and L."""
    config = ConvBertConfig.from_size("base", num_hidden_layers=6)
    assert layers_for_count(6, 4) == (0, 1, 3, 4) and layers_for_count(6, 6) == tuple(range(6))
    assert layers_for_count(6, 3) == (0, 2, 4) and layers_for_count(12, 6) == (0, 2, 4, 6, 8, 10)
    costs = {}
    for hidden, heads in ((128, 1), (256, 2), (512, 4), (768, 6)):
        for layers in (4, 6):
            subnet = Subnet.for_hidden(config, hidden, num_layers=layers)
            assert (subnet.sa_heads, subnet.conv_heads) == (heads, heads)
            assert subnet.ffn_per_group == 4 * hidden
            assert subnet.layers == ((0, 1, 3, 4) if layers == 4 else tuple(range(6)))
            assert subnet.hidden == (None if hidden == 768 else hidden)
            sub = subnetwork_config(config, subnet)
            assert (sub.hidden_size, sub.embedding_size, sub.num_hidden_layers) == \
                (hidden, hidden, layers)
            assert (sub.head_size, sub.num_self_attention_heads, sub.intermediate_size) == \
                (64, heads, 4 * hidden)
            assert sub.context_width == hidden      # what Hugging Face ConvBERT assumes
            from model import hf_convert
            assert hf_convert.config_to_hf(sub)["hidden_size"] == hidden
            costs[layers, hidden] = subnetwork_cost(config, subnet)
    assert Subnet.for_hidden(config, 768) == Subnet.full(config)
    assert costs[6, 768]["parameters"] == flops.encoder_parameters(config)
    for layers in (4, 6):
        row = [costs[layers, h] for h in (768, 512, 256, 128)]
        assert all(a["parameters"] > b["parameters"] and a["flops_per_token"] > b["flops_per_token"]
                   for a, b in zip(row, row[1:]))
    assert costs[4, 256]["flops_per_token"] < costs[6, 256]["flops_per_token"]
    # DynaBERT's depth multiplier works too; an existing (width-only) Subnet has no hidden size
    assert Subnet.for_hidden(config, 256, depth_mult=0.5).layers == (0, 2, 4)
    assert Subnet(1, 1, 8, (0,)).hidden is None and Subnet.make(config, heads=3).hidden is None


def test_bad_hidden_sizes_are_one_line_errors():
    config = ConvBertConfig(**CONFIGS["groups2"])          # head size 8, 2 groups
    bad = [dict(hidden_size=0), dict(hidden_size=12), dict(hidden_size=72),
           dict(hidden_size=True), dict(hidden_size=16.0), dict(hidden_size=16, num_layers=4),
           dict(hidden_size=16, num_layers=0), dict(hidden_size=16, num_layers=2, depth_mult=0.5)]
    for kwargs in bad:
        with pytest.raises(ConfigError) as e:
            Subnet.for_hidden(config, **kwargs)
        assert "\n" not in str(e.value), kwargs
    with pytest.raises(ConfigError, match="multiple of the head size 8 and of num_groups 2"):
        Subnet.for_hidden(config, 12)
    with pytest.raises(ConfigError, match="do not fit hidden size 16"):   # 2 heads of 8 per kind
        Subnet.make(config, heads=3, hidden=16)
    with pytest.raises(ConfigError, match="causal"):     # the sliced forward is the encoder's
        Subnet.for_hidden(ConvBertConfig(**BASE, causal=True), 32)
    # h == E in a model with an E -> H projection: the h-wide config would have no projection
    with pytest.raises(ConfigError, match="equals the embedding size") as e:
        subnetwork_config(config, Subnet.for_hidden(config, 24))
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_extracted_hidden_cells_load_and_equal_the_sliced_model(tmp_path, name):
    model = randomized_model(**CONFIGS[name])
    inputs = tiny_inputs(vocab=100)
    for hidden, layers in CELLS:
        subnet = Subnet.for_hidden(model.config, hidden, num_layers=layers)
        want = sliced_forward(model, inputs, subnet, output_hidden_states=True)
        directory = export(model, subnet, tmp_path / f"h{hidden}_l{layers}")
        loaded = ConvBertModel.from_pretrained(str(directory))
        config = loaded.config
        assert config == subnetwork_config(model.config, subnet)
        assert (config.hidden_size, config.num_hidden_layers) == (hidden, layers)
        assert config.head_size == model.config.head_size
        assert config.embedding_size == (hidden if model.embeddings_project is None else 24)
        got = loaded(inputs, output_hidden_states=True)
        assert numpy(got["sequence_output"]).shape[-1] == hidden
        assert len(got["hidden_states"]) == len(want["hidden_states"]) == layers + 1
        for a, b in zip(got["hidden_states"], want["hidden_states"]):
            np.testing.assert_allclose(numpy(a), numpy(b), atol=ATOL, rtol=0)
        np.testing.assert_allclose(numpy(got["embedding_output"]),
                                   numpy(want["embedding_output"]), atol=ATOL, rtol=0)
        assert subnetwork_cost(model.config, subnet)["parameters"] == loaded.count_params()
        assert loaded.count_params() < model.count_params()


def test_grouped_ffn_keeps_the_first_channels_of_each_group():
    """G = 2, H = 64, h = 32: the kept channels are 0..15 and 32..47, everywhere on the residual
    stream; changing a weight on a dropped channel changes nothing, on a kept one it does."""
    model = randomized_model(**CONFIGS["groups2_no_projection"])
    subnet = Subnet.for_hidden(model.config, 32, num_layers=2)
    channels = HiddenChannels.of(model.config, subnet)
    kept = np.r_[0:16, 32:48]
    np.testing.assert_array_equal(channels.indices(), kept)
    weights = subnetwork_weights(model, subnet)
    full = {name: numpy(v) for name, v in model.weight_map().items()}
    for name in ("electra/encoder/layer_1/output/LayerNorm/gamma",
                 "electra/encoder/layer_0/attention/output/dense/bias",
                 "electra/embeddings/LayerNorm/beta"):
        np.testing.assert_array_equal(weights[name], full[name][kept])
    np.testing.assert_array_equal(weights["electra/embeddings/word_embeddings"],
                                  full["electra/embeddings/word_embeddings"][:, kept])
    np.testing.assert_array_equal(   # [G, H/G, I/G]: the first 16 input rows of each group
        weights["electra/encoder/layer_0/intermediate/g_dense/kernel"],
        full["electra/encoder/layer_0/intermediate/g_dense/kernel"][:, :16, :subnet.ffn_per_group])
    np.testing.assert_array_equal(
        weights["electra/encoder/layer_0/attention/self/query/kernel"],
        full["electra/encoder/layer_0/attention/self/query/kernel"][kept][:, :16])

    inputs = tiny_inputs(vocab=100)
    reference = numpy(sliced_forward(model, inputs, subnet))
    layer = model.encoder_layers[0]

    def changed(channel):
        variables = [(layer.output_layer_norm.gamma, (channel,)),
                     (layer.attention.query.kernel, (channel, 0)),
                     (model.embeddings.word_embeddings, (slice(None), channel)),
                     (layer.intermediate.kernel, (channel // 32, channel % 32, 0))]
        saved = [numpy(v) for v, _ in variables]
        for (variable, index), value in zip(variables, saved):
            new = value.copy()
            new[index] += 1.0
            variable.assign(new)
        out = numpy(sliced_forward(model, inputs, subnet))
        for (variable, _), value in zip(variables, saved):
            variable.assign(value)
        return np.abs(out - reference).max()

    for channel in (16, 31, 48, 63):       # dropped: second halves of both groups
        assert changed(channel) == 0.0, channel
    for channel in (0, 15, 32, 47):        # kept
        assert changed(channel) > 1e-3, channel


def gradients(model, inputs, subnet, variables):
    """d(sum(sliced output * fixed weights)) / d(variables), on TensorFlow or JAX."""
    shape = tuple(numpy(sliced_forward(model, inputs, subnet)).shape)
    weights = np.random.default_rng(3).normal(size=shape).astype("float32")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss = ops.sum(sliced_forward(model, inputs, subnet, training=False) * weights)
        return [None if g is None else numpy(tf.convert_to_tensor(g))
                for g in tape.gradient(loss, variables)]
    assert backend == "jax", backend
    import jax

    def loss(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            out = sliced_forward(model, inputs, subnet, training=False)
        return ops.sum(out * weights)
    return [np.asarray(g) for g in jax.grad(loss)([v.value for v in variables])]


@pytest.mark.parametrize("name", ["projection", "groups2_no_projection"])
def test_gradients_reach_the_full_variables_on_the_kept_channels(name):
    model = randomized_model(**CONFIGS[name])
    subnet = Subnet.for_hidden(model.config, 32, num_layers=2)     # layers (0, 1) of 3
    kept = HiddenChannels.of(model.config, subnet).indices()
    dropped = np.setdiff1d(np.arange(64), kept)
    layer = model.encoder_layers[0]
    variables = [layer.output_layer_norm.gamma, layer.attention.query.kernel,
                 layer.attention_output.kernel, model.encoder_layers[2].output_layer_norm.gamma]
    variables.append(model.embeddings_project.kernel if model.embeddings_project is not None
                     else model.embeddings.word_embeddings)
    gamma, query, output, unused, embedding = gradients(model, tiny_inputs(vocab=100), subnet,
                                                        variables)
    assert np.all(gamma[kept] != 0) and np.all(gamma[dropped] == 0)
    assert np.abs(query[kept]).sum() > 0 and np.all(query[dropped] == 0)
    assert np.all(query[:, 16:] == 0)                # the one kept self-attention head: 16 wide
    assert np.abs(output[:, kept]).sum() > 0 and np.all(output[:, dropped] == 0)
    assert unused is None or np.all(unused == 0)     # layer 2 is not in the sub-network
    assert np.abs(embedding[:, kept]).sum() > 0 and np.all(embedding[:, dropped] == 0)


# ------------------------------------------------------------------------------- Hugging Face
def test_hidden_cells_round_trip_through_hugging_face(tmp_path):
    """h = 32 of 64 keeps 1 + 1 heads of 16, which fill it: Hugging Face ConvBERT expresses it
    (G = 1 and G = 2); h = 48 keeps 2 + 2 heads (64 channels of context for 48): refused."""
    inputs = tiny_inputs(vocab=100)
    for name in ("projection", "groups2"):
        model = randomized_model(**CONFIGS[name])
        subnet = Subnet.for_hidden(model.config, 32, num_layers=2)
        directory = tmp_path / f"hf_{name}"
        export(model, subnet, directory, format="hf")
        hf_config = json.loads((directory / "config.json").read_text())
        assert hf_config["model_type"] == "convbert" and hf_config["hidden_size"] == 32
        loaded = ConvBertModel.from_pretrained(str(directory))
        assert loaded.load_report["format"] == "hf"
        reference = numpy(sliced_forward(model, inputs, subnet))
        np.testing.assert_allclose(numpy(loaded(inputs)), reference, atol=ATOL, rtol=0)
    model = randomized_model(**CONFIGS["projection"])
    with pytest.raises(ConfigError, match="Hugging Face") as e:
        export(model, Subnet.for_hidden(model.config, 48), tmp_path / "hf48", format="hf")
    assert "\n" not in str(e.value) and "format='keras'" in str(e.value)
    assert not os.path.exists(tmp_path / "hf48")
    # ... and transformers reads the grouped one (PyTorch vs this backend's arithmetic: 2e-5)
    np.testing.assert_allclose(transformers_output(directory, inputs), reference, atol=2e-5,
                               rtol=0)


# ------------------------------------------------------------------------------- RTD head
def test_discriminator_head_is_cut_to_the_hidden_size():
    """The sliced ELECTRA head on an h-wide cell equals an h-wide DiscriminatorHead holding the
    kept rows / columns; with the full hidden size it is the head itself."""
    from model.heads import DiscriminatorHead
    model = randomized_model(**CONFIGS["groups2"])
    keras.utils.set_random_seed(1)
    head = DiscriminatorHead(64, name="discriminator_predictions")
    head.build((None, None, 64))
    rng = np.random.default_rng(1)
    for variable in head.weights:
        variable.assign(rng.normal(0, 0.3, tuple(variable.shape)).astype("float32"))
    inputs = tiny_inputs(vocab=100)
    subnet = Subnet.for_hidden(model.config, 32, num_layers=2)
    kept = HiddenChannels.of(model.config, subnet).indices()
    hidden = sliced_forward(model, inputs, subnet)
    small = DiscriminatorHead(32)
    small.build((None, None, 32))
    small.dense.kernel.assign(numpy(head.dense.kernel)[kept][:, kept])
    small.dense.bias.assign(numpy(head.dense.bias)[kept])
    small.dense_prediction.kernel.assign(numpy(head.dense_prediction.kernel)[kept])
    small.dense_prediction.bias.assign(numpy(head.dense_prediction.bias))
    got = numpy(sliced_discriminator_head(head, hidden, subnet, model.config))
    assert got.shape == tuple(inputs["input_ids"].shape)
    np.testing.assert_allclose(got, numpy(small(hidden)), atol=ATOL, rtol=0)
    full = Subnet.full(model.config)
    out = sliced_forward(model, inputs, full)
    np.testing.assert_array_equal(numpy(sliced_discriminator_head(head, out, full, model.config)),
                                  numpy(head(out)))
    assert extract(model, subnet).config.hidden_size == 32
