"""Framework-neutral evaluation of a replaced-token-detection (RTD) run on one fixed held-out batch.

The metrics a pre-training run logs are measured on the batch it just trained on, against the
*current* generator's replacements, so two runs (ours in Keras, a PyTorch reference) cannot be
compared through them. This module fixes everything but the models:

    batch = heldout_batch(files)    # the first 256 records, masked once (seed 1234)
    metrics = evaluate(batch, gen_logits_fn, disc_logits_fn)    # the same noise for every run

* `electra_mask` is ELECTRA's `pretrain_helpers.mask` in NumPy, written independently of
  pretrain/masking.py: candidates are the input_mask tokens except [CLS]/[SEP]/[MASK];
  num_to_predict = max(1, min(N, round_half_even(sum(input_mask) * mask_prob))); N positions are
  drawn uniformly among the candidates with replacement, slots beyond num_to_predict get weight 0,
  position 0 and id 0; 85% of the chosen slots write [MASK], 15% leave the token (no random token).
  An example without any candidate gets weight 0 in every slot (ELECTRA samples from an all -inf
  distribution there).
* `evaluate` takes plain functions (NumPy in, float32 NumPy out), so the same code scores a Keras
  run (`keras_fns`, `evaluate_checkpoints`) and a PyTorch one (benchmarks/rtd_reference.py):
  generator accuracy / loss at the masked slots; a Gumbel-max sample (noise from
  `np.random.default_rng([seed, chunk_index])`) written at every weighted position; labels =
  sampled != original there; discriminator ROC AUC and accuracy over all input_mask tokens
  ([CLS]/[SEP] included, as ELECTRA's loss). It is `corrupt` (the generator's half) followed by
  `discriminate`, so one corruption can score many discriminators: `evaluate_checkpoints` also
  scores every checkpoint against the last generator's replacements (`disc_auc_last_gen`).

NumPy only; TensorFlow is imported only to read TFRecords and, in `keras_fns` /
`evaluate_checkpoints`, to run our Keras pre-trainer.
"""
import json
import os

import numpy as np

FEATURES = ("input_ids", "input_mask", "segment_ids")
BERT_SPECIAL_IDS = {"cls_id": 101, "sep_id": 102, "mask_id": 103}
REPLACE_WITH_MASK_PROB = 0.85


class EvalError(ValueError):
    """Bad input (no hparams.json, no checkpoints, too few records); the message is one line."""


# ------------------------------------------------------------------------------------ masking
def electra_mask(input_ids, input_mask, rng, mask_prob=0.15, max_predictions_per_seq=19,
                 cls_id=101, sep_id=102, mask_id=103):
    """ELECTRA's dynamic masking of a [B, T] batch with the NumPy Generator `rng`.

    Returns int32 masked_input_ids [B, T], masked_lm_positions [B, N], masked_lm_ids [B, N] and
    float32 masked_lm_weights [B, N] (N = max_predictions_per_seq).
    """
    ids = np.asarray(input_ids, np.int32)
    mask = np.asarray(input_mask, np.int32)
    batch, n = ids.shape[0], int(max_predictions_per_seq)
    candidates = (mask == 1) & (ids != cls_id) & (ids != sep_id) & (ids != mask_id)
    num_candidates = candidates.sum(axis=1)

    # float32 product and round-half-to-even, as tf.round(tf.cast(sum, float32) * mask_prob).
    num_tokens = mask.sum(axis=1).astype(np.float32)
    count = np.round(num_tokens * np.float32(mask_prob)).astype(np.int32)
    num_to_predict = np.maximum(1, np.minimum(n, count))
    weights = (np.arange(n)[None, :] < num_to_predict[:, None]) & (num_candidates[:, None] > 0)

    # Uniform draws with replacement: the k-th candidate of each row (candidates sorted first).
    k = rng.integers(0, np.maximum(num_candidates, 1)[:, None], size=(batch, n))
    candidate_order = np.argsort(~candidates, axis=1, kind="stable")
    positions = np.take_along_axis(candidate_order, k, axis=1).astype(np.int32) * weights
    lm_ids = np.take_along_axis(ids, positions, axis=1) * weights

    # 85% of the chosen slots write [MASK]; duplicates and position 0 never add anything else.
    to_mask = (rng.random((batch, n)) < REPLACE_WITH_MASK_PROB) & weights & (positions > 0)
    rows, slots = np.nonzero(to_mask)
    masked = ids.copy()
    masked[rows, positions[rows, slots]] = mask_id
    return {"masked_input_ids": masked, "masked_lm_positions": positions.astype(np.int32),
            "masked_lm_ids": lm_ids.astype(np.int32),
            "masked_lm_weights": weights.astype(np.float32)}


