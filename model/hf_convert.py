"""Hugging Face ConvBERT <-> official TF1 names and layouts.

Hugging Face (`transformers.ConvBertModel`, PyTorch layout) and the official TF1 release name the
same weights differently; our Keras layers use the TF1 layout (Dense kernels [in, out], SeparableConv1D
depthwise [K, H, 1] / pointwise [1, H, A], grouped kernels [G, in/G, out/G]). This module maps one
weight name and array to the other (reference: huggingface-convbert.md §3.5, convbert-reference.md §8).
"""
import re

import numpy as np

from model.config import ConvBertConfig, ConfigError

# HF config fields that are ours under the same name.
_SHARED_CONFIG_FIELDS = ("vocab_size", "hidden_size", "embedding_size", "num_hidden_layers",
                         "num_attention_heads", "head_ratio", "conv_kernel_size", "num_groups",
                         "intermediate_size", "hidden_act", "hidden_dropout_prob",
                         "attention_probs_dropout_prob", "max_position_embeddings",
                         "type_vocab_size", "initializer_range", "layer_norm_eps")

# transformers' ConvBertConfig defaults, for config.json files that leave fields out.
_HF_DEFAULTS = dict(vocab_size=30522, hidden_size=768, embedding_size=768, num_hidden_layers=12,
                    num_attention_heads=12, head_ratio=2, conv_kernel_size=9, num_groups=1,
                    intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1, max_position_embeddings=512,
                    type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12)

_LAYER_RULES = [  # (TF1 suffix under encoder/layer_i/, HF suffix under encoder.layer.i.)
    (r"attention/self/(query|key|value)/kernel", r"attention.self.\1.weight"),
    (r"attention/self/(query|key|value)/bias", r"attention.self.\1.bias"),
    (r"attention/self/conv_attn_key/depthwise_kernel", "attention.self.key_conv_attn_layer.depthwise.weight"),
    (r"attention/self/conv_attn_key/pointwise_kernel", "attention.self.key_conv_attn_layer.pointwise.weight"),
    (r"attention/self/conv_attn_key/bias", "attention.self.key_conv_attn_layer.bias"),
    (r"attention/self/conv_attn_kernel/kernel", "attention.self.conv_kernel_layer.weight"),
    (r"attention/self/conv_attn_kernel/bias", "attention.self.conv_kernel_layer.bias"),
    (r"attention/self/conv_attn_point/kernel", "attention.self.conv_out_layer.weight"),
    (r"attention/self/conv_attn_point/bias", "attention.self.conv_out_layer.bias"),
    (r"attention/output/dense/kernel", "attention.output.dense.weight"),
    (r"attention/output/dense/bias", "attention.output.dense.bias"),
    (r"attention/output/LayerNorm/gamma", "attention.output.LayerNorm.weight"),
    (r"attention/output/LayerNorm/beta", "attention.output.LayerNorm.bias"),
    (r"(intermediate|output)/dense/kernel", r"\1.dense.weight"),
    (r"(intermediate|output)/g_dense/kernel", r"\1.dense.weight"),
    (r"(intermediate|output)/(?:g_)?dense/bias", r"\1.dense.bias"),
    (r"output/LayerNorm/gamma", "output.LayerNorm.weight"),
    (r"output/LayerNorm/beta", "output.LayerNorm.bias"),
]
_TOP_RULES = [  # names outside the encoder stack, relative to the scope
    ("embeddings/word_embeddings", "embeddings.word_embeddings.weight"),
    ("embeddings/position_embeddings", "embeddings.position_embeddings.weight"),
    ("embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight"),
    ("embeddings/LayerNorm/gamma", "embeddings.LayerNorm.weight"),
    ("embeddings/LayerNorm/beta", "embeddings.LayerNorm.bias"),
    ("embeddings_project/kernel", "embeddings_project.weight"),
    ("embeddings_project/bias", "embeddings_project.bias"),
]
_HEAD_RULES = [  # pre-training heads (absolute TF1 names) -> HF head names (no "convbert." prefix)
    ("generator_predictions/dense/kernel", "generator_predictions.dense.weight"),
    ("generator_predictions/dense/bias", "generator_predictions.dense.bias"),
    ("generator_predictions/LayerNorm/gamma", "generator_predictions.LayerNorm.weight"),
    ("generator_predictions/LayerNorm/beta", "generator_predictions.LayerNorm.bias"),
    ("generator_predictions/output_bias", "generator_lm_head.bias"),
    # HF ConvBERT has no discriminator head; ELECTRA's HF names are used so nothing is lost.
    ("discriminator_predictions/dense/kernel", "discriminator_predictions.dense.weight"),
    ("discriminator_predictions/dense/bias", "discriminator_predictions.dense.bias"),
    ("discriminator_predictions/dense_1/kernel", "discriminator_predictions.dense_prediction.weight"),
    ("discriminator_predictions/dense_1/bias", "discriminator_predictions.dense_prediction.bias"),
]


