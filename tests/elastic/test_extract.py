"""Sub-networks: the layer-keeping rule and head table (elastic/slicing.py), extraction into a
smaller dense ConvBERT that loads with the normal loader and equals the sliced elastic model
(elastic/extract.py), Hugging Face export of depth-only sub-networks, parameters and FLOPs."""
import json
import os

import numpy as np
import pytest

from keras import ops

from elastic.extract import export, extract, subnetwork_config, subnetwork_cost
from elastic.rewire import rewire
from elastic.slicing import (DEPTH_MULTS, HEAD_COUNTS, WIDTH_MULTS, Subnet, head_count,
                             kept_layers, round_half_up, sliced_forward)
from model import ConvBertConfig, ConvBertModel, flops
from model.config import ConfigError
from tests.elastic.test_rewire import CONFIGS, random_importance, randomized_model
from tests.model.test_checkpoints import tiny_inputs

FOUR_LAYERS = {name: dict(config, num_hidden_layers=4) for name, config in CONFIGS.items()}
ATOL = 1e-5


def transformers_output(directory, inputs):
    """The last hidden state of transformers' ConvBertModel loaded from the HF export in
    `directory`, on our `inputs` (skips where torch / transformers are not installed)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_model = transformers.ConvBertModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor(inputs["input_ids"]).long(),
                        attention_mask=torch.tensor(inputs["input_mask"]).long(),
                        token_type_ids=torch.tensor(inputs["segment_ids"]).long()
                        ).last_hidden_state.numpy()


def outputs(model, inputs):
    return ops.convert_to_numpy(model(inputs))


def sliced(model, inputs, subnet):
    return ops.convert_to_numpy(sliced_forward(model, inputs, subnet))


# ------------------------------------------------------------------------------- rules, table
def test_dynabert_layer_rule():
    assert kept_layers(12, 1.0) == tuple(range(12))
    assert kept_layers(12, 0.5) == (0, 2, 4, 6, 8, 10)
    assert kept_layers(12, 0.75) == (0, 1, 2, 4, 5, 6, 8, 9, 10)
    assert kept_layers(4, 0.5) == (0, 2) and kept_layers(4, 0.75) == (0, 1, 2)
    assert kept_layers(1, 0.5) == (0,)
    with pytest.raises(ConfigError):
        kept_layers(12, 0.0)


def test_head_table_never_rounds_to_zero():
    for size, heads in (("small", 2), ("medium-small", 4), ("base", 6)):
        config = ConvBertConfig.from_size(size)
        assert config.num_self_attention_heads == heads
        for mult in WIDTH_MULTS:
            count = HEAD_COUNTS[heads][mult]
            assert 1 <= count <= heads and count == head_count(heads, mult)
            assert count == min(heads, max(1, round_half_up(heads * mult)))
            subnet = Subnet.for_width(config, mult, 0.5)
            assert (subnet.sa_heads, subnet.conv_heads) == (count, count)
            assert subnet.ffn_per_group * config.num_groups == int(config.intermediate_size * mult)
    assert [HEAD_COUNTS[2][m] for m in WIDTH_MULTS] == [2, 2, 1, 1]      # small: never 0 heads
    assert head_count(3, 0.25) == 1 and head_count(8, 0.75) == 6


def test_bad_subnetworks_are_refused():
    config = ConvBertConfig(**CONFIGS["sdconv"])
    for bad in (dict(heads=0), dict(heads=3), dict(ffn_fraction=0.0), dict(depth_mult=1.5)):
        with pytest.raises(ConfigError):
            Subnet.make(config, **bad)
    with pytest.raises(ConfigError, match="one head count"):
        subnetwork_config(config, Subnet.make(config, sa_heads=1, conv_heads=2))
    with pytest.raises(ConfigError, match="convolution-only"):
        Subnet.full(ConvBertConfig(**CONFIGS["sdconv"], use_self_attention=False))


# ------------------------------------------------------------------------------- slicing
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_full_width_slicing_is_the_model(name):
    model = randomized_model(**CONFIGS[name])
    inputs = tiny_inputs(vocab=100)
    out = sliced_forward(model, inputs, Subnet.full(model.config), output_hidden_states=True)
    ref = model(inputs, output_hidden_states=True)
    for got, want in zip(out["hidden_states"], ref["hidden_states"]):
        np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want),
                                   atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------- extraction
CASES = [  # (config, subnet arguments, expected head fields of the extracted config)
    ("sdconv", dict(heads=1, ffn_fraction=0.5, depth_mult=0.5), dict(head_ratio=4)),
    ("groups2", dict(heads=3, ffn_fraction=0.75, depth_mult=0.75),
     dict(head_ratio=2, num_heads_per_kind=3)),                       # 8 heads / 3: explicit N
    ("groups2", dict(heads=2, ffn_fraction=0.25), dict(head_ratio=4)),
    ("bert", dict(heads=1, ffn_fraction=0.5, depth_mult=0.75), dict(head_ratio=4)),
    ("dynamic", dict(heads=1, depth_mult=0.5), dict(head_ratio=4)),
    ("lightweight", dict(heads=1, ffn_fraction=0.25), dict(head_ratio=4)),
]


@pytest.mark.parametrize("name,spec,fields", CASES)
def test_extracted_subnetwork_loads_and_equals_the_sliced_model(tmp_path, name, spec, fields):
    model = randomized_model(**FOUR_LAYERS[name])
    rewire(model, random_importance(model.config))
    subnet = Subnet.make(model.config, **spec)
    inputs = tiny_inputs(vocab=100)
    reference = sliced(model, inputs, subnet)
    path = export(model, subnet, tmp_path / "sub")
    loaded = ConvBertModel.from_pretrained(str(path))
    config = loaded.config
    assert config == subnetwork_config(model.config, subnet)
    assert {k: getattr(config, k) for k in fields} == fields
    assert config.num_hidden_layers == len(subnet.layers)
    assert config.intermediate_size == subnet.ffn_per_group * config.num_groups
    assert (config.hidden_size, config.num_attention_heads) == (32, model.config.num_attention_heads)
    assert loaded.count_params() < model.count_params()
    np.testing.assert_allclose(outputs(loaded, inputs), reference, atol=ATOL, rtol=0)
    assert subnetwork_cost(model.config, subnet)["parameters"] == loaded.count_params()


def test_every_grid_cell_extracts_exactly():
    """The 4 x 3 (width, depth) grid of a 4-layer SDConv model with grouped FFN, in memory."""
    model = randomized_model(**FOUR_LAYERS["groups2"])
    rewire(model, random_importance(model.config, seed=1))
    inputs = tiny_inputs(vocab=100)
    costs = {}
    for width in WIDTH_MULTS:
        for depth in DEPTH_MULTS:
            subnet = Subnet.for_width(model.config, width, depth)
            small = extract(model, subnet)
            np.testing.assert_allclose(outputs(small, inputs), sliced(model, inputs, subnet),
                                       atol=ATOL, rtol=0)
            costs[width, depth] = subnetwork_cost(model.config, subnet, seq_len=12)
    full = costs[1.0, 1.0]
    assert full["parameters"] == flops.encoder_parameters(model.config) == model.count_params()
    assert full["flops_per_token"] == flops.forward_flops_per_token(model.config, 12, head=None)
    for depth in DEPTH_MULTS:   # smaller width, fewer parameters and FLOPs
        row = [costs[w, depth] for w in WIDTH_MULTS]
        assert all(a["parameters"] > b["parameters"] for a, b in zip(row, row[1:]))
        assert all(a["flops_per_token"] > b["flops_per_token"] for a, b in zip(row, row[1:]))


def test_explicit_head_count_round_trips_and_is_validated(tmp_path):
    config = ConvBertConfig(**CONFIGS["groups2"], num_heads_per_kind=3)
    assert (config.num_self_attention_heads, config.num_conv_heads, config.context_width) == \
        (3, 3, 24)
    assert ConvBertConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["num_heads_per_kind"] == 3
    model = ConvBertModel(config)
    assert ConvBertModel.from_config(model.get_config()).config == config
    assert ConvBertConfig(**CONFIGS["groups2"]).num_heads_per_kind is None
    for bad in (0, 9, True, 1.5):
        with pytest.raises(ConfigError, match="num_heads_per_kind") as e:
            ConvBertConfig(**CONFIGS["groups2"], num_heads_per_kind=bad)
        assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------- Hugging Face
def test_depth_only_subnetwork_round_trips_through_hugging_face(tmp_path):
    model = randomized_model(**FOUR_LAYERS["sdconv"])
    inputs = tiny_inputs(vocab=100)
    for spec in (dict(depth_mult=0.5), dict(ffn_fraction=0.5, depth_mult=0.75)):
        subnet = Subnet.make(model.config, **spec)
        directory = tmp_path / f"hf_{len(subnet.layers)}"
        export(model, subnet, directory, format="hf")
        hf_config = json.loads((directory / "config.json").read_text())
        assert hf_config["model_type"] == "convbert"
        assert hf_config["num_hidden_layers"] == len(subnet.layers)
        loaded = ConvBertModel.from_pretrained(str(directory))
        assert loaded.load_report["format"] == "hf"
        np.testing.assert_allclose(outputs(loaded, inputs), sliced(model, inputs, subnet),
                                   atol=ATOL, rtol=0)
    # ... and transformers reads the last one (PyTorch vs TensorFlow arithmetic: 2e-5).
    np.testing.assert_allclose(transformers_output(directory, inputs),
                               sliced(model, inputs, subnet), atol=2e-5, rtol=0)


def test_fewer_heads_cannot_be_exported_to_hugging_face(tmp_path):
    model = randomized_model(**CONFIGS["sdconv"])
    directory = tmp_path / "hf"
    with pytest.raises(ConfigError, match="Hugging Face") as e:
        export(model, Subnet.make(model.config, heads=1), directory, format="hf")
    assert "\n" not in str(e.value) and "format='keras'" in str(e.value)
    assert not os.path.exists(directory)


def test_layering():
    """elastic/'s model-level modules (importance, rewiring, slicing, extraction) build on model/
    only; its training, runner and grid (train.py, run.py, grid.py) add the training core, GLUE
    fine-tuning and the tokenizer, never pre-training or the reproduction; elastic pre-training
    (pretrain.py) adds pre-training, the training core and data; nothing reproduces; model/ never
    imports elastic/ (docs/ARCHITECTURE.md)."""
    from tests.test_architecture import imported_modules, imports_of, python_files
    assert imports_of("model", {"elastic"}) == []
    runners = {"train.py", "run.py", "grid.py"}
    pretraining = {"pretrain.py"}
    bad = []
    for path in python_files("elastic"):
        forbidden = {"reproduce"}
        if path.name in pretraining:
            forbidden |= {"finetune", "analysis"}
        else:
            forbidden |= {"pretrain"} | (
                set() if path.name in runners else {"training", "finetune", "data", "analysis"})
        bad += [f"{path.name} imports {m}" for m in imported_modules(path)
                if m.split(".")[0] in forbidden]
    assert bad == []