def write_samples(input_ids, sampled, positions, weights):
    """Fake ids: `input_ids` with `sampled[b, j]` written at positions[b, j] for weight > 0 slots.

    Position 0 is never written; of several slots at one position one sample is kept. Returns
    (fake_ids [B, T] int32, written [B, T] bool).
    """
    fake = np.array(input_ids, np.int32, copy=True)
    positions = np.asarray(positions)
    chosen = (np.asarray(weights) > 0) & (positions > 0)
    rows, slots = np.nonzero(chosen)
    fake[rows, positions[rows, slots]] = np.asarray(sampled)[rows, slots]
    written = np.zeros(fake.shape, bool)
    written[rows, positions[rows, slots]] = True
    return fake, written


def gumbel_noise(u):
    """ELECTRA's noise -log(-log(u + 1e-9) + 1e-9)."""
    return -np.log(-np.log(u + 1e-9) + 1e-9)


# ------------------------------------------------------------------------------------ data
def find_files(files):
    """A list of paths (kept in its order), or glob(s) -> sorted shard paths (find_shards)."""
    from data.tfrecord_io import find_shards
    if isinstance(files, (list, tuple)) and not any(set("*?[") & set(str(f)) for f in files):
        return [str(f) for f in files]
    return find_shards(files)


def read_examples(files, num_examples, max_seq_length):
    """The first `num_examples` records of `files` (in file order) -> dict of int32 [n, T]."""
    import tensorflow as tf
    from data.shard_writer import FEATURE_NAMES
    files = find_files(files)
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}
    ds = tf.data.TFRecordDataset(files).take(num_examples).batch(num_examples)
    out = {name: np.zeros((0, max_seq_length), np.int32) for name in FEATURE_NAMES}
    for records in ds:
        parsed = tf.io.parse_example(records, spec)
        out = {name: parsed[name].numpy().astype(np.int32) for name in FEATURE_NAMES}
    if len(out["input_ids"]) < num_examples:
        raise EvalError(f"only {len(out['input_ids'])} records in {', '.join(files)}, "
                        f"{num_examples} requested")
    return out


def heldout_batch(files, num_examples=256, max_seq_length=128, seed=1234, mask_prob=0.15,
                  max_predictions_per_seq=19, cls_id=101, sep_id=102, mask_id=103):
    """The fixed held-out batch: the first records of `files`, masked once with `seed`."""
    return masked_heldout(read_examples(files, num_examples, max_seq_length), seed, mask_prob,
                          max_predictions_per_seq, cls_id, sep_id, mask_id)


def masked_heldout(examples, seed=1234, mask_prob=0.15, max_predictions_per_seq=19, cls_id=101,
                   sep_id=102, mask_id=103):
    """`examples` ({input_ids, input_mask, segment_ids} [n, T], already read: the GPU bundle's
    arrays) masked once with `seed`: the held-out batch `heldout_batch` makes of shards."""
    batch = {name: np.asarray(examples[name], np.int32) for name in FEATURES}
    batch.update(electra_mask(batch["input_ids"], batch["input_mask"], np.random.default_rng(seed),
                              mask_prob, max_predictions_per_seq, cls_id, sep_id, mask_id))
    return batch


# ------------------------------------------------------------------------------------ metrics
def roc_auc(labels, scores):
    """sklearn's ROC AUC (ties count 1/2); nan when only one class is present."""
    from sklearn.metrics import roc_auc_score
    labels = np.asarray(labels).reshape(-1).astype(int)
    if labels.size == 0 or labels.min() == labels.max():
        return float("nan")
    return float(roc_auc_score(labels, np.asarray(scores, np.float64).reshape(-1)))


def _log_softmax(logits):
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def evaluate(batch, gen_logits_fn, disc_logits_fn, temperature=1.0, seed=4321, chunk=32):
    """Generator and discriminator metrics on a `heldout_batch` (see the module docstring).

    gen_logits_fn(masked_input_ids, input_mask, segment_ids, masked_lm_positions) -> [b, N, V];
    disc_logits_fn(fake_ids, input_mask, segment_ids) -> [b, T]; NumPy in, NumPy out.
    """
    corrupted = corrupt(batch, gen_logits_fn, temperature, seed, chunk)
    return {"gen_accuracy": corrupted["gen_accuracy"], "gen_loss": corrupted["gen_loss"],
            **discriminate(batch, corrupted, disc_logits_fn, chunk)}


