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
from training.jax_core import JaxTrainingCore, JaxTrainingError, use_devices

CHECKPOINT_DIR = "jax_checkpoints"
SUMMARY_FILE = "pretraining_summary.json"
__all__ = ["JaxTrainingError", "pretrain_jax", "run_from_flags"]


def build(hp, vocab_size, special_ids=None):
    """(pretrainer, optimizer, schedule), built on the current distribution."""
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
        schedule, weight_decay_rate=hp.weight_decay_rate, clip_norm=hp.clip_norm, name_map=named)
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
        raise JaxTrainingError("pretrain_jax needs KERAS_BACKEND=jax")
    if hp.precision == "mixed_float16":
        raise JaxTrainingError("precision mixed_float16 (loss scaling) is TensorFlow-only so "
                               "far; use bf16 or fp32 on JAX")
    # bf16: bfloat16 compute, float32 weights and optimizer state (no loss scaling needed).
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if hp.precision == "bf16" else "float32")
    started = time.time()
    replicas = use_devices(num_devices, log)
    if hp.train_batch_size % replicas:
        raise JaxTrainingError(f"train_batch_size {hp.train_batch_size} is not divisible by the "
                               f"{replicas} devices")
    pretrainer, optimizer, schedule = build(hp, vocab_size, special_ids)
    fileio.makedirs(model_dir)
    hp.to_json(os.path.join(model_dir, "hparams.json"))
    num_params = int(sum(np.prod(v.shape) for v in pretrainer.trainable_variables))
    log(f"{hp.model_name}: {hp.model_size} ConvBERT, {num_params:,} trainable parameters "
        f"(discriminator + generator); JAX, {replicas} device(s); batch "
        f"{hp.train_batch_size} x {hp.max_seq_length}; {hp.num_train_steps} steps")

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
                    summary_extra={"model_name": hp.model_name}, started_at=started)


def _vocab_info(vocab_file=None, sp_model=None):
    """(size, {cls_id, sep_id, mask_id}) of a WordPiece vocab or a SentencePiece model, read
    without TensorFlow."""
    from data.errors import DataError
    if vocab_file:
        if not fileio.exists(vocab_file):
            raise DataError(f"--vocab_file {vocab_file} does not exist")
        tokens = [t.strip() for t in fileio.read_text(vocab_file).splitlines() if t.strip()]
        index = {t: i for i, t in enumerate(tokens)}
        source = vocab_file
    else:
        import sentencepiece as spm
        if not fileio.exists(sp_model):
            raise DataError(f"--sp_model {sp_model} does not exist")
        processor = spm.SentencePieceProcessor()
        processor.LoadFromSerializedProto(fileio.read_bytes(sp_model))
        tokens = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]
        index = {t: i for i, t in enumerate(tokens)}
        source = sp_model
    missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in index]
    if missing:
        raise DataError(f"{source} lacks the special token(s) {', '.join(missing)}")
    return len(tokens), {"cls_id": index["[CLS]"], "sep_id": index["[SEP]"],
                         "mask_id": index["[MASK]"]}


def run_from_flags(flag_values, flag_keys, log=print):
    """run_pretraining.py under KERAS_BACKEND=jax: the flags -> pretrain_jax. TensorFlow is
    never imported."""
    from data.errors import DataError
    from data.tfrecord_io import find_files
    from pretrain.hparams import make_hparams, parse_overrides
    for flag in ("distribution", "tpu", "tpu_zone", "gcp_project"):
        if getattr(flag_values, flag):
            raise JaxTrainingError(f"--{flag} is for TensorFlow; on JAX every local device is "
                                   "used (--num_cpu_devices=N splits the CPU)")
    if not (flag_values.pretrain_tfrecords or flag_values.data_dir):
        raise JaxTrainingError("the JAX path needs --pretrain_tfrecords or --data_dir (the demo "
                               "corpus is built with TensorFlow)")
    overrides = parse_overrides(flag_values.hparams)
    from_flags = {k: getattr(flag_values, k) for k in flag_keys
                  if getattr(flag_values, k) is not None}
    hp = make_hparams(None, overrides, from_flags)
    pattern = flag_values.pretrain_tfrecords or os.path.join(
        flag_values.data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*")
    files = find_files(pattern)
    vocab_file, sp_model = flag_values.vocab_file, flag_values.sp_model
    if vocab_file and sp_model:
        raise DataError("give --vocab_file or --sp_model, not both")
    if not (vocab_file or sp_model) and flag_values.data_dir:
        candidate = os.path.join(flag_values.data_dir, "vocab.txt")
        vocab_file = candidate if fileio.exists(candidate) else None
    special_ids = {}
    if vocab_file or sp_model:
        size, special_ids = _vocab_info(vocab_file, sp_model)
        if hp.vocab_size is not None and hp.vocab_size != size:
            raise DataError(f"{sp_model or vocab_file} has {size} tokens but the model config "
                            f"has vocab_size {hp.vocab_size}")
        hp.vocab_size = size
    elif hp.vocab_size is None:
        hp.vocab_size = 30522
    model_dir = flag_values.model_dir or (
        os.path.join(flag_values.data_dir, "models", hp.model_name) if flag_values.data_dir
        else os.path.join("runs", hp.model_name))
    summary = pretrain_jax(hp, model_dir, files, hp.vocab_size, special_ids, log=log)
    summary.update(model_dir=model_dir, discriminator=os.path.join(model_dir, "discriminator"))
    return summary