def tf1_to_hf_name(name, scope="electra", backbone_prefix=""):
    """Official TF1 name -> HF state-dict key (None if HF has no such weight)."""
    for tf1, hf in _HEAD_RULES:
        if name == tf1:
            return hf
    if not name.startswith(scope + "/"):
        return None
    rel = name[len(scope) + 1:]
    for tf1, hf in _TOP_RULES:
        if rel == tf1:
            return backbone_prefix + hf
    m = re.fullmatch(r"encoder/layer_(\d+)/(.+)", rel)
    if m:
        for pattern, repl in _LAYER_RULES:
            if re.fullmatch(pattern, m.group(2)):
                return f"{backbone_prefix}encoder.layer.{m.group(1)}." + re.sub(
                    pattern, repl, m.group(2))
    return None


def tf1_to_hf_array(name, array):
    """Array in TF1 / Keras layout -> PyTorch layout, for the weight `name` (a TF1 name)."""
    if name.endswith("conv_attn_key/depthwise_kernel"):  # [K, H, 1] -> [H, 1, K]
        return np.transpose(array, (1, 2, 0))
    if name.endswith("conv_attn_key/pointwise_kernel"):  # [1, H, A] -> [A, H, 1]
        return np.transpose(array, (2, 1, 0))
    if name.endswith("conv_attn_key/bias"):  # [A] -> [A, 1]
        return array[:, None]
    if name.endswith("/kernel") and "/g_dense/" not in name:  # Dense [in, out] -> Linear [out, in]
        return np.ascontiguousarray(array.T)
    return array  # embeddings, LayerNorm, biases, grouped kernels [G, in/G, out/G]


def hf_to_tf1_array(name, array):
    """Inverse of `tf1_to_hf_array`."""
    if name.endswith("conv_attn_key/depthwise_kernel"):  # [H, 1, K] -> [K, H, 1]
        return np.transpose(array, (2, 0, 1))
    if name.endswith("conv_attn_key/pointwise_kernel"):
        return np.transpose(array, (2, 1, 0))
    if name.endswith("conv_attn_key/bias"):
        return array.reshape(-1)
    if name.endswith("/kernel") and "/g_dense/" not in name:
        return np.ascontiguousarray(array.T)
    return array


def hf_head_size(hf_config: dict) -> int:
    """Head size Hugging Face uses: (H // n) // 2 with n = heads // ratio (at least 1)."""
    n = max(1, hf_config["num_attention_heads"] // hf_config["head_ratio"])
    return (hf_config["hidden_size"] // n) // 2


def config_from_hf(hf_config: dict, where="config.json") -> ConvBertConfig:
    if hf_config.get("model_type") != "convbert":
        raise ConfigError(f"{where}: model_type is {hf_config.get('model_type')!r}, not 'convbert'")
    hf = {**_HF_DEFAULTS, **hf_config}
    fields = {k: hf[k] for k in _SHARED_CONFIG_FIELDS if k in hf}
    try:
        config = ConvBertConfig(**fields)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if hf_head_size(hf) != config.head_size or config.context_width != config.hidden_size:
        raise ConfigError(
            f"{where}: head_ratio {config.head_ratio} with {config.num_attention_heads} heads means a "
            f"different head size in Hugging Face ({hf_head_size(hf)}) than in the official code "
            f"({config.head_size}); only configs where both agree (e.g. head_ratio 2) convert")
    return config


def config_to_hf(config: ConvBertConfig) -> dict:
    if config.conv_type != "sdconv" or not config.use_self_attention:
        raise ConfigError(f"Hugging Face ConvBERT has no conv_type {config.conv_type!r} "
                          "(only span-based dynamic convolution); save with format='keras'")
    if config.causal:
        raise ConfigError("Hugging Face ConvBERT has no causal (language model) variant; save with "
                          "format='keras'")
    d = {k: getattr(config, k) for k in _SHARED_CONFIG_FIELDS}
    if hf_head_size(d) != config.head_size or config.context_width != config.hidden_size:
        raise ConfigError(f"head_ratio {config.head_ratio} with {config.num_attention_heads} heads "
                          "cannot be expressed in Hugging Face ConvBERT (it assumes the attention "
                          "and convolution heads together are hidden_size wide)")
    d.update(model_type="convbert", architectures=["ConvBertModel"], pad_token_id=0,
             bos_token_id=0, eos_token_id=2)
    return d
