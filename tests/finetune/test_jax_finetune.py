"""GLUE fine-tuning on Keras-on-JAX (finetune/jax_trainer.py) against the TensorFlow Trainer.

The same encoder + head weights, dropout 0, the same batches, no gradient clipping (see RUN): the
per-step losses of 20 steps agree within 1e-4 for a classification (MRPC) and a regression (STS-B)
task through the finetuners the drivers use, with ELECTRA's schedule, weight decay and layer-wise
learning rates. SQuAD's QA head is the same `FinetuneTask` (finetune/finetuner.py) on the same
cores: its losses on both are compared in tests/training/test_tasks_both_cores.py. Each backend
runs in its own subprocess (KERAS_BACKEND is fixed at import), both tasks one after the other;
the JAX one with `tensorflow` unimportable.

The JAX MRPC run again on 2 virtual CPU devices (DataParallel: batches split, state replicated)
gives the one-device losses within 1e-5, and the same logits from batches of 7 (one device: the
last batch padded) and of 8 (two: 7 rounded up to a multiple of the devices, split)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

STEPS = 20

RUN = r"""
import json, os, sys
import numpy as np
if os.environ["KERAS_BACKEND"] == "jax":
    sys.modules["tensorflow"] = None          # the JAX path must not need it
import keras
devices = int(sys.argv[4])
if devices > 1:   # as run_finetuning.py --num_cpu_devices: before JAX starts
    from training.jax_distribution import jax_num_devices, use_devices
    assert use_devices(jax_num_devices("mirrored", num_cpu_devices=devices)) == devices
from data.pretraining_arrays import array_batches
from finetune.classification_head import ClassificationHead
from finetune.glue.tasks import get_task
from finetune.hparams import FinetuneHParams
from model import ConvBertConfig, ConvBertModel

