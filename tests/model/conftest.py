"""Fixtures for model tests: Hugging Face reference outputs made by ../shared/tools/hf_reference.py."""
import numpy as np
import pytest

from tests.conftest import hf_reference_dir

# A non-official config that exercises kernel size 7 and three FFN groups.
K7_G3_CONFIG = {"vocab_size": 1000, "hidden_size": 96, "embedding_size": 48,
                "num_attention_heads": 4, "head_ratio": 2, "intermediate_size": 192,
                "num_hidden_layers": 3, "num_groups": 3, "conv_kernel_size": 7,
                "max_position_embeddings": 64}


@pytest.fixture(scope="session")
def hf_reference(tmp_path_factory):
    """hf_reference(name) -> directory with config.json, model.safetensors, inputs/outputs.npz."""
    def make(name, heads="mlm", seed=0):
        config = K7_G3_CONFIG if name == "k7_g3" else name
        return hf_reference_dir(config, tmp_path_factory.getbasetemp(), heads=heads, seed=seed)

    return make


def model_inputs(ref_dir):
    inp = np.load(ref_dir / "inputs.npz")
    return {"input_ids": inp["input_ids"].astype("int32"),
            "input_mask": inp["attention_mask"].astype("int32"),
            "segment_ids": inp["token_type_ids"].astype("int32")}


def reference_outputs(ref_dir):
    return dict(np.load(ref_dir / "outputs.npz"))
