"""Pre-training on Keras-on-JAX, without TensorFlow: the GPU machine's path and a TPU VM's second
runtime (`KERAS_BACKEND=jax`).

    KERAS_BACKEND=jax python run_pretraining.py --pretrain_tfrecords='shards/*' \
        --vocab_file=vocab.txt --model_size=small --model_dir=runs/small_jax

The objective is the same `ElectraPretrainer` (keras.ops only) and the optimizer the same
`AdamWeightDecay` with ELECTRA's schedule as on TensorFlow; what differs is the plumbing, which
TensorFlow's training core (training/core.py) cannot provide here:

* input: our TFRecord shards read by `data/tfrecord_io.py` (numpy; no tf.data);
* the step: `stateless_call` + `jax.value_and_grad` + `optimizer.stateless_apply`, one `jax.jit`;
  the masking / sampling / dropout randomness is state the step threads through;
* devices: `keras.distribution.DataParallel` over every local device (GPUs, TPU cores, or
  `XLA_FLAGS=--xla_force_host_platform_device_count=N` CPUs): each global batch is sharded along
  its batch axis and the step is one SPMD program, so N devices compute the one-device loss;
* state: `<model_dir>/jax_checkpoints/ckpt-<step>.safetensors` (every variable, the optimizer's
  and the RNG's included, plus the step and examples counters), written atomically, keep-N, and
  restored on a rerun (exact resume: the data stream skips the batches already consumed);
* outputs: the progress line (training/progress.py), `pretraining_summary.json`, and the
  `discriminator/` + `generator/` exports that fine-tuning and `from_pretrained` read.

Precision: fp32 or bf16 (mixed_bfloat16: bf16 compute, fp32 weights). Not here yet (TensorFlow
path only): TensorBoard scalars, mixed_float16 (loss scaling), multi-host. Embedding gradients are dense on JAX, so the clip norm counts a token seen twice once
(the TF path keeps IndexedSlices and counts it twice, as the official code): a rounding-level
difference at clip time.
"""
import json
import os
import time

import numpy as np

from data.tfrecord_io import pretraining_batches
from model import fileio
from pretrain.hparams import model_config
from training.progress import StepRate, format_duration

CHECKPOINT_DIR = "jax_checkpoints"
SUMMARY_FILE = "pretraining_summary.json"
AUC_BINS = 200


class JaxTrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, unreadable checkpoint); one-line message."""


def _auc(pos, neg):
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float(np.sum(pos * (below + 0.5 * neg)) / (pos.sum() * neg.sum()))


def _distribution(num_devices, log):
    import jax
    import keras
    devices = jax.devices()
    if num_devices:
        if num_devices > len(devices):
            raise JaxTrainingError(f"{num_devices} devices asked for, {len(devices)} present")
        devices = devices[:num_devices]
    if len(devices) > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    log(f"JAX: {len(devices)} {devices[0].platform} device(s)"
        + (" (DataParallel)" if len(devices) > 1 else ""))
    return len(devices)


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


def make_train_step(pretrainer, optimizer):
    """The jitted step: (state, batch, step) -> (state, metric sums); state = (trainable,
    non-trainable, optimizer variables)."""
    import jax
    import jax.numpy as jnp

    def loss_fn(trainable, non_trainable, batch, step):
        out, non_trainable = pretrainer.stateless_call(trainable, non_trainable, batch,
                                                       step=step, training=True)
        mask = batch["input_mask"].astype(jnp.float32)
        probs = out["disc_probs"].astype(jnp.float32)
        labels = out["disc_labels"].astype(jnp.float32)
        bins = jnp.clip((probs * AUC_BINS).astype(jnp.int32), 0, AUC_BINS - 1).reshape(-1)
        w_gen = out["gen_weight_sum"].astype(jnp.float32)
        w_disc = out["disc_weight_sum"].astype(jnp.float32)
        metrics = {
            "gen_loss": out["gen_loss_sum"], "gen_weight": w_gen,
            "gen_accuracy": out["gen_accuracy"].astype(jnp.float32) * w_gen,
            "disc_loss": out["disc_loss_sum"].astype(jnp.float32), "disc_weight": w_disc,
            "disc_accuracy": out["disc_accuracy"].astype(jnp.float32) * w_disc,
            "auc_pos": jax.ops.segment_sum((labels * mask).reshape(-1), bins, AUC_BINS),
            "auc_neg": jax.ops.segment_sum(((1.0 - labels) * mask).reshape(-1), bins, AUC_BINS),
        }
        loss = out["total_loss"].astype(jnp.float32)
        metrics["loss"] = loss
        return loss, (metrics, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    @jax.jit
    def train_step(state, batch, step):
        trainable, non_trainable, optimizer_vars = state
        (_, (metrics, non_trainable)), grads = grad_fn(trainable, non_trainable, batch, step)
        metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in grads))
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return (trainable, non_trainable, optimizer_vars), metrics

    return train_step


def _state_names(pretrainer, optimizer):
    groups = (("trainable", pretrainer.trainable_variables),
              ("non_trainable", pretrainer.non_trainable_variables),
              ("optimizer", optimizer.variables))
    return [[f"{group}/{i}/{v.path}" for i, v in enumerate(variables)]
            for group, variables in groups]


def save_checkpoint(directory, state, step, examples, names, keep):
    """All of `state` as one safetensors file (no pickle), atomically; keeps the last `keep`."""
    from safetensors.numpy import save
    tensors = {"step": np.asarray([step], np.int64), "examples": np.asarray([examples], np.int64)}
    for group_names, values in zip(names, state):
        for name, value in zip(group_names, values):
            tensors[name] = np.asarray(value)
    fileio.makedirs(directory)
    path = os.path.join(directory, f"ckpt-{step}.safetensors")
    fileio.write_bytes_atomic(path, save(tensors))
    for old in _checkpoints(directory)[:-keep]:
        fileio.remove(old[1])
    return path


def _checkpoints(directory):
    found = []
    for path in fileio.glob(os.path.join(directory, "ckpt-*.safetensors")):
        stem = os.path.basename(path)[len("ckpt-"):-len(".safetensors")]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def restore_checkpoint(directory, names, state):
    """(state, step, examples, path) from the newest checkpoint of `directory`, or None."""
    from safetensors.numpy import load
    found = _checkpoints(directory) if fileio.isdir(directory) else []
    if not found:
        return None
    path = found[-1][1]
    try:
        tensors = load(fileio.read_bytes(path))
        restored = tuple([tensors[n].astype(np.asarray(v).dtype).reshape(np.shape(v))
                          for n, v in zip(group_names, values)]
                         for group_names, values in zip(names, state))
    except Exception as e:  # noqa: BLE001 -- a model of another shape, a damaged file
        raise JaxTrainingError(f"cannot restore {path}: {str(e).splitlines()[0]}") from None
    return restored, int(tensors["step"][0]), int(tensors["examples"][0]), path


def _assign(pretrainer, optimizer, state):
    trainable, non_trainable, optimizer_vars = state
    for variables, values in ((pretrainer.trainable_variables, trainable),
                              (pretrainer.non_trainable_variables, non_trainable),
                              (optimizer.variables, optimizer_vars)):
        for variable, value in zip(variables, values):
            variable.assign(value)


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
    import jax
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
    replicas = _distribution(num_devices, log)
    if hp.train_batch_size % replicas:
        raise JaxTrainingError(f"train_batch_size {hp.train_batch_size} is not divisible by the "
                               f"{replicas} devices")
    pretrainer, optimizer, schedule = build(hp, vocab_size, special_ids)
    state = ([v.value for v in pretrainer.trainable_variables],
             [v.value for v in pretrainer.non_trainable_variables],
             [v.value for v in optimizer.variables])
    names = _state_names(pretrainer, optimizer)
    checkpoint_dir = os.path.join(model_dir, CHECKPOINT_DIR)
    step = examples = 0
    restored = restore_checkpoint(checkpoint_dir, names, state)
    if restored is not None:
        state, step, examples, path = restored
        log(f"resumed from {path} at step {step}")
    fileio.makedirs(model_dir)
    hp.to_json(os.path.join(model_dir, "hparams.json"))
    num_params = int(sum(np.prod(v.shape) for v in pretrainer.trainable_variables))
    log(f"{hp.model_name}: {hp.model_size} ConvBERT, {num_params:,} trainable parameters "
        f"(discriminator + generator); JAX {jax.default_backend()}, {replicas} device(s); batch "
        f"{hp.train_batch_size} x {hp.max_seq_length}; steps {step} -> {hp.num_train_steps}")
    batches = pretraining_batches(train_files, hp.train_batch_size, hp.max_seq_length,
                                  seed=hp.seed, shuffle_buffer=hp.shuffle_buffer,
                                  skip_batches=examples // hp.train_batch_size)
    train_step = make_train_step(pretrainer, optimizer)
    rate = StepRate(step, hp.num_train_steps)
    loop_start = time.time()
    history, window, window_steps, window_start = [], None, 0, time.time()
    last_saved = restored[3] if restored else None
    start_step = step
    while step < hp.num_train_steps:
        batch = next(batches)
        state, metrics = train_step(state, batch, np.int64(step))
        values = {k: np.asarray(v) for k, v in metrics.items()}
        step += 1
        examples += hp.train_batch_size
        rate.step_done(step)
        if not np.isfinite(values["loss"]):
            raise JaxTrainingError(
                f"non-finite loss ({float(values['loss'])}) at step {step}: stopped without "
                f"saving; the last good checkpoint is {last_saved or 'none'}")
        window = values if window is None else {k: window[k] + values[k] for k in window}
        window_steps += 1
        if step % hp.log_every_n_steps == 0 or step == hp.num_train_steps:
            now = time.time()
            record = _record(hp, step, window, window_steps, now - window_start, schedule)
            history.append(record)
            log(f"step {step}/{hp.num_train_steps} ({100.0 * step / hp.num_train_steps:.1f}%) | "
                f"loss {record['loss']:.4f} | gen loss {record['gen_loss']:.4f} acc "
                f"{record['gen_accuracy']:.3f} | disc loss {record['disc_loss']:.4f} acc "
                f"{record['disc_accuracy']:.3f} auc {record['disc_auc']:.3f} | lr "
                f"{record['learning_rate']:.3g} | {record['sequences_per_second']:.1f} seq/s | "
                f"elapsed {format_duration(rate.elapsed())} | ETA "
                f"{format_duration(rate.eta(step))}")
            window, window_steps, window_start = None, 0, now
        if step % hp.save_checkpoints_steps == 0 or step == hp.num_train_steps:
            last_saved = save_checkpoint(checkpoint_dir, state, step, examples, names,
                                         hp.keep_checkpoint_max)
    _assign(pretrainer, optimizer, state)
    export(pretrainer, model_dir)
    train_seconds = time.time() - loop_start
    first = rate.first_step_seconds
    steps_run = step - start_step
    summary = {
        "global_step": step, "resumed_from_step": start_step, "steps_this_run": steps_run,
        "train_batch_size": hp.train_batch_size, "precision": hp.precision,
        "distribution": f"JAX {jax.default_backend()} x{replicas}", "backend": "jax",
        "trainable_parameters": num_params, "last_checkpoint": last_saved,
        "wall_seconds": round(time.time() - started, 2), "train_seconds": round(train_seconds, 2),
        "first_step_seconds": round(first, 2),
        "sequences_per_second": round(steps_run * hp.train_batch_size /
                                      max(train_seconds - first, 1e-9), 2)
        if steps_run > 1 else 0.0,
        "first": history[0] if history else None, "final": history[-1] if history else None,
        "history": history, "model_name": hp.model_name,
    }
    fileio.write_text_atomic(os.path.join(model_dir, SUMMARY_FILE),
                             json.dumps(summary, indent=2) + "\n")
    return summary


def _record(hp, step, sums, num_steps, seconds, schedule):
    gen_w = max(float(sums["gen_weight"]), 1e-6)
    disc_w = max(float(sums["disc_weight"]), 1e-6)
    gen, disc = float(sums["gen_loss"]) / gen_w, float(sums["disc_loss"]) / disc_w
    return {
        "step": step,
        "loss": hp.gen_weight * gen + hp.disc_weight * disc if hp.electra_objective else gen,
        "gen_loss": gen, "gen_accuracy": float(sums["gen_accuracy"]) / gen_w,
        "disc_loss": disc, "disc_accuracy": float(sums["disc_accuracy"]) / disc_w,
        "disc_auc": _auc(sums["auc_pos"], sums["auc_neg"]),
        "learning_rate": float(np.asarray(schedule(step - 1))),
        "grad_norm": float(sums["grad_norm"]) / num_steps,
        "sequences_per_second": num_steps * hp.train_batch_size / max(seconds, 1e-9),
    }


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
