"""ConvBertModel / config: parameter counts, variants, dropout, serialisation, validation."""
import numpy as np
import pytest

import keras
from model import ConvBertConfig, ConvBertMaskedLM, ConvBertModel
from model.config import ConfigError
from tests.conftest import shapes_only, tensorflow_pass_only
from tests.model.test_checkpoints import TINY, tiny_inputs

# Encoder parameters without heads (counted with Hugging Face, reference huggingface-convbert.md §5).
PARAMETER_COUNTS = [
    (dict(size="small"), 13_143_768),
    (dict(size="medium-small"), 17_475_888),
    (dict(size="base"), 105_680_520),
    (dict(size="small", head_ratio=1, conv_type="none"), 13_483_008),  # ELECTRA-small
    (dict(size="base", head_ratio=1, conv_type="none"), 108_891_648),  # BERT-base w/o pooler
    (dict(size="small", conv_type="none"), 11_905_536),  # bottleneck only (+BNK)
    (dict(size="medium-small", conv_type="none"), 14_692_224),
    (dict(size="base", conv_type="none"), 94_722_048),
]


@tensorflow_pass_only     # backend-independent (the variables' shapes)
@pytest.mark.parametrize("spec,expected", PARAMETER_COUNTS)
def test_parameter_counts(spec, expected):
    spec = dict(spec)
    config = ConvBertConfig.from_size(spec.pop("size"), **spec)
    assert shapes_only(lambda: ConvBertModel(config)).count_params() == expected


@pytest.mark.parametrize("conv_type", ["sdconv", "dynamic", "lightweight", "none"])
def test_conv_types_run_and_expose_internals(conv_type):
    config = ConvBertConfig(**TINY, conv_type=conv_type)
    model = ConvBertModel(config)
    out = model(tiny_inputs(), output_hidden_states=True, output_attentions=True)
    assert out["sequence_output"].shape == (2, 12, 64)
    assert len(out["hidden_states"]) == config.num_hidden_layers + 1
    assert out["attention_probs"][0].shape == (2, config.num_self_attention_heads, 12, 12)
    probs = np.asarray(out["attention_probs"][0])
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert probs[1, :, :, 6:].max() < 1e-6  # padded keys get no attention


def test_bottleneck_free_none_variant_is_exactly_electra(tmp_path):
    """head_ratio=1, conv_type='none' must equal transformers' ElectraModel with the same weights."""
    import torch
    import transformers
    from model.hf_convert import tf1_to_hf_array, tf1_to_hf_name
    config = ConvBertConfig(**TINY, head_ratio=1, conv_type="none")
    ours = ConvBertModel(config)
    state = {tf1_to_hf_name(n): torch.from_numpy(np.array(tf1_to_hf_array(n, np.asarray(v))))
             for n, v in ours.weight_map().items()}
    electra = transformers.ElectraModel(transformers.ElectraConfig(
        vocab_size=300, embedding_size=32, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
        layer_norm_eps=1e-12)).eval()
    missing, unexpected = electra.load_state_dict(state, strict=False)
    assert not [m for m in missing if "position_ids" not in m and "token_type_ids" not in m]
    assert not unexpected
    x = tiny_inputs()
    with torch.no_grad():
        theirs = electra(input_ids=torch.from_numpy(x["input_ids"]).long(),
                         attention_mask=torch.from_numpy(x["input_mask"]).long(),
                         token_type_ids=torch.from_numpy(x["segment_ids"]).long()).last_hidden_state
    assert np.max(np.abs(theirs.numpy() - np.asarray(ours(x)))) < 1e-5


