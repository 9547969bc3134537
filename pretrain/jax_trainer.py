"""Pre-training on Keras-on-JAX, without TensorFlow: the GPU machine's path and a TPU VM's second
runtime (`KERAS_BACKEND=jax`).

    KERAS_BACKEND=jax python run_pretraining.py --pretrain_tfrecords='shards/*' \
        --vocab_file=vocab.txt --model_size=small --model_dir=runs/small_jax

The same objective (`ElectraPretrainer`, keras.ops only), optimizer (`AdamWeightDecay` with
ELECTRA's schedule), hyper-parameters (`pretrain/hparams.py`, `train_settings`) and window metrics
(`pretrain/window.py`) as on TensorFlow, trained by the JAX training core (training/jax_core.py:
jitted stateless step, DataParallel over the local devices, safetensors checkpoints with exact
resume, the progress line and summary). This module supplies what is the objective's own: the
model, the loss and metric sums of a batch, the input (our TFRecord shards read by
`data/tfrecord_io.py`, no tf.data) and the `discriminator/` + `generator/` exports.

Precision: fp32 or bf16 (mixed_bfloat16: bf16 compute, fp32 weights). Not here yet (TensorFlow
path only): TensorBoard scalars, mixed_float16 (loss scaling), steps_per_loop, multi-host.
Embedding gradients are dense on JAX, so the clip norm counts a token seen twice once (the TF
path keeps IndexedSlices and counts it twice, as the official code): a rounding-level difference
at clip time.
"""
import os
import time

import numpy as np

from data.tfrecord_io import pretraining_batches
from model import fileio
from pretrain import window
from pretrain.hparams import model_config, train_settings
from training.jax_core import JaxTrainingCore, use_devices
from training.loop import TrainingError

CHECKPOINT_DIR = "jax_checkpoints"
SUMMARY_FILE = "pretraining_summary.json"
__all__ = ["pretrain_jax"]


def build(hp, vocab_size, special_ids=None, host_learning_rate=False):
    """(pretrainer, optimizer, schedule), built on the current distribution. With
    `host_learning_rate` the optimizer keeps a float learning rate that a step made with
    `make_step(..., host_learning_rate=True)` sets from `schedule` each step (the step does not
    depend on the run's length)."""
    import keras
    from model import optimization
    from pretrain.electra_pretrainer import ElectraPretrainer
    from pretrain.generator_config import generator_config
    keras.utils.set_random_seed(hp.seed)
    disc_config = model_config(hp, vocab_size)
    gen_config = generator_config(disc_config, hp.generator_hidden_size, hp.generator_layers)
    pretrainer = ElectraPretrainer(
        disc_config, gen_config, electra_objective=hp.electra_objective, mask_prob=hp.mask_prob,
        max_predictions_per_seq=hp.max_predictions_per_seq, gen_weight=hp.gen_weight,
        disc_weight=hp.disc_weight, temperature=hp.temperature,
        disallow_correct=hp.disallow_correct, seed=hp.seed, **dict(special_ids or {}))
    t = hp.max_seq_length
    ones = np.ones([1, t], np.int32)
    pretrainer({"input_ids": ones * 5, "input_mask": ones, "segment_ids": ones * 0,
                "example_id": np.zeros([1], np.int64)}, step=0, training=False)
    schedule = optimization.linear_warmup_linear_decay(
        hp.learning_rate, hp.num_warmup_steps, hp.num_train_steps, power=hp.lr_decay_power)
    names = {id(v): n for n, v in pretrainer.weight_map().items()}
    named = {names.get(id(v), v.path): v for v in pretrainer.trainable_variables}
    optimizer = optimization.AdamWeightDecay(
        float(hp.learning_rate) if host_learning_rate else schedule,
        weight_decay_rate=hp.weight_decay_rate, clip_norm=hp.clip_norm, name_map=named)
    optimizer.build(pretrainer.trainable_variables)
    return pretrainer, optimizer, schedule


