"""Non-finite values (issue 19 item 3), objective by objective, through the one training core.

For each objective: train to a checkpoint, set the core back to zero and restore the checkpoint
into it (what a fresh core does; one trace of the step), poison one weight with
NaN (what a diverging run or a bad batch leads to), and go on. The run must stop at the very next
step with one line naming that step and the last good checkpoint, and write nothing: the
checkpoint directory is byte-identical afterwards. Fine-tuning (no checkpoints) gets the NaN just
before a chosen step and must stop at that step, writing no results. The JAX core is run as the
driver with KERAS_BACKEND=jax in a subprocess.

With fp16 (mixed_float16, dynamic loss scaling) an overflowing gradient is routine: the step is
skipped (weights, optimizer moments and the schedule's iteration count untouched), the loss scale
halved, and training goes on; only a scale driven below 1 stops the run.

A checkpoint holding NaN weights is refused when read (every format), naming the file.
"""
import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the training core runs on the TensorFlow backend", allow_module_level=True)

from training import TrainingCore, TrainingError, TrainSettings  # noqa: E402

from tests.pretrain.test_run_pretraining import (  # noqa: E402,F401 (tiny_data: a fixture)
    REPO, driver_cmd, driver_env, tiny_data, tiny_hparams)
from tests.training.test_core import LinearTask, settings as toy_settings  # noqa: E402

FIRST, TOTAL = 2, 4      # checkpoint at step 2, then steps 3..4 after the poisoning


def _snapshot(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def _settings(base, total):
    return TrainSettings(**{**base.__dict__, "total_steps": total, "save_every": FIRST,
                            "log_every": 1, "keep_checkpoints": 3})


def check_guard(make_task, base_settings, tmp_path):
    """make_task() -> an unbuilt Task; base_settings: its TrainSettings. One core (one trace of
    its step) trains to the checkpoint at step FIRST, is set back to zero and restored from that
    checkpoint as a fresh core would be, then goes on to TOTAL with a NaN weight."""
    ckpt = str(tmp_path / "checkpoints")
    core = TrainingCore(make_task(), _settings(base_settings, TOTAL), log=lambda m: None).build()
    settings = core.settings
    core.settings = dataclasses.replace(settings, total_steps=FIRST)   # stop at the checkpoint
    core.fit(checkpoint_dir=ckpt)
    before = _snapshot(ckpt)

    core.settings = settings
    core.reset()
    trained = [v.numpy() for v in core.variables]
    for v in core.variables:
        v.assign(tf.zeros_like(v))
    restored = core.restore(ckpt)
    assert restored.endswith(f"ckpt-{FIRST}") and int(core.step.numpy()) == FIRST
    for v, value in zip(core.variables, trained):
        np.testing.assert_array_equal(v.numpy(), value)
    first = core.variables[0]
    first.assign(tf.fill(first.shape, tf.constant(np.nan, first.dtype)))
    with pytest.raises(TrainingError) as error:
        core.fit(checkpoint_dir=ckpt, last_checkpoint=restored)
    message = str(error.value)
    assert "\n" not in message
    assert f"non-finite loss (nan) at step {FIRST + 1}:" in message, message
    assert f"the last good checkpoint is {restored}" in message, message
    assert _snapshot(ckpt) == before


def poison_before(monkeypatch, k):
    """From now on every TrainingCore.fit sets the first weight to NaN just before step k."""
    original = TrainingCore.train_step

    def train_step(core):
        step_fn = original(core)

        def poisoned(*args):
            if int(core.step.numpy()) == k - 1:
                first = core.variables[0]
                first.assign(tf.fill(first.shape, tf.constant(np.nan, first.dtype)))
            return step_fn(*args)
        return poisoned
    monkeypatch.setattr(TrainingCore, "train_step", train_step)


# ------------------------------------------------------------------------------ the objectives
def _pretraining_inputs(tiny_data, **changes):
    import glob
    from data.vocab import special_token_ids
    from pretrain.hparams import make_hparams, train_settings
    pattern, vocab = tiny_data
    hp = make_hparams(None, tiny_hparams(**changes), {"seed": 7})
    size, special = special_token_ids(vocab, None)
    return hp, sorted(glob.glob(pattern)), size, special, train_settings(hp)


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
def test_pretraining(tiny_data, tmp_path, objective):
    from pretrain.task import PretrainingTask
    hp, files, vocab_size, special, base = _pretraining_inputs(
        tiny_data, electra_objective=(objective == "rtd"))
    check_guard(lambda: PretrainingTask(hp, files, vocab_size, special), base, tmp_path)


def test_elastic_pretraining(tiny_data, tmp_path):
    from elastic.pretrain import ElasticPretrainingTask
    from tests.elastic.test_pretrain import ELASTIC_MODEL
    hp, files, vocab_size, special, base = _pretraining_inputs(
        tiny_data, model_hparam_overrides=ELASTIC_MODEL)
    check_guard(lambda: ElasticPretrainingTask(hp, files, vocab_size, special, (1.0, 0.5),
                                               (1.0, 0.5), num_sampled=1), base, tmp_path)


def test_language_model(tmp_path):
    from data.tokenization import load_tokenizer
    from lm import task as lm_task
    from lm.data import token_stream
    from tests.lm.test_lm import TINY, WORDS, _text
    (tmp_path / "train.txt").write_text(_text(0, 60))
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "=", ".", "heading"] + WORDS) + "\n")
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    tokenizer = load_tokenizer(str(tmp_path / "vocab.txt"))
    stream = token_stream([str(tmp_path / "train.txt")], tokenizer)
    hp = lm_task.make_hparams({"model_config": str(tmp_path / "tiny.json"), "seq_len": 16,
                               "train_batch_size": 4, "seed": 3}, {"num_train_steps": TOTAL})
    config = lm_task.model_config(hp, tokenizer.vocab_size)
    check_guard(lambda: lm_task.LanguageModelTask(hp, config, stream), lm_task.train_settings(hp),
                tmp_path)


