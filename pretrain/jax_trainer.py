"""Pre-training on Keras-on-JAX, without TensorFlow: the GPU machine's path and a TPU VM's second
runtime (`KERAS_BACKEND=jax`).

    KERAS_BACKEND=jax python run_pretraining.py --pretrain_tfrecords='shards/*' \
        --vocab_file=vocab.txt --model_size=small --model_dir=runs/small_jax

The same task as on TensorFlow (pretrain/task.py `PretrainingTask`: the `ElectraPretrainer`,
its loss denominators, window metrics and exports, keras.ops only), the same optimizer and
settings (training/settings.py, `pretrain.hparams.train_settings`), trained by the JAX training
core (training/jax_core.py: `steps_per_loop` steps per compiled call with the state donated and
the learning rate computed on the device, input prefetched to the device, DataParallel over the
local devices, safetensors checkpoints with exact resume, the progress line and summary, and
TensorBoard scalars in `<model_dir>/train/` as on TensorFlow: loss, gen_loss, gen_accuracy,
disc_loss, disc_accuracy, disc_auc, learning_rate, grad_norm, sequences_per_second, written by
training/summaries.py without TensorFlow). The input is the task's `host_batches`: our TFRecord
shards read by `data/tfrecord_io.py`, no tf.data. On an accelerator set `--steps_per_loop` to
the log interval (one host read per log line).

Several hosts (processes): the driver's `--distribution=multi_worker` / `--coordinator_address`
join them on JAX's runtime (training/jax_distribution.py `start_processes`) before this runs; the
devices of every process make one DataParallel, each process reads its own share of the TFRecord
files (hparam `input_shares`, pretrain/task.py `host_batches`) and process 0 alone writes
`model_dir`.

Precision: fp32 or bf16 (mixed_bfloat16: bf16 compute, fp32 weights). Not here (TensorFlow path
only): mixed_float16 (loss scaling), sequence-length phases.
Embedding gradients are dense on JAX, so the clip norm counts a token seen twice once (the TF
path keeps IndexedSlices and counts it twice, as the official code): a rounding-level difference
at clip time.
"""
import os
import time

from base import fileio
from pretrain.hparams import train_settings
from pretrain.task import PretrainingTask, write_vocabulary
from training.jax_core import JaxTrainingCore
from training.jax_distribution import check_batch_size, is_writer, use_devices
from training.loop import TrainingError

CHECKPOINT_DIR = "jax_checkpoints"
SUMMARY_FILE = "pretraining_summary.json"
LOG_DIR = "train"        # TensorBoard, as pretrain/task.py's `<model_dir>/train`
__all__ = ["pretrain_jax", "pretraining_core"]


def pretraining_core(hp, train_files, vocab_size, special_ids=None, log=print, task=None):
    """(task, core): a PretrainingTask (or `task`, e.g. a subclass with other input) built on a
    JaxTrainingCore under the current distribution. The core's program takes the schedule as
    an argument, so it does not depend on the run's length."""
    if task is None:
        task = PretrainingTask(hp, train_files, vocab_size, special_ids)
    core = JaxTrainingCore(train_settings(hp), log=log).build(task)
    return task, core


def pretrain_jax(hp, model_dir, train_files, vocab_size, special_ids=None, log=print,
                 num_devices=None, vocab_file=None, sp_model=None):
    """Pre-train `hp` on `train_files` into `model_dir` on JAX; returns the run summary.
    vocab_file / sp_model: the shards' vocabulary, copied into `model_dir` as on TensorFlow
    (pretrain/task.py write_vocabulary).
    num_devices: how many local devices (None: all; training/jax_distribution.py `jax_num_devices`
    reads it from the driver's --distribution flags)."""
    import jax
    import keras
    if keras.backend.backend() != "jax":
        raise TrainingError("pretrain_jax needs KERAS_BACKEND=jax")
    started = time.time()
    replicas = use_devices(num_devices, log)
    check_batch_size(hp.train_batch_size)
    task = PretrainingTask(hp, train_files, vocab_size, special_ids)
    shares = task.input_shares(jax.process_count())   # files / processes: before any model
    task, core = pretraining_core(hp, train_files, vocab_size, special_ids, log, task=task)
    if is_writer():     # process 0 of several writes; the others read the checkpoints
        fileio.makedirs(model_dir)
        hp.to_json(os.path.join(model_dir, "hparams.json"))
        write_vocabulary(model_dir, vocab_file, sp_model)
    processes = jax.process_count()
    log(f"{hp.model_name}: {hp.model_size} ConvBERT, {core.num_params:,} trainable parameters "
        f"(discriminator + generator); JAX, {replicas} device(s)"
        + (f" over {processes} processes" if processes > 1 else "")
        + (f", the input in {shares} shares" if shares > 1 else "") + "; batch "
        f"{hp.train_batch_size} x {hp.max_seq_length}; precision {hp.precision}; "
        f"{hp.num_train_steps} steps")
    return core.fit_task(
        checkpoint_dir=os.path.join(model_dir, CHECKPOINT_DIR), export_dir=model_dir,
        summary_path=os.path.join(model_dir, SUMMARY_FILE),
        log_dir=os.path.join(model_dir, LOG_DIR),
        summary_extra={"model_name": hp.model_name, "model_size": hp.model_size,
                       "model_dir": model_dir, "max_seq_length": hp.max_seq_length,
                       "discriminator": os.path.join(model_dir, "discriminator"),
                       "generator": os.path.join(model_dir, "generator")},
        started_at=started)
