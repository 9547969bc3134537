"""Both training cores run the same Task classes (training/task.py): the pre-training task
(pretrain/task.py, RTD; BERT's MLM objective, its generator's half, is trained by TensorFlow's
core in tests/training/test_nonfinite.py and by JAX's in tests/pretrain/test_jax_multiprocess.py),
the fine-tuning task (finetune/finetuner.py `FinetuneTask`) with SQuAD's QA head, the causal LM
(lm/task.py) and DynaBERT's depth phase (elastic/train.py), each trained by TensorFlow's
`TrainingCore` (SQuAD's on MirroredStrategy over 2 logical CPUs: each replica's loss is its
share of the global one) and by JAX's `JaxTrainingCore` (one device) from the same initial weights
on the same batches.
`FinetuneTask` with GLUE's classification and regression heads is compared the same way, over 20
steps and through the fine-tuning wrappers of both backends (`Trainer`, `JaxFinetuner`), in
tests/finetune/test_jax_finetune.py.

Each backend runs in its own subprocess (KERAS_BACKEND is fixed at import); the JAX one with
`tensorflow` unimportable. Every task without RNG in its step (dropout 0, no clipping: see
below) gives the same losses within 1e-4 on both cores: 10 steps of SQuAD's QA head, 2 of the LM
and of DynaBERT. Pre-training draws its masks and samples from Keras' RNG, whose streams differ
between backends, so there both cores must train the task's two steps with finite losses and the
same metric records."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

RUN = r"""
import json, os, sys
import numpy as np
import contextlib
backend = os.environ["KERAS_BACKEND"]
if backend == "jax":
    sys.modules["tensorflow"] = None          # the JAX core must not need it
    strategy = None
else:
    # TensorFlow trains the fine-tuning task on 2 replicas (2 logical CPUs, split before
    # TensorFlow starts), JAX on one device: a task without loss denominators must still give
    # each replica its share of the global loss (the other tasks: one device, as tracing a step
    # per replica doubles its cost; pre-training's replicas: tests/pretrain/test_distribution.py).
    from training.distribution import make_strategy
    strategy = make_strategy("mirrored", num_cpu_devices=2)
import keras
from finetune.hparams import FinetuneHParams
from finetune.squad_task import make_head as squad_head, model_fns as squad_fns
from finetune.finetuner import FinetuneTask
from elastic.train import DynaBertTask, head_prefix, make_head
from lm.task import LanguageModelTask, LMHParams
from model import ConvBertConfig, ConvBertModel
from pretrain.hparams import make_hparams
from pretrain.task import PretrainingTask
from training.settings import TrainSettings

out = sys.argv[1]
B, T, V = 4, 16, 128          # the vocabulary holds [CLS] 101, [SEP] 102, [MASK] 103
rng = np.random.default_rng(0)


def batches(n, extra):
    # One fixed list of global batches, fed to either core through its input hook.
    result = []
    for _ in range(n):
        b = {"input_ids": rng.integers(104, V, (B, T)).astype(np.int32),
             "input_mask": np.ones((B, T), np.int32), "segment_ids": np.zeros((B, T), np.int32)}
        b["input_ids"][:, 0] = 101
        b.update(extra())
        result.append(b)
    return result


class FixedBatches:
    # The task's own step; only its input is replaced by the fixed batches.
    fixed = None

    def host_batches(self, skip):
        return iter(self.fixed[skip:])

    def dataset(self, skip):
        import tensorflow as tf
        if not isinstance(self.fixed[0], dict):            # the LM: token blocks
            return tf.data.Dataset.from_tensor_slices(np.stack(self.fixed)).skip(skip)
        stacked = {k: np.stack([b[k] for b in self.fixed]) for k in self.fixed[0]}
        return tf.data.Dataset.from_tensor_slices(stacked).skip(skip)


class Pretraining(FixedBatches, PretrainingTask):
    pass


class Finetuning(FixedBatches, FinetuneTask):
    pass


class LanguageModel(FixedBatches, LanguageModelTask):
    pass


class DynaBert(FixedBatches, DynaBertTask):
    pass


