"""training/optimization.py against a numpy reference of ELECTRA's AdamWeightDecayOptimizer."""
import re

import keras
import numpy as np
import pytest
from keras import ops

from model import ConvBertConfig, ConvBertModel
from training.optimization import (AdamWeightDecay, LinearWarmupLinearDecay, create_optimizer,
                                layerwise_depths, layerwise_lr_multipliers,
                                linear_warmup_linear_decay)


def numpy_adamw(params, grads_per_step, lrs, decay_flags, mults, wd=0.01, b1=0.9, b2=0.999,
                eps=1e-6, clip=1.0):
    """The official update, step by step (no bias correction, decay added to the update)."""
    params = [p.astype(np.float64).copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for grads, lr in zip(grads_per_step, lrs):
        norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
        grads = [g * clip / max(norm, clip) for g in grads]
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            update = m[i] / (np.sqrt(v[i]) + eps)
            if decay_flags[i]:
                update = update + wd * params[i]
            params[i] = params[i] - lr * mults[i] * update
    return params


def test_schedule_matches_formula():
    sched = linear_warmup_linear_decay(1e-3, warmup_steps=10, total_steps=100)
    for step in [0, 1, 5, 10, 11, 50, 99, 100, 150]:
        want = 1e-3 * max(0.0, 1 - min(step, 100) / 100) * min(1.0, step / 10)
        assert float(ops.convert_to_numpy(sched(step))) == pytest.approx(want, rel=1e-5, abs=1e-12)
    no_warmup = LinearWarmupLinearDecay(2.0, 0, 4)
    assert [float(ops.convert_to_numpy(no_warmup(s))) for s in range(5)] == pytest.approx(
        [2.0, 1.5, 1.0, 0.5, 0.0])
    assert LinearWarmupLinearDecay.from_config(sched.get_config()).get_config() == sched.get_config()


def make_variables():
    rng = np.random.default_rng(0)
    shapes = {"layer/dense/kernel": (3, 4), "layer/dense/bias": (4,), "layer/LayerNorm/gamma": (4,),
              "head/output_bias": (5,), "embeddings/word_embeddings": (5, 3)}
    variables = {n: keras.Variable(rng.normal(size=s).astype(np.float32), name=n.split("/")[-1])
                 for n, s in shapes.items()}
    return variables


@pytest.mark.parametrize("clip", [1.0, 100.0])
def test_adamw_matches_numpy_reference(clip):
    variables = make_variables()
    names = list(variables)
    var_list = [variables[n] for n in names]
    init = [ops.convert_to_numpy(v) for v in var_list]
    rng = np.random.default_rng(1)
    grads_per_step = [[rng.normal(size=p.shape).astype(np.float32) * 0.5 for p in init]
                      for _ in range(5)]
    sched = LinearWarmupLinearDecay(0.1, 2, 10)
    opt = AdamWeightDecay(sched, weight_decay_rate=0.01, clip_norm=clip, name_map=variables)
    for grads in grads_per_step:
        opt.apply(grads, var_list)
    lrs = [0.1 * (1 - s / 10) * min(1.0, s / 2) for s in range(5)]
    flags = [not re.search("LayerNorm|layer_norm|bias", n) for n in names]
    assert flags == [True, False, False, False, True]
    want = numpy_adamw(init, grads_per_step, lrs, flags, [1.0] * 5, clip=clip)
    for n, v, w in zip(names, var_list, want):
        np.testing.assert_allclose(ops.convert_to_numpy(v), w, rtol=2e-5, atol=1e-6, err_msg=n)
    assert int(ops.convert_to_numpy(opt.iterations)) == 5


def test_lr_multipliers_and_names_by_path():
    variables = make_variables()
    var_list = list(variables.values())
    init = [ops.convert_to_numpy(v) for v in var_list]
    mults = {n: 0.5 ** i for i, n in enumerate(variables)}
    opt = AdamWeightDecay(0.01, name_map=variables, lr_multipliers=mults)
    grads = [np.full(p.shape, 0.1, np.float32) for p in init]
    for _ in range(3):
        opt.apply(grads, var_list)
    flags = [True, False, False, False, True]
    want = numpy_adamw(init, [grads] * 3, [0.01] * 3, flags, list(mults.values()))
    for v, w in zip(var_list, want):
        np.testing.assert_allclose(ops.convert_to_numpy(v), w, rtol=2e-5, atol=1e-7)
    with pytest.raises(ValueError, match="no learning-rate multiplier"):
        AdamWeightDecay(0.01, lr_multipliers={"other": 1.0}).build(var_list)


def test_weight_decay_exclusion_on_keras_paths():
    cfg = ConvBertConfig(vocab_size=50, hidden_size=16, embedding_size=8, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32, num_groups=2)
    model = ConvBertModel(cfg)
    ln = keras.layers.LayerNormalization()  # Keras' default name: "layer_normalization"
    ln.build((None, 16))
    opt = AdamWeightDecay(1e-3)  # no name_map: decisions from Keras paths
    variables = model.trainable_variables + ln.trainable_variables
    opt.build(variables)
    by_tf1 = {id(v): n for n, v in model.weight_map().items()}
    for v, flag in zip(variables, opt._decay_flags):
        tf1 = by_tf1.get(id(v), v.path)
        official = not re.search("LayerNorm|layer_norm|bias", tf1)
        assert flag == official, (v.path, tf1)
    assert sum(opt._decay_flags) > 0


def test_layerwise_multipliers_follow_official_depths():
    cfg = ConvBertConfig(vocab_size=50, hidden_size=16, embedding_size=8, num_hidden_layers=3,
                         num_attention_heads=2, intermediate_size=32)
    names = dict(ConvBertModel(cfg).weight_map())
    names["task_specific/cola/output/kernel"] = None
    depths = layerwise_depths(names, 3)
    assert depths["electra/embeddings/word_embeddings"] == 0
    assert depths["electra/embeddings_project/kernel"] == 0
    assert depths["electra/encoder/layer_2/output/dense/kernel"] == 3
    mults = layerwise_lr_multipliers(names, 3, decay=0.8)
    assert mults["electra/embeddings/LayerNorm/gamma"] == pytest.approx(0.8 ** 5)
    assert mults["electra/encoder/layer_0/attention/self/query/kernel"] == pytest.approx(0.8 ** 4)
    assert mults["task_specific/cola/output/kernel"] == 1.0
    with pytest.raises(ValueError, match="no layer-wise"):
        layerwise_lr_multipliers({"electra/pooler/dense/kernel": None}, 3)
    # layer_1 must not catch layer_10..
    assert layerwise_depths(["electra/encoder/layer_10/x"], 12)["electra/encoder/layer_10/x"] == 11
    opt = create_optimizer(1e-4, 100, warmup_proportion=0.1, layerwise_lr_decay_power=0.8,
                           n_transformer_layers=3, name_map={k: v for k, v in names.items() if v is not None})
    assert isinstance(opt, AdamWeightDecay) and opt.learning_rate is not None
