"""Non-finite values (issue 19 item 3), objective by objective, through the one training core.

For each objective: train to a checkpoint, restore it into a fresh core, poison one weight with
NaN (what a diverging run or a bad batch leads to), and go on. The run must stop at the very next
step with one line naming that step and the last good checkpoint, and write nothing: the
checkpoint directory is byte-identical afterwards.

With fp16 (mixed_float16, dynamic loss scaling) an overflowing gradient is routine: the step is
skipped (weights and optimizer moments untouched), the loss scale halved, and training goes on.
"""
import json
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the training core runs on the TensorFlow backend", allow_module_level=True)

from training import TrainingCore, TrainingError, TrainSettings  # noqa: E402

from tests.pretrain.test_run_pretraining import tiny_data, tiny_hparams  # noqa: E402,F401
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
    """make_task() -> an unbuilt Task; base_settings: its TrainSettings."""
    ckpt = str(tmp_path / "checkpoints")
    task = make_task()
    core = TrainingCore(task, _settings(base_settings, FIRST), log=lambda m: None).build()
    core.fit(checkpoint_dir=ckpt)
    before = _snapshot(ckpt)

    task = make_task()
    core = TrainingCore(task, _settings(base_settings, TOTAL), log=lambda m: None).build()
    restored = core.restore(ckpt)
    assert restored.endswith(f"ckpt-{FIRST}")
    first = core.variables[0]
    first.assign(tf.fill(first.shape, tf.constant(np.nan, first.dtype)))
    with pytest.raises(TrainingError) as error:
        core.fit(checkpoint_dir=ckpt, last_checkpoint=restored)
    message = str(error.value)
    assert "\n" not in message
    assert f"non-finite loss (nan) at step {FIRST + 1}:" in message, message
    assert f"the last good checkpoint is {restored}" in message, message
    assert _snapshot(ckpt) == before


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
    """DynaBERT's distillation (elastic/train.py) from a tiny fine-tuned teacher."""
    from elastic.train import DynaBertTask, load_finetuned
    from tests.elastic.test_train import SEQ, finetune_teacher, write_tiny_glue
    glue_dir, vocab = write_tiny_glue(tmp_path)
    teacher_dir = finetune_teacher(tmp_path, glue_dir, vocab, steps=2)
    config, tensors, _ = load_finetuned(str(teacher_dir), "mrpc")
    rng = np.random.default_rng(0)
    features = {"input_ids": rng.integers(5, 20, (16, SEQ)).astype(np.int32),
                "input_mask": np.ones((16, SEQ), np.int32),
                "segment_ids": np.zeros((16, SEQ), np.int32),
                "label_ids": rng.integers(0, 2, 16).astype(np.int32)}
    base = TrainSettings(total_steps=TOTAL, batch_size=4, learning_rate=1e-3, warmup_steps=0)
    check_guard(lambda: DynaBertTask("mrpc", "width", (config, tensors), (config, tensors),
                                     features, 4, width_list=(1.0, 0.5), depth_list=(1.0,),
                                     rewire_student=False), base, tmp_path / "run")


def test_glue_finetuning(tmp_path):
    """Fine-tuning writes no checkpoints: a diverging run stops at once, names the step, and
    writes no results."""
    from finetune.hparams import load_hparams
    from finetune.run import run_tasks
    from tests.elastic.test_train import TINY_MODEL, SEQ, write_tiny_glue
    glue_dir, vocab = write_tiny_glue(tmp_path)
    hp = load_hparams(json.dumps({
        "model_hparam_overrides": TINY_MODEL, "train_batch_size": 16, "max_seq_length": SEQ,
        "max_train_steps": 6, "learning_rate": 1e30, "clip_norm": 0, "log_every_steps": 1,
        "model_size": "small"}))
    with pytest.raises(TrainingError) as error:
        run_tasks(["mrpc"], hp, str(tmp_path / "ft"), data_dir=str(glue_dir),
                  vocab_file=str(vocab))
    message = str(error.value)
    assert "\n" not in message and "non-finite" in message and "at step " in message
    step = int(message.split("at step ")[1].split(":")[0])
    assert 1 <= step <= 3, message           # lr 1e30: the first update already overflows
    assert not list((tmp_path / "ft").glob("results/*metrics*"))


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
    core = TrainingCore(task, toy_settings(total_steps=1, precision="mixed_float16",
                                           save_every=0), log=lambda m: None)
    try:
        core.build()
        optimizer = core.optimizer
        assert hasattr(optimizer, "dynamic_scale")
        core.fit()                                 # one step: optimizer state exists
        weights = [np.asarray(v) for v in core.variables]
        def moments():   # Adam's m and v (not the counters, not the scale itself)
            return [np.asarray(v) for v in optimizer.variables
                    if not any(k in v.path for k in ("iteration", "scale", "step_counter"))]
        before = moments()
        optimizer.dynamic_scale.assign(3e38)       # the scaled gradients overflow float32
        core.settings = toy_settings(total_steps=2, precision="mixed_float16", save_every=0)
        summary = core.fit()                       # no TrainingError: a skipped step
        assert summary["global_step"] == 2
        assert float(optimizer.dynamic_scale.numpy()) == pytest.approx(1.5e38, rel=1e-3)
        for a, b in zip(weights, core.variables):
            np.testing.assert_array_equal(a, np.asarray(b))
        assert len(before) >= 2 * len(weights)
        for a, b in zip(before, moments()):
            np.testing.assert_array_equal(a, b)
        optimizer.dynamic_scale.assign(1.0)        # a scale this toy cannot overflow: it trains
        core.settings = toy_settings(total_steps=3, precision="mixed_float16", save_every=0)
        core.fit()
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