def corrupt(batch, gen_logits_fn, temperature=1.0, seed=4321, chunk=32):
    """The generator's replacements of a `heldout_batch`: {"fake_ids" [B, T], "labels" [B, T]
    (replaced and different from the original), "gen_accuracy", "gen_loss"}.

    Gumbel-max samples with the same noise for every run (`np.random.default_rng([seed, i])` for
    the i-th chunk), so two generators differ only by their logits."""
    size = len(batch["input_ids"])
    gen_correct = gen_loss = gen_weight = 0.0
    fakes, labels_all = [], []
    for index, start in enumerate(range(0, size, chunk)):
        part = {k: np.asarray(v)[start:start + chunk] for k, v in batch.items()}
        ids, mask, segments = part["input_ids"], part["input_mask"], part["segment_ids"]
        positions, lm_ids = part["masked_lm_positions"], part["masked_lm_ids"]
        weights = part["masked_lm_weights"].astype(np.float64)

        logits = np.asarray(gen_logits_fn(part["masked_input_ids"], mask, segments, positions),
                            np.float32)
        log_probs = _log_softmax(logits)
        ce = -np.take_along_axis(log_probs, lm_ids[..., None].astype(np.int64), axis=-1)[..., 0]
        gen_loss += float(np.sum(weights * ce))
        gen_correct += float(np.sum(weights * (logits.argmax(-1) == lm_ids)))
        gen_weight += float(weights.sum())

        u = np.random.default_rng([seed, index]).random(logits.shape, dtype=np.float32)
        sampled = np.argmax(logits / np.float32(temperature) + gumbel_noise(u), axis=-1)
        fake, written = write_samples(ids, sampled, positions, weights)
        fakes.append(fake)
        labels_all.append(written & (fake != ids))
    return {"fake_ids": np.concatenate(fakes), "labels": np.concatenate(labels_all),
            "gen_accuracy": gen_correct / max(gen_weight, 1e-6),
            "gen_loss": gen_loss / max(gen_weight, 1e-6)}


def discriminate(batch, corrupted, disc_logits_fn, chunk=32):
    """Discriminator ROC AUC and accuracy on `corrupt`'s fake ids, over all input_mask tokens
    ([CLS]/[SEP] included, as ELECTRA's loss), and the fraction of them replaced."""
    labels_all, scores_all = [], []
    for start in range(0, len(batch["input_ids"]), chunk):
        mask = np.asarray(batch["input_mask"])[start:start + chunk]
        segments = np.asarray(batch["segment_ids"])[start:start + chunk]
        disc_logits = np.asarray(disc_logits_fn(corrupted["fake_ids"][start:start + chunk], mask,
                                                segments), np.float32)
        real = mask == 1
        labels_all.append(corrupted["labels"][start:start + chunk][real])
        scores_all.append(disc_logits[real])
    labels = np.concatenate(labels_all)
    scores = np.concatenate(scores_all)
    return {"disc_auc": roc_auc(labels, scores),
            "disc_accuracy": (float(np.mean((scores > 0) == labels)) if labels.size
                              else float("nan")),
            "replaced_fraction": float(np.mean(labels)) if labels.size else float("nan")}


# ------------------------------------------------------------------------------------ our runs
def keras_fns(pretrainer):
    """(gen_logits_fn, disc_logits_fn) of an `ElectraPretrainer`, inference mode."""
    from keras import ops
    from pretrain import masking
    if pretrainer.disc_head is None:
        raise EvalError("the run is a plain MLM (electra_objective false): no discriminator")

    def inputs(ids, mask, segments):
        return {"input_ids": ops.convert_to_tensor(np.asarray(ids, np.int32)),
                "input_mask": ops.convert_to_tensor(np.asarray(mask, np.int32)),
                "segment_ids": ops.convert_to_tensor(np.asarray(segments, np.int32))}

    def gen_logits_fn(masked_ids, mask, segments, positions):
        hidden = pretrainer.generator(inputs(masked_ids, mask, segments), training=False)
        gathered = masking.gather_positions(hidden, ops.convert_to_tensor(
            np.asarray(positions, np.int32)))
        logits = pretrainer.mlm_head(gathered)
        return np.asarray(ops.convert_to_numpy(ops.cast(logits, "float32")), np.float32)

    def disc_logits_fn(fake_ids, mask, segments):
        hidden = pretrainer.discriminator(inputs(fake_ids, mask, segments), training=False)
        logits = pretrainer.disc_head(hidden)
        return np.asarray(ops.convert_to_numpy(ops.cast(logits, "float32")), np.float32)

    return gen_logits_fn, disc_logits_fn


