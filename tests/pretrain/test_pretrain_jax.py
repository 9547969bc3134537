"""The same pre-training objective trained under KERAS_BACKEND=jax (in a subprocess).

The parent pytest runs on TensorFlow. The subprocess (1) loads weights the parent exported and
recomputes the objective at a given step, which must agree with TensorFlow, then (2) trains a few
steps with `stateless_call` + `jax.value_and_grad` + `optimizer.stateless_apply` under `jax.jit`.
"""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JAX_SCRIPT = r'''
import json, sys
import numpy as np
import keras

# Test-only speed-up: on CPU Keras' zeros / ones of a new shape are each an XLA compile (the
# truncated normal is drawn with NumPy: model/initializers.py). The weights are overwritten from
# the TensorFlow model below, so build with numpy.
def _numpy_init(value):
    return lambda self, shape, dtype=None: np.full(
        shape, value, keras.backend.standardize_dtype(dtype or "float32"))
keras.initializers.Zeros.__call__ = _numpy_init(0.0)
keras.initializers.Ones.__call__ = _numpy_init(1.0)

import jax
from keras import ops
assert keras.backend.backend() == "jax", keras.backend.backend()
from model import ConvBertConfig
from training.optimization import AdamWeightDecay
from pretrain import ElectraPretrainer, generator_config, sampling

args = json.loads(sys.argv[1])
data = dict(np.load(args["data"]))
cfg = ConvBertConfig.from_dict(args["config"])
model = ElectraPretrainer(cfg, generator_config(cfg, 0.5), max_predictions_per_seq=6, seed=3)
names = model.weight_map()
for name, var in names.items():
    var.assign(data["w:" + name])
batch = {k: data["b:" + k] for k in ("input_ids", "input_mask", "segment_ids", "example_id")}
result = {"uniform": ops.convert_to_numpy(sampling.uniform_grid(
    sampling.example_keys(42, 123456, np.arange(16) * 977), 19, 257)).tolist()}

opt = AdamWeightDecay(3e-3, name_map=names)
tv, ntv = model.trainable_variables, model.non_trainable_variables
opt.build(tv)
check_keys = args["check_keys"]

def loss_fn(tv_vals, ntv_vals, batch, step):
    out, ntv_vals = model.stateless_call(tv_vals, ntv_vals, batch, step=step, training=True)
    return out["total_loss"], ({k: out[k] for k in check_keys}, ntv_vals)

@jax.jit
def train_step(state, batch, step):
    tv_vals, ntv_vals, opt_vals = state
    (loss, (out, ntv_vals)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        tv_vals, ntv_vals, batch, step)
    tv_vals, opt_vals = opt.stateless_apply(opt_vals, grads, tv_vals)
    return (tv_vals, ntv_vals, opt_vals), out

state = ([v.value for v in tv], [v.value for v in ntv], [v.value for v in opt.variables])
losses = []
for i in range(args["steps"]):
    state, out = train_step(state, batch, np.int32(args["step"] + i))
    if i == 0:  # the objective at the TensorFlow weights
        result["check"] = {k: np.asarray(v).tolist() for k, v in out.items()}
    losses.append([float(out[k]) for k in ("total_loss", "gen_loss", "disc_loss")])
result["losses"] = losses
print("RESULT " + json.dumps(result))
'''

CHECK_KEYS = ["total_loss", "gen_loss", "disc_loss", "masked_input_ids", "masked_lm_positions",
              "fake_input_ids", "disc_labels"]


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="parent side runs on TensorFlow")
def test_objective_trains_under_jax_and_matches_tensorflow(tmp_path):
    pytest.importorskip("jax")
    from model import ConvBertConfig
    from pretrain import ElectraPretrainer, generator_config
    from tests.pretrain.test_pretrainer import tiny_batch, tiny_config

    cfg = tiny_config(num_hidden_layers=1)
    keras.utils.set_random_seed(4)
    model = ElectraPretrainer(cfg, generator_config(cfg, 0.5), max_predictions_per_seq=6, seed=3)
    batch = tiny_batch(batch=8, seed=5)
    step = 17
    want = {k: ops.convert_to_numpy(v) for k, v in model(batch, step).items()}
    arrays = {"w:" + n: ops.convert_to_numpy(v) for n, v in model.weight_map().items()}
    arrays.update({"b:" + k: v for k, v in batch.items()})
    np.savez(tmp_path / "data.npz", **arrays)
    args = {"data": str(tmp_path / "data.npz"), "config": cfg.to_dict(), "step": step,
            "steps": 25, "check_keys": CHECK_KEYS}
    # XLA's backend optimisation level 0 halves the CPU compile time of the train step (added
    # once: scripts/test_env.sh sets it already, and the same XLA_FLAGS as the suite's other
    # JAX commands lets this one fork their zygote, tests/zygote.py).
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_backend_optimization_level=0" not in flags.split():
        flags = f"{flags} --xla_backend_optimization_level=0".strip()
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
           "TF_CPP_MIN_LOG_LEVEL": "3", "XLA_FLAGS": flags}
    proc = subprocess.run([sys.executable, "-c", JAX_SCRIPT, json.dumps(args)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])

    # (1) same weights, same step -> same masking / sampling and the same losses on both backends
    from pretrain import sampling
    uniform = sampling.uniform_grid(sampling.example_keys(42, 123456, np.arange(16) * 977), 19, 257)
    np.testing.assert_array_equal(np.asarray(result["uniform"], np.float32),
                                  ops.convert_to_numpy(uniform))
    for k in CHECK_KEYS:
        got = np.asarray(result["check"][k])
        if want[k].dtype.kind in "iu":
            np.testing.assert_array_equal(got, want[k], err_msg=k)
        else:
            np.testing.assert_allclose(got, want[k], rtol=1e-4, atol=1e-5, err_msg=k)

    # (2) a few jitted stateless training steps make the loss fall
    losses = np.asarray(result["losses"])
    assert np.all(np.isfinite(losses))
    total = losses[:, 0]
    assert total[-5:].mean() < 0.8 * total[:5].mean(), total
    assert losses[-5:, 1].mean() < losses[:5, 1].mean()