def loss_and_metrics(outputs, batch):
    """(total loss, metric sums) of one batch: what pretrain/window.py summarizes."""
    import jax
    import jax.numpy as jnp
    mask = batch["input_mask"].astype(jnp.float32)
    probs = outputs["disc_probs"].astype(jnp.float32)
    labels = outputs["disc_labels"].astype(jnp.float32)
    bins = jnp.clip((probs * window.AUC_BINS).astype(jnp.int32), 0,
                    window.AUC_BINS - 1).reshape(-1)
    w_gen = outputs["gen_weight_sum"].astype(jnp.float32)
    w_disc = outputs["disc_weight_sum"].astype(jnp.float32)
    metrics = {
        "gen_loss": outputs["gen_loss_sum"].astype(jnp.float32), "gen_weight": w_gen,
        "gen_accuracy": outputs["gen_accuracy"].astype(jnp.float32) * w_gen,
        "disc_loss": outputs["disc_loss_sum"].astype(jnp.float32), "disc_weight": w_disc,
        "disc_accuracy": outputs["disc_accuracy"].astype(jnp.float32) * w_disc,
        "auc_pos": jax.ops.segment_sum((labels * mask).reshape(-1), bins, window.AUC_BINS),
        "auc_neg": jax.ops.segment_sum(((1.0 - labels) * mask).reshape(-1), bins,
                                       window.AUC_BINS),
    }
    return outputs["total_loss"], metrics


def export(pretrainer, model_dir):
    for part, fn in (("discriminator", pretrainer.export_discriminator),
                     ("generator", pretrainer.export_generator)):
        final = os.path.join(model_dir, part)
        tmp = os.path.join(model_dir, f".{part}.tmp-{os.getpid()}")
        fileio.remove_tree(tmp)
        fn(tmp, "keras")
        fileio.replace_dir(tmp, final)


def pretrain_jax(hp, model_dir, train_files, vocab_size, special_ids=None, log=print,
                 num_devices=None):
    """Pre-train `hp` on `train_files` into `model_dir` on JAX; returns the run summary."""
    import keras
    if keras.backend.backend() != "jax":
        raise TrainingError("pretrain_jax needs KERAS_BACKEND=jax")
    if hp.precision == "mixed_float16":
        raise TrainingError("precision mixed_float16 (loss scaling) is TensorFlow-only so "
                               "far; use bf16 or fp32 on JAX")
    # bf16: bfloat16 compute, float32 weights and optimizer state (no loss scaling needed).
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if hp.precision == "bf16" else "float32")
    started = time.time()
    replicas = use_devices(num_devices, log)
    if hp.train_batch_size % replicas:
        raise TrainingError(f"train_batch_size {hp.train_batch_size} is not divisible by the "
                               f"{replicas} devices")
    pretrainer, optimizer, schedule = build(hp, vocab_size, special_ids)
    fileio.makedirs(model_dir)
    hp.to_json(os.path.join(model_dir, "hparams.json"))
    num_params = int(sum(np.prod(v.shape) for v in pretrainer.trainable_variables))
    log(f"{hp.model_name}: {hp.model_size} ConvBERT, {num_params:,} trainable parameters "
        f"(discriminator + generator); JAX, {replicas} device(s); batch "
        f"{hp.train_batch_size} x {hp.max_seq_length}; {hp.num_train_steps} steps")

    if hp.steps_per_loop > 1:
        log(f"note: steps_per_loop={hp.steps_per_loop} is not implemented on JAX; every step is "
            "one jitted call (host round-trip per step)")

    def make_batches(skip_batches):
        return pretraining_batches(train_files, hp.train_batch_size, hp.max_seq_length,
                                   seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                   skip_batches=skip_batches)

    core = JaxTrainingCore(train_settings(hp), log=log)
    return core.fit(pretrainer, optimizer, schedule, loss_and_metrics, make_batches,
                    summarize=lambda sums, steps: window.summarize(hp, sums),
                    describe=window.describe,
                    checkpoint_dir=os.path.join(model_dir, CHECKPOINT_DIR),
                    export=lambda: export(pretrainer, model_dir),
                    summary_path=os.path.join(model_dir, SUMMARY_FILE),
                    summary_extra={"model_name": hp.model_name, "model_size": hp.model_size,
                                   "model_dir": model_dir, "max_seq_length": hp.max_seq_length,
                                   "discriminator": os.path.join(model_dir, "discriminator"),
                                   "generator": os.path.join(model_dir, "generator")},
                    started_at=started)