def jax_fns(pretrainer):
    """`keras_fns` compiled on Keras-on-JAX: the same two functions, each one jitted call over
    the pre-trainer's current variable values (read at every call, so they follow training), or
    over `values=` (a `snapshot` taken earlier: one fixed corruption, many discriminators).
    Each has `precompile_job(*example_args)` for training/jax_core.precompile."""
    import jax
    import keras
    from pretrain import masking
    from training.jax_core import PrecompilableStep
    if pretrainer.disc_head is None:
        raise EvalError("the run is a plain MLM (electra_objective false): no discriminator")
    variables = list(pretrainer.trainable_variables) + list(pretrainer.non_trainable_variables)

    def scoped(fn):
        @jax.jit
        def run(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args).astype("float32")
        step = PrecompilableStep(run)

        def call(*args, values=None):
            return np.asarray(step(*arguments(args, values)))

        def arguments(args, values=None):
            values = [v.value for v in variables] if values is None else values
            return (values, *(np.asarray(a, np.int32) for a in args))

        # (step, its arguments for `args`): a job for training/jax_core.precompile
        call.precompile_job = lambda *args: (step, arguments(args))
        return call

    def inputs(ids, mask, segments):
        return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}

    def gen_logits(masked_ids, mask, segments, positions):
        hidden = pretrainer.generator(inputs(masked_ids, mask, segments), training=False)
        return pretrainer.mlm_head(masking.gather_positions(hidden, positions))

    def disc_logits(fake_ids, mask, segments):
        hidden = pretrainer.discriminator(inputs(fake_ids, mask, segments), training=False)
        return pretrainer.disc_head(hidden)

    return scoped(gen_logits), scoped(disc_logits)


def snapshot(pretrainer):
    """The pre-trainer's current variable values, in `jax_fns`' order (JAX arrays are immutable:
    a snapshot costs no copy)."""
    return [v.value for v in list(pretrainer.trainable_variables)
            + list(pretrainer.non_trainable_variables)]


def special_ids(vocab_file=None, hparams=None):
    """{cls_id, sep_id, mask_id}: from hparams if there, else from the vocab file, else BERT's."""
    if hparams and all(k in hparams for k in BERT_SPECIAL_IDS):
        return {k: int(hparams[k]) for k in BERT_SPECIAL_IDS}
    if vocab_file:
        from data.vocab import load_vocab
        index = {t: i for i, t in enumerate(load_vocab(vocab_file))}
        return {"cls_id": index["[CLS]"], "sep_id": index["[SEP]"], "mask_id": index["[MASK]"]}
    return dict(BERT_SPECIAL_IDS)


def load_hparams(model_dir):
    """The resolved PretrainingHParams of a run, from <model_dir>/hparams.json."""
    import tensorflow as tf
    from pretrain.hparams import make_hparams
    path = os.path.join(str(model_dir), "hparams.json")
    if not tf.io.gfile.exists(path):
        raise EvalError(f"no hparams.json in {model_dir} (not a pre-training run directory?)")
    with tf.io.gfile.GFile(path) as f:
        values = json.load(f)
    return make_hparams(overrides=values), values


def checkpoint_paths(model_dir):
    """[(step, path)] of the checkpoints in <model_dir>/checkpoints, sorted by step."""
    import tensorflow as tf
    from pretrain.task import CHECKPOINT_DIR
    directory = os.path.join(str(model_dir), CHECKPOINT_DIR)
    state = tf.train.get_checkpoint_state(directory) if tf.io.gfile.isdir(directory) else None
    paths = list(state.all_model_checkpoint_paths) if state else []
    if not paths:
        raise EvalError(f"no checkpoints in {directory}")
    return sorted((int(p.rsplit("-", 1)[-1]), p) for p in paths)


def evaluate_checkpoints(model_dir, batch, every=None, vocab_file=None, temperature=None,
                         log=None):
    """[{"step": N, **evaluate(...), "disc_auc_last_gen": ...}] for every checkpoint of our run
    (every `every` steps).

    `disc_auc` scores each discriminator against its own generator's replacements, so it falls
    whenever the generator gets better. `disc_auc_last_gen` scores it against one fixed
    corruption, the last checkpoint's generator's, so it moves only with the discriminator (at
    the last checkpoint the two are equal)."""
    import tensorflow as tf
    from pretrain.task import make_core
    hp, values = load_hparams(model_dir)
    checkpoints = checkpoint_paths(model_dir)
    last_path = checkpoints[-1][1]
    if every:
        checkpoints = [(s, p) for s, p in checkpoints if s % every == 0]
    task, core = make_core(hp, [], tf.distribute.get_strategy(), hp.vocab_size,
                           log=log or (lambda *_: None),
                           special_ids=special_ids(vocab_file, values))
    gen_fn, disc_fn = keras_fns(task.pretrainer)
    temperature = hp.temperature if temperature is None else temperature
    core.checkpoint.restore(last_path).expect_partial()
    last_corruption = corrupt(batch, gen_fn, temperature)
    results = []
    for step, path in checkpoints:
        core.checkpoint.restore(path).expect_partial()
        results.append({"step": step, **evaluate(batch, gen_fn, disc_fn, temperature),
                        "disc_auc_last_gen": discriminate(batch, last_corruption,
                                                          disc_fn)["disc_auc"]})
        if log:
            log(f"step {step}: " + ", ".join(
                f"{k} {v:.4f}" for k, v in results[-1].items() if k != "step"))
    return results