out, tasks, steps = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
config = ConvBertConfig(vocab_size=64, hidden_size=32, embedding_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
for task in tasks:   # each task from its own start weights (init_<task>.npz), on both backends
    spec = get_task(task)
    # No clipping: TensorFlow keeps embedding gradients as IndexedSlices and its clip norm counts
    # a token seen twice in a batch twice (as the official code); JAX's dense gradients count it
    # once. Both clip the same otherwise, but with a 64-token vocab every batch repeats tokens.
    hp = FinetuneHParams(model_size="small", learning_rate=1e-3, train_batch_size=8,
                         max_train_steps=steps, log_every_steps=1, max_seq_length=16,
                         clip_norm=0.0).for_task(task)
    rng = np.random.default_rng(0)
    n, t = 64, 16
    features = {"input_ids": rng.integers(5, 64, (n, t)).astype(np.int32),
                "input_mask": np.ones((n, t), np.int32),
                "segment_ids": np.zeros((n, t), np.int32)}
    features["label_ids"] = (rng.uniform(0, 5, n).astype(np.float32) if spec.is_regression
                             else rng.integers(0, 2, n).astype(np.int32))
    init = os.path.join(out, f"init_{task}.npz")
    if keras.backend.backend() == "jax":
        from finetune.jax_trainer import JaxFinetuner
        ft = JaxFinetuner(config, task, hp, head_dropout=0.0)
        encoder, head = ft.encoder, ft.head
        if os.path.exists(init):   # a later JAX run starts where the first did
            weights = dict(np.load(init))
        else:
            weights = {k: keras.ops.convert_to_numpy(v)
                       for k, v in encoder.weight_map().items()}
            weights.update({"head/" + k: keras.ops.convert_to_numpy(v)
                            for k, v in head.weight_map().items()})
            np.savez(init, **weights)
        ft.start({k: v for k, v in weights.items() if not k.startswith("head/")}, seed=0)
        for k, v in head.weight_map().items():
            v.assign(weights["head/" + k])
        history = ft.train(features, hp, seed=0)["history"]
        np.save(os.path.join(out, f"logits_{task}_{devices}.npy"),
                ft.predict(features, batch_size=7)["logits"])
    else:
        import tensorflow as tf
        from finetune.glue_task import glue_model_fns
        from finetune.trainer import Trainer
        weights = dict(np.load(init))
        encoder = ConvBertModel(config)
        encoder({k: features[k][:1] for k in ("input_ids", "input_mask", "segment_ids")})
        head = ClassificationHead(spec.num_labels, spec.is_regression, dropout_rate=0.0)
        head.build((None, None, config.hidden_size))
        forward, loss = glue_model_fns(task)
        for k, v in encoder.weight_map().items():
            v.assign(weights[k])
        for k, v in head.weight_map().items():
            v.assign(weights["head/" + k])
        trainer = Trainer(encoder, head, forward, loss, hp, task)
        # The JAX run's batches (array_batches, seed 0), in order.
        stream = array_batches(features, hp.train_batch_size, seed=0)
        batches = [next(stream) for _ in range(steps)]
        stacked = {k: np.stack([b[k] for b in batches]) for k in features}
        trainer.task.dataset = (
            lambda skip: tf.data.Dataset.from_tensor_slices(stacked).skip(skip))
        history = trainer.train(features, hp, seed=0, total_steps=steps)["history"]
    with open(os.path.join(out, f"{keras.backend.backend()}_{task}_{devices}.json"), "w") as f:
        json.dump([[h["step"], h["loss"], h["grad_norm"]] for h in history], f)
"""


TASKS = ("mrpc", "sts")


def _run(backend, out, tasks, devices=1):
    """RUN of `tasks` one after the other in one process; {task: history}."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO_ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", RUN, str(out), ",".join(tasks), str(STEPS),
                           str(devices)],
                          env=env, capture_output=True, text=True, timeout=600,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    return {task: json.loads((out / f"{backend}_{task}_{devices}.json").read_text())
            for task in tasks}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """run(backend, task, devices=1) -> (history, the folder), each run once per module: one
    process per backend runs both tasks (MRPC, then STS-B; each task's model, data and step
    built anew, as in a process of its own), one more MRPC alone on 2 devices. The runs share a
    folder: the first JAX run writes each task's initial weights the others start from."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("jax_finetune")
    done = {}

    def run(backend, task, devices=1):
        key = (backend, devices)
        if key not in done:
            if key != ("jax", 1):
                run("jax", task)                    # the shared initial weights first
            done[key] = _run(backend, folder, TASKS if devices == 1 else ("mrpc",), devices)
        return done[key][task], folder

    return run


@pytest.mark.parametrize("task", ["mrpc", "sts"])
def test_jax_fine_tuning_matches_tensorflow(runs, task):
    jax_history = runs("jax", task)[0]
    tf_history = runs("tensorflow", task)[0]
    steps = STEPS
    assert [h[0] for h in jax_history] == list(range(1, steps + 1))
    assert [h[0] for h in tf_history] == list(range(1, steps + 1))
    jax_loss, tf_loss = np.array([h[1] for h in jax_history]), np.array([h[1] for h in tf_history])
    np.testing.assert_allclose(jax_loss, tf_loss, atol=1e-4, rtol=0)
    assert jax_loss[-1] < jax_loss[0]      # it trains (the comparison is not of two flat lines)


def test_two_devices_match_one(runs):
    """DataParallel over 2 virtual CPU devices: the one-device losses and logits (≤ 1e-5)."""
    one, folder = runs("jax", "mrpc")
    two, _ = runs("jax", "mrpc", devices=2)
    assert [h[0] for h in two] == [h[0] for h in one] == list(range(1, STEPS + 1))
    np.testing.assert_allclose([h[1] for h in two], [h[1] for h in one], atol=1e-5, rtol=0)
    logits = [np.load(folder / f"logits_mrpc_{n}.npy") for n in (1, 2)]
    assert logits[0].shape == (64, 2)
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-5, rtol=0)