def test_dynabert(tmp_path):
    """DynaBERT's distillation (elastic/train.py); student and teacher start from one tiny random
    2-layer encoder + MRPC head (the guard does not care whether the teacher was fine-tuned:
    loading a fine-tuned one is tests/elastic/test_train.py's)."""
    from elastic.train import DynaBertTask, head_prefix, make_head
    from model import ConvBertConfig, ConvBertModel
    # tests/elastic/test_train.py's 2-layer model: the guard does not depend on depth, and
    # tracing a step costs in proportion to the layers.
    from tests.elastic.test_train import ELASTIC_TINY_MODEL, SEQ, random_mrpc_features
    keras.utils.set_random_seed(0)
    config = ConvBertConfig.from_size("small").replace(vocab_size=32, **ELASTIC_TINY_MODEL)
    encoder = ConvBertModel(config)
    ones = np.ones((1, SEQ), np.int32)
    encoder({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    head = make_head(config, "mrpc")
    tensors = {k: keras.ops.convert_to_numpy(v) for k, v in encoder.weight_map().items()}
    tensors.update({k: keras.ops.convert_to_numpy(v)
                    for k, v in head.weight_map(head_prefix("mrpc")).items()})
    features = random_mrpc_features(16)
    base = TrainSettings(total_steps=TOTAL, batch_size=4, learning_rate=1e-3, warmup_steps=0)
    check_guard(lambda: DynaBertTask("mrpc", "width", (config, tensors), (config, tensors),
                                     features, 4, width_list=(1.0, 0.5), depth_list=(1.0,),
                                     rewire_student=False), base, tmp_path / "run")


def _finetuning_stops_at(monkeypatch, k, task, hparams, tmp_path, **files):
    from finetune.hparams import load_hparams
    from finetune.run import run_tasks
    from tests.elastic.test_train import ELASTIC_TINY_MODEL
    poison_before(monkeypatch, k)
    hp = load_hparams(json.dumps({"model_hparam_overrides": ELASTIC_TINY_MODEL,
                                  "max_train_steps": 6,
                                  "log_every_steps": 1, "model_size": "small", **hparams}))
    with pytest.raises(TrainingError) as error:
        run_tasks([task], hp, str(tmp_path / "ft"), **files)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{task}: non-finite loss (nan) at step {k}: stopped without "
                              "saving; try a lower learning_rate"), message
    assert not list((tmp_path / "ft").glob("results/*")), "no metrics or predictions written"


def test_glue_finetuning(tmp_path, monkeypatch):
    """Fine-tuning writes no checkpoints: a NaN before step 3 stops it at step 3, and it writes
    no results."""
    from tests.elastic.test_train import SEQ, write_tiny_glue
    glue_dir, vocab = write_tiny_glue(tmp_path)
    _finetuning_stops_at(monkeypatch, 3, "mrpc", {"train_batch_size": 16, "max_seq_length": SEQ},
                         tmp_path, data_dir=str(glue_dir), vocab_file=str(vocab))


def test_squad_finetuning(tmp_path, monkeypatch):
    from tests.elastic.test_train import WORDS
    rng = np.random.default_rng(0)
    paragraphs = []
    for i in range(24):
        words = list(rng.choice(WORDS, 12))
        context = " ".join(words)
        answer = " ".join(words[4:6])
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{i}", "question": " ".join(words[:3]),
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}]})
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps({"version": "1.1",
                                 "data": [{"title": "t", "paragraphs": paragraphs}]}))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    _finetuning_stops_at(monkeypatch, 2, "squadv1",
                         {"train_batch_size": 8, "max_seq_length": 32, "max_query_length": 8,
                          "doc_stride": 16, "qa_hidden_size": 32}, tmp_path,
                         train_file=str(squad), predict_file=str(squad), vocab_file=str(vocab))


