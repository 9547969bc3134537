"""Checkpoint formats: Hugging Face safetensors, official TF1, native; round trips and bad input."""
import json
import os

import numpy as np
import pytest

from model import ConvBertConfig, ConvBertMaskedLM, ConvBertModel
from model.checkpoints import CheckpointError, infer_config_from_tf1, read_tf1_checkpoint
from model.config import ConfigError
from tests.conftest import tensorflow_pass_only
from tests.model.conftest import model_inputs, reference_outputs

TINY = dict(vocab_size=300, hidden_size=64, embedding_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)


def tiny_inputs(batch=2, seq=12, vocab=300, seed=0):
    rng = np.random.RandomState(seed)
    mask = np.ones((batch, seq), "int32")
    mask[1, seq // 2:] = 0
    return {"input_ids": rng.randint(0, vocab, (batch, seq)).astype("int32") * mask,
            "input_mask": mask,
            "segment_ids": (np.arange(seq)[None, :] >= seq // 3).astype("int32").repeat(batch, 0)}


@tensorflow_pass_only     # file formats, checked by transformers: backend-independent
def test_hf_to_ours_to_hf_loads_in_transformers(hf_reference, tmp_path):
    import torch
    import transformers
    ref_dir = hf_reference("small")
    ours = ConvBertMaskedLM.from_pretrained(ref_dir)
    ours.save_pretrained(tmp_path / "hf", format="hf")
    theirs = transformers.ConvBertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    inp = np.load(ref_dir / "inputs.npz")
    with torch.no_grad():
        logits = theirs(input_ids=torch.from_numpy(inp["input_ids"]),
                        attention_mask=torch.from_numpy(inp["attention_mask"]),
                        token_type_ids=torch.from_numpy(inp["token_type_ids"])).logits.numpy()
    assert np.max(np.abs(logits - reference_outputs(ref_dir)["mlm.logits"])) <= 1e-5
    # The bare encoder too, and its export loads into transformers.ConvBertModel.
    encoder = ConvBertModel.from_pretrained(ref_dir)
    encoder.save_pretrained(tmp_path / "hf_bare", format="hf")
    bare = transformers.ConvBertModel.from_pretrained(tmp_path / "hf_bare").eval()
    with torch.no_grad():
        hidden = bare(input_ids=torch.from_numpy(inp["input_ids"]),
                      attention_mask=torch.from_numpy(inp["attention_mask"]),
                      token_type_ids=torch.from_numpy(inp["token_type_ids"])).last_hidden_state
    ours_hidden = np.asarray(encoder(model_inputs(ref_dir)))
    assert np.max(np.abs(hidden.numpy() - ours_hidden)) <= 1e-5


def test_grouped_hf_round_trip(hf_reference, tmp_path):
    ref_dir = hf_reference("medium-small")
    model = ConvBertModel.from_pretrained(ref_dir)
    model.save_pretrained(tmp_path, format="hf")
    again = ConvBertModel.from_pretrained(tmp_path)
    x = model_inputs(ref_dir)
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(again(x)))


@pytest.mark.parametrize("conv_type,groups", [("sdconv", 1), ("sdconv", 2), ("dynamic", 1),
                                              ("lightweight", 2), ("none", 1)])
def test_ours_to_tf1_to_ours_is_exact(tmp_path, conv_type, groups):
    config = ConvBertConfig(**TINY, conv_type=conv_type, num_groups=groups)
    model = ConvBertModel(config)
    prefix = model.save_pretrained(tmp_path, format="tf1")
    assert os.path.exists(prefix + ".index") and os.path.exists(tmp_path / "checkpoint")
    names = read_tf1_checkpoint(str(tmp_path))
    assert set(names) == set(model.weight_map())
    if conv_type in ("sdconv", "lightweight"):  # else the head count is ambiguous: saved config decides
        assert infer_config_from_tf1(names) == config
    again = ConvBertModel.from_pretrained(tmp_path)
    x = tiny_inputs()
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(again(x)))


def test_native_round_trip_is_exact(tmp_path):
    model = ConvBertMaskedLM(ConvBertConfig(**TINY))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "convbert_config.json").read_text())["hidden_size"] == 64
    again = ConvBertMaskedLM.from_pretrained(tmp_path)
    x = tiny_inputs()
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(again(x)))
    # A masked-LM checkpoint loads into a bare encoder; its head weights are reported as ignored.
    encoder = ConvBertModel.from_pretrained(tmp_path)
    assert any(n.startswith("generator_predictions/") for n in encoder.load_report["unexpected"])


@tensorflow_pass_only     # shapes only (base: 6 s on TensorFlow, 10 s on JAX)
@pytest.mark.parametrize("size", ["small", "medium-small", "base"])
def test_official_sizes_are_inferred_from_tf1_shapes(tmp_path, size):
    config = ConvBertConfig.from_size(size)
    model = ConvBertModel(config)
    model.save_pretrained(tmp_path, format="tf1")
    assert infer_config_from_tf1(read_tf1_checkpoint(str(tmp_path))) == config


def test_checkpoint_of_another_size_is_refused(tmp_path):
    ConvBertModel(ConvBertConfig(**TINY)).save_pretrained(tmp_path, format="tf1")
    os.remove(tmp_path / "convbert_config.json")  # like an official release: shapes only
    with pytest.raises(CheckpointError, match="does not match the model"):
        ConvBertModel.from_pretrained(tmp_path, config=ConvBertConfig(**{**TINY, "hidden_size": 32}))
    with pytest.raises(CheckpointError, match="missing weight"):
        ConvBertModel.from_pretrained(tmp_path, config=ConvBertConfig(**{**TINY, "num_hidden_layers": 3}))
    with pytest.raises(CheckpointError, match="unexpected encoder weight"):
        ConvBertModel.from_pretrained(tmp_path, config=ConvBertConfig(**{**TINY, "num_hidden_layers": 1}))


def test_directory_that_is_not_a_convbert(tmp_path):
    with pytest.raises(CheckpointError, match="not a ConvBERT checkpoint"):
        ConvBertModel.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(CheckpointError, match="not 'convbert'"):
        ConvBertModel.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="no such file"):
        ConvBertModel.from_pretrained(tmp_path / "missing")


def test_pickle_checkpoints_are_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(CheckpointError, match="pickle"):
        ConvBertModel.from_pretrained(tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "convbert"}))
    with pytest.raises(CheckpointError, match="pickle"):
        ConvBertModel.from_pretrained(tmp_path)


def test_configs_hf_cannot_express_are_refused_for_hf_export(tmp_path):
    for bad in (dict(conv_type="lightweight"), dict(head_ratio=1)):
        with pytest.raises(ConfigError):
            ConvBertModel(ConvBertConfig(**TINY, **bad)).save_pretrained(tmp_path, format="hf")
    with pytest.raises(ValueError, match="unknown checkpoint format"):
        ConvBertModel(ConvBertConfig(**TINY)).save_pretrained(tmp_path, format="onnx")