config = ConvBertConfig(vocab_size=V, hidden_size=32, embedding_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
# One layer but for DynaBERT's depth phase, which drops layers: tracing and compiling the steps
# is most of this test's time, and it grows with the layers.
LAYERS = {"rtd": 1, "squad": 1, "lm": 1, "dynabert": 2}
one_layer = config.replace(num_hidden_layers=1)


def pretraining():
    # The discriminator of `config`'s sizes (the generator half its width): the other tasks'
    # variable shapes, whose initialisers the JAX run has then compiled already.
    hp = make_hparams("tiny", {"vocab_size": V, "max_seq_length": T, "train_batch_size": B,
                               "seed": 3, "model_hparam_overrides": {
                                   "hidden_size": 32, "embedding_size": 32,
                                   "intermediate_size": 64, "num_hidden_layers": 1}})
    task = Pretraining(hp, [], V)
    ids = np.arange(4 * B, dtype=np.int64).reshape(4, B)
    task.fixed = [dict(b, example_id=ids[i]) for i, b in enumerate(batches(2, lambda: {}))]
    return task, 2


def squad():
    keras.utils.set_random_seed(0)
    encoder = ConvBertModel(one_layer)
    encoder({"input_ids": np.ones((1, T), np.int32), "input_mask": np.ones((1, T), np.int32),
             "segment_ids": np.zeros((1, T), np.int32)})
    hp = FinetuneHParams(model_size="small", qa_hidden_size=16, beam_size=3,
                         max_seq_length=T).for_task("squad")
    head = squad_head(hp, one_layer, "2.0")
    forward, loss, _ = squad_fns(hp, "2.0")

    def extra():
        # question: tokens 0..5, context 6..T-1 (segment 1); an answer span in the context, or
        # [CLS] (0, 0) for an unanswerable question.
        impossible = rng.integers(0, 2, B).astype(np.int32)
        start = rng.integers(6, T - 2, B).astype(np.int32)
        end = start + rng.integers(0, 2, B).astype(np.int32)
        return {"segment_ids": np.concatenate([np.zeros((B, 6), np.int32),
                                               np.ones((B, T - 6), np.int32)], axis=1),
                "start_positions": start * (1 - impossible),
                "end_positions": end * (1 - impossible), "is_impossible": impossible}
    named = dict(encoder.weight_map())
    named.update({f"task_specific/squad/{k}": v for k, v in head.weight_map().items()})
    task = Finetuning(encoder, head, forward, loss, named, "squad")
    task.fixed = batches(10, extra)
    return task, 10


def language_model():
    hp = LMHParams(seq_len=T, train_batch_size=B, seed=1)
    task = LanguageModel(hp, one_layer.replace(causal=True))
    task.fixed = [rng.integers(104, V, (B, T + 1)).astype(np.int32) for _ in range(2)]
    return task, 2


def dynabert():
    # The depth phase: student and teacher start from one fine-tuned model (the JAX run draws
    # it, the TensorFlow run reads it), widths 1 and 0.5 x depths 1 and 0.5 each step.
    path = os.path.join(out, "dynabert_start.npz")
    if backend == "jax":
        keras.utils.set_random_seed(1)
        encoder = ConvBertModel(config)
        encoder({"input_ids": np.ones((1, T), np.int32), "input_mask": np.ones((1, T), np.int32),
                 "segment_ids": np.zeros((1, T), np.int32)})
        head = make_head(config, "mrpc")
        tensors = {k: keras.ops.convert_to_numpy(v) for k, v in encoder.weight_map().items()}
        tensors.update({k: keras.ops.convert_to_numpy(v)
                        for k, v in head.weight_map(head_prefix("mrpc")).items()})
        np.savez(path, **tensors)
    tensors = dict(np.load(path))
    features = batches(1, lambda: {"label_ids": rng.integers(0, 2, B).astype(np.int32)})[0]
    task = DynaBert("mrpc", "depth", start=(config, tensors), teacher=(config, tensors),
                    features=features, batch_size=B, width_list=(1.0, 0.5),
                    depth_list=(1.0, 0.5), log=lambda *_: None)
    task.fixed = batches(2, lambda: {"label_ids": rng.integers(0, 2, B).astype(np.int32)})
    return task, 2


init_path = os.path.join(out, "init_{}.npz")
results = {}
for name, make in (("rtd", pretraining), ("squad", squad),
                   ("lm", language_model), ("dynabert", dynabert)):
    mirrored = strategy if name == "squad" else None
    with mirrored.scope() if mirrored else contextlib.nullcontext():
        task, steps = make()
    # No clipping: TensorFlow keeps embedding gradients as IndexedSlices and its clip norm
    # counts a token seen twice in a batch twice (as the official code); JAX's dense gradients
    # count it once.
    settings = TrainSettings(total_steps=steps, batch_size=B, learning_rate=1e-3,
                             warmup_steps=1, clip_norm=0.0, log_every=1,
                             layerwise_lr_decay=None if name in ("rtd", "lm") else 0.8,
                             num_layers=LAYERS[name])
    if backend == "jax":
        from training.jax_core import JaxTrainingCore
        core = JaxTrainingCore(settings, log=lambda *_: None).build(task)
    else:
        from training.core import TrainingCore
        core = TrainingCore(task, settings, strategy=mirrored, log=lambda *_: None).build()
        assert core.num_replicas == (2 if mirrored else 1)
    if name == "dynabert":
        task.head.dropout.rate = 0.0      # DynaBERT's head keeps ELECTRA's dropout 0.1
    named = task.named_variables()
    path = init_path.format(name)
    if backend == "jax":      # the JAX run draws the initial weights, TensorFlow's reads them
        np.savez(path, **{k: keras.ops.convert_to_numpy(v) for k, v in named.items()})
    else:
        weights = np.load(path)
        assert sorted(weights.files) == sorted(named), name
        for k, v in named.items():
            v.assign(weights[k])
    summary = core.fit_task() if backend == "jax" else core.fit()
    results[name] = {"task": type(task).__mro__[2].__name__,
                     "history": [{k: v for k, v in h.items()
                                  if k not in ("sequences_per_second", "elapsed", "examples")}
                                 for h in summary["history"]]}
with open(os.path.join(out, backend + ".json"), "w") as f:
    json.dump(results, f)
"""


def _run(backend, out):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO_ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", RUN, str(out)], env=env, capture_output=True,
                          text=True, timeout=900, cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / f"{backend}.json").read_text())


def test_both_cores_train_the_same_tasks(tmp_path):
    pytest.importorskip("jax")
    jax_runs = _run("jax", tmp_path)            # draws and writes the initial weights
    tf_runs = _run("tensorflow", tmp_path)
    tasks = {"rtd": "PretrainingTask", "squad": "FinetuneTask",
             "lm": "LanguageModelTask", "dynabert": "DynaBertTask"}
    for name, task_class in tasks.items():
        j, t = jax_runs[name], tf_runs[name]
        assert j["task"] == t["task"] == task_class
        steps = 10 if name == "squad" else 2
        for history in (j["history"], t["history"]):
            assert [h["step"] for h in history] == list(range(1, steps + 1)), name
            assert all(np.isfinite(h["loss"]) and np.isfinite(h["grad_norm"]) for h in history)
        # The same window record on both cores (pre-training: gen/disc loss, accuracy, AUC).
        assert [sorted(h) for h in j["history"]] == [sorted(h) for h in t["history"]], name
        np.testing.assert_allclose([h["learning_rate"] for h in j["history"]],
                                   [h["learning_rate"] for h in t["history"]], rtol=1e-6)
        if task_class != "PretrainingTask":      # no RNG in the step: the same losses
            np.testing.assert_allclose([h["loss"] for h in j["history"]],
                                       [h["loss"] for h in t["history"]], atol=1e-4, rtol=0,
                                       err_msg=name)
    squad = [h["loss"] for h in jax_runs["squad"]["history"]]
    assert squad[-1] < squad[0]        # it trains: the comparison is not of two flat lines
    assert "disc_auc" in jax_runs["rtd"]["history"][0]