# The driver with KERAS_BACKEND=jax, with the first trainable weight set to NaN in the compiled
# program's input state just before step NONFINITE_POISON_STEP (test-only; the toolkit has no hook).
# At that moment the checkpoint directory's files are hashed into NONFINITE_SNAPSHOT.
JAX_DRIVER = """
import hashlib, json, os, runpy, sys
k = int(os.environ["NONFINITE_POISON_STEP"])
import numpy as np
from training import jax_core
original = jax_core.JaxTrainingCore._program


def snapshot(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_step(self, *args):
    step_fn = original(self, *args)

    def poisoned(state, block, num_steps, *rest):
        if int(state.step) == k - 1:
            with open(os.environ["NONFINITE_SNAPSHOT"], "w") as f:
                json.dump(snapshot(os.environ["NONFINITE_CHECKPOINTS"]), f)
            state = state._replace(trainable=[state.trainable[0] * np.nan,
                                              *state.trainable[1:]])
        return step_fn(state, block, num_steps, *rest)
    return poisoned


jax_core.JaxTrainingCore._program = make_step
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_jax_core_pretraining(tiny_data, tmp_path):
    """One run on the JAX core: ckpt-2 saved, NaN before step 3: stops at step 3 naming ckpt-2;
    the checkpoint directory is as it was before step 3; no export, no summary."""
    pytest.importorskip("jax")
    model_dir = tmp_path / "model"
    ckpt_dir = model_dir / "jax_checkpoints"
    cmd = driver_cmd(tiny_data, model_dir, tiny_hparams(), "--log_every_n_steps=1", "--seed=2",
                     f"--num_train_steps={TOTAL}", f"--save_checkpoints_steps={FIRST}")
    env = driver_env({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                      "NONFINITE_POISON_STEP": str(FIRST + 1),
                      "NONFINITE_CHECKPOINTS": str(ckpt_dir),
                      "NONFINITE_SNAPSHOT": str(tmp_path / "before.json")})
    proc = subprocess.run([sys.executable, "-c", JAX_DRIVER, *cmd[1:]], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    ckpt = ckpt_dir / f"ckpt-{FIRST}.safetensors"
    assert line.startswith(f"error: non-finite loss (nan) at step {FIRST + 1}: stopped without "
                           f"saving; the last good checkpoint is {ckpt};"), line
    assert f"step {FIRST}/{TOTAL}" in proc.stdout
    assert f"step {FIRST + 1}/{TOTAL}" not in proc.stdout      # no progress line for it
    before = json.loads((tmp_path / "before.json").read_text())
    assert list(before) == [ckpt.name]
    assert {name: hashlib.sha256(data).hexdigest()
            for name, data in _snapshot(ckpt_dir).items()} == before
    assert not (model_dir / "discriminator").exists()
    assert not (model_dir / "pretraining_summary.json").exists()


# ------------------------------------------------------------------------------------- fp16
class MixedLinearTask(LinearTask):
    """The toy regression with its float16 output cast back, as the real heads do."""

    def compute(self, batch, step, denominators):
        pred = tf.cast(tf.squeeze(self.dense(batch["x"]), -1), tf.float32)
        err = pred - batch["y"]
        return tf.reduce_mean(err ** 2), {"abs_error": tf.reduce_sum(tf.abs(err))}


def test_fp16_overflow_skips_the_step_and_lowers_the_scale(tmp_path):
    keras.utils.set_random_seed(1)
    task = MixedLinearTask()
    # The schedule spans 10 steps; each fit() below runs to the step its settings say.
    core = TrainingCore(task, toy_settings(total_steps=10, precision="mixed_float16",
                                           save_every=0), log=lambda m: None)

    def fit_to(total):
        core.settings = toy_settings(total_steps=total, precision="mixed_float16", save_every=0)
        return core.fit()
    try:
        core.build()
        optimizer = core.optimizer
        assert hasattr(optimizer, "dynamic_scale")
        optimizer.dynamic_scale.assign(1.0)        # (2**15 overflows this toy's fp16 gradient)
        fit_to(1)                                  # one step applied: Adam moments non-zero
        weights = [np.asarray(v) for v in core.variables]
        def moments():   # Adam's m and v (not the counters, not the scale itself)
            return [np.asarray(v) for v in optimizer.variables
                    if not any(k in v.path for k in ("iteration", "scale", "step_counter"))]
        before = moments()
        iterations = int(optimizer.iterations.numpy())
        assert iterations == 1
        optimizer.dynamic_scale.assign(3e38)       # the scaled gradients overflow float32
        summary = fit_to(2)                        # no TrainingError: a skipped step
        assert summary["global_step"] == 2 and int(core.examples.numpy()) == 16
        # The schedule counts applied updates: it does not advance on a skipped step.
        assert int(optimizer.iterations.numpy()) == iterations
        assert float(optimizer.dynamic_scale.numpy()) == pytest.approx(1.5e38, rel=1e-3)
        for a, b in zip(weights, core.variables):
            np.testing.assert_array_equal(a, np.asarray(b))
        assert len(before) >= 2 * len(weights) and all(m.any() for m in before)
        for a, b in zip(before, moments()):
            np.testing.assert_array_equal(a, b)
        optimizer.dynamic_scale.assign(1.0)        # a scale this toy cannot overflow: it trains
        fit_to(3)
        assert int(optimizer.iterations.numpy()) == iterations + 1
        assert any((a != np.asarray(b)).any() for a, b in zip(weights, core.variables))
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_fp16_non_finite_loss_still_stops(tmp_path):
    """Loss scaling cures overflow in the backward pass only; a NaN loss (the forward pass) is
    not cured by a lower scale, so it stops the run as in fp32."""
    keras.utils.set_random_seed(1)
    task = MixedLinearTask()
    task.y[:] = np.nan
    core = TrainingCore(task, toy_settings(total_steps=4, precision="mixed_float16"),
                        log=lambda m: None)
    try:
        core.build()
        with pytest.raises(TrainingError, match="non-finite loss .* at step 1:"):
            core.fit(checkpoint_dir=str(tmp_path / "ckpt"))
        assert not (tmp_path / "ckpt" / "checkpoint").exists()
    finally:
        keras.mixed_precision.set_global_policy("float32")


class NanGradientTask(MixedLinearTask):
    """A finite loss whose gradient is NaN at every scale (sqrt at 0, times 0): every step
    overflows, as when fp16 cannot hold the gradients even unscaled."""

    def compute(self, batch, step, denominators):
        loss, metrics = super().compute(batch, step, denominators)
        kernel = self.dense.kernel
        return loss + tf.sqrt(tf.square(tf.reduce_sum(kernel)) * 0.0), metrics


def test_fp16_loss_scale_collapse_stops(tmp_path):
    """Keras halves the scale at every skipped step and never gives up: from 2**15 it falls below
    1 (MIN_LOSS_SCALE) at the 16th skipped step, and the run stops there instead of 'training'
    on with frozen weights. The checkpoints before it are kept and the last one named."""
    keras.utils.set_random_seed(1)
    task = NanGradientTask()
    core = TrainingCore(task, toy_settings(total_steps=40, precision="mixed_float16",
                                           save_every=4, keep_checkpoints=10),
                        log=lambda m: None)
    ckpt = tmp_path / "ckpt"
    try:
        core.build()
        assert float(core.optimizer.dynamic_scale.numpy()) == 2.0 ** 15
        initial = [np.asarray(v) for v in core.variables]
        with pytest.raises(TrainingError) as error:
            core.fit(checkpoint_dir=str(ckpt))
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith("toy: non-finite gradient norm (nan) at step 16, after skipped "
                                  "steps halved the fp16 loss scale to 0.5: stopped without "
                                  f"saving; the last good checkpoint is {ckpt / 'ckpt-12'};"), \
            message
        assert sorted(p.name for p in ckpt.glob("ckpt-*.index")) == [
            "ckpt-12.index", "ckpt-4.index", "ckpt-8.index"]
        for a, b in zip(initial, core.variables):     # every step was skipped
            np.testing.assert_array_equal(a, np.asarray(b))
    finally:
        keras.mixed_precision.set_global_policy("float32")


# ------------------------------------------------------------------- checkpoints holding NaN
def _nan_model():
    from model import ConvBertConfig, ConvBertModel
    from tests.elastic.test_train import TINY_MODEL
    keras.utils.set_random_seed(0)
    model = ConvBertModel(ConvBertConfig.from_size("small", **TINY_MODEL))
    name = "electra/encoder/layer_1/output/dense/kernel"
    variable = model.weight_map()[name]
    value = np.asarray(variable)
    value[0, 0] = np.nan
    value[1, 0] = np.inf
    variable.assign(value)
    return model


@pytest.mark.parametrize("fmt", ["keras", "hf", "tf1"])
def test_checkpoint_with_nan_weights_is_refused(tmp_path, fmt):
    from model import ConvBertModel
    from model.checkpoints import CheckpointError, resolve_checkpoint
    written = _nan_model().save_pretrained(str(tmp_path / fmt), format=fmt)
    bad_file = (written if fmt == "tf1" else os.path.join(written, "model.safetensors"))
    for load in (lambda: ConvBertModel.from_pretrained(str(tmp_path / fmt)),
                 lambda: resolve_checkpoint(str(tmp_path / fmt))):   # fine-tuning's loader
        with pytest.raises(CheckpointError) as error:
            load()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith(f"{bad_file}: 1 weight(s) hold non-finite values, e.g. "), message
        assert "(1 NaN, 1 inf of 2048)" in message and "use an earlier checkpoint" in message
        assert ("encoder.layer.1.output.dense.weight" if fmt == "hf"
                else "electra/encoder/layer_1/output/dense/kernel") in message


def test_finetuning_from_a_nan_checkpoint_is_one_line(tmp_path):
    """run_finetuning.py --init_checkpoint=<NaN weights>: one error line naming the file, exit 1,
    nothing written."""
    from tests.elastic.test_train import write_tiny_glue
    glue_dir, vocab = write_tiny_glue(tmp_path)
    _nan_model().save_pretrained(str(tmp_path / "ckpt"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "run_finetuning.py"), "--task_names=mrpc",
         f"--data_dir={glue_dir}", f"--vocab_file={vocab}", f"--model_dir={out}",
         f"--init_checkpoint={tmp_path / 'ckpt'}", "--max_train_steps=1",
         "--max_seq_length=24"], cwd=str(REPO), env=driver_env(), capture_output=True,
        text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {tmp_path / 'ckpt' / 'model.safetensors'}: 1 weight(s) hold "
                           "non-finite values"), line
    assert not out.exists()