def test_convolution_only_ablation(tmp_path):
    """use_self_attention=False: only convolution heads (the query feeds the kernel generator)."""
    config = ConvBertConfig(**TINY, head_ratio=1, use_self_attention=False)
    model = ConvBertModel(config)
    names = model.weight_map()
    assert not any("/self/key/" in n or "/self/value/" in n for n in names)
    assert tuple(names["electra/encoder/layer_0/attention/output/dense/kernel"].shape) == (64, 64)
    out = model(tiny_inputs(), output_attentions=True)
    assert out["sequence_output"].shape == (2, 12, 64) and out["attention_probs"] == []
    model.save_pretrained(tmp_path, format="tf1")
    (tmp_path / "convbert_config.json").unlink()  # the shapes alone say it has no self-attention
    again = ConvBertModel.from_pretrained(tmp_path)
    assert again.config == config
    np.testing.assert_array_equal(np.asarray(again(tiny_inputs())), np.asarray(model(tiny_inputs())))
    shipped = ConvBertConfig.from_name("ablation_small_conv_only")
    assert not shipped.use_self_attention and shipped.context_width == shipped.hidden_size
    with pytest.raises(ConfigError, match="needs a convolution"):
        ConvBertConfig(**TINY, use_self_attention=False, conv_type="none")


def test_dropout_only_when_training():
    model = ConvBertModel(ConvBertConfig(**TINY))
    x = tiny_inputs()
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(model(x, training=False)))
    a, b = np.asarray(model(x, training=True)), np.asarray(model(x, training=True))
    assert not np.allclose(a, b)
    assert not np.allclose(a, np.asarray(model(x)))


def test_get_config_round_trip_and_keras_save_load(tmp_path):
    model = ConvBertMaskedLM(ConvBertConfig(**TINY, num_groups=2))
    clone = ConvBertMaskedLM.from_config(model.get_config())
    assert clone.config == model.config
    encoder = ConvBertModel.from_config(model.convbert.get_config())
    assert encoder.config == model.config
    x = tiny_inputs()
    expected = np.asarray(model(x))
    model.save(tmp_path / "mlm.keras")
    loaded = keras.models.load_model(tmp_path / "mlm.keras")
    np.testing.assert_allclose(np.asarray(loaded(x)), expected, atol=1e-6)
    model.save_weights(tmp_path / "mlm.weights.h5")
    clone.load_weights(tmp_path / "mlm.weights.h5")
    np.testing.assert_allclose(np.asarray(clone(x)), expected, atol=1e-6)


def test_config_json_round_trip_and_sizes(tmp_path):
    config = ConvBertConfig.from_size("medium_small", conv_kernel_size=7)
    path = str(tmp_path / "c.json")
    config.to_json(path)
    assert ConvBertConfig.from_json(path) == config
    assert ConvBertConfig.from_json(config.to_json()) == config
    assert (config.num_self_attention_heads, config.head_size, config.num_groups) == (4, 48, 2)


@pytest.mark.parametrize("changes,message", [
    (dict(hidden_size=100, num_attention_heads=3), "not divisible by num_attention_heads"),
    (dict(conv_type="fancy"), "unknown conv_type"),
    (dict(conv_kernel_size=8), "must be odd"),
    (dict(num_groups=3), "num_groups 3 must divide"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
    (dict(hidden_act="swishy"), "unknown hidden_act"),
    (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
])
def test_bad_configs_give_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as err:
        ConvBertConfig(**{**TINY, **changes})
    assert "\n" not in str(err.value)


def test_bad_config_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 64,\n "oops": }')
    with pytest.raises(ConfigError, match=r"bad.json: invalid JSON at line 2"):
        ConvBertConfig.from_json(str(bad))
    bad.write_text('{"hidden_sise": 64}')
    with pytest.raises(ConfigError, match="unknown ConvBertConfig field"):
        ConvBertConfig.from_json(str(bad))
    with pytest.raises(ConfigError, match="unknown model size"):
        ConvBertConfig.from_size("large")


def test_official_small_generator_shape():
    """heads < head_ratio falls back to 1 attention + 1 conv head: a 128-wide context at H=64."""
    gen = ConvBertModel(ConvBertConfig(hidden_size=64, embedding_size=128, num_attention_heads=1,
                                       intermediate_size=256, num_hidden_layers=1))
    assert tuple(gen.weight_map()["electra/encoder/layer_0/attention/output/dense/kernel"].shape) \
        == (128, 64)
