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
  run (`keras_fns`, `evaluate_checkpoints`) and a PyTorch one (reproduce/rtd_reference.py):
  generator accuracy / loss at the masked slots; a Gumbel-max sample (noise from
  `np.random.default_rng([seed, chunk_index])`) written at every weighted position; labels =
  sampled != original there; discriminator ROC AUC and accuracy over all input_mask tokens
  ([CLS]/[SEP] included, as ELECTRA's loss). It is `corrupt` (the generator's half) followed by
  `discriminate`, so one corruption can score many discriminators: `evaluate_checkpoints` also
  scores every checkpoint against the last generator's replacements (`disc_auc_last_gen`).

* `device_scorer` (Keras-on-JAX) computes `evaluate` without sending the generator's
  vocabulary-wide logits to the host: the batch and the same Gumbel noise are uploaded once
  (`DeviceHeldout`), one jitted program returns [B, N] / [B, T] arrays, and the host turns them
  into the metrics with `evaluate`'s own code (`generator_sums`, `disc_metrics`): generator
  accuracy equal, the rest to float32 round-off (tests/pretrain/test_heldout_device.py). It also
  scores other discriminator values against one fixed corruption (`DeviceScorer.discriminate`).

NumPy only on the host path; TensorFlow is imported only to read TFRecords and, in `keras_fns` /
`evaluate_checkpoints`, to run our Keras pre-trainer; JAX only in `jax_fns` and the device scorer.
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
    totals = [0.0, 0.0, 0.0]       # generator_sums
    fakes, labels_all = [], []
    for index, start in enumerate(range(0, size, chunk)):
        part = {k: np.asarray(v)[start:start + chunk] for k, v in batch.items()}
        ids, mask, segments = part["input_ids"], part["input_mask"], part["segment_ids"]
        positions, lm_ids = part["masked_lm_positions"], part["masked_lm_ids"]
        weights = part["masked_lm_weights"]

        logits = np.asarray(gen_logits_fn(part["masked_input_ids"], mask, segments, positions),
                            np.float32)
        log_probs = _log_softmax(logits)
        ce = -np.take_along_axis(log_probs, lm_ids[..., None].astype(np.int64), axis=-1)[..., 0]
        totals = [t + x for t, x in zip(totals, generator_sums(logits.argmax(-1), ce, lm_ids,
                                                                weights))]

        noise = sampling_noise(seed, index, logits.shape)
        sampled = np.argmax(logits / np.float32(temperature) + noise, axis=-1)
        fake, written = write_samples(ids, sampled, positions, weights)
        fakes.append(fake)
        labels_all.append(written & (fake != ids))
    return {"fake_ids": np.concatenate(fakes), "labels": np.concatenate(labels_all),
            **generator_metrics(*totals)}


def sampling_noise(seed, index, shape):
    """The Gumbel noise of the `index`-th chunk of `shape` [b, N, V]: float32
    `gumbel_noise(np.random.default_rng([seed, index]).random(shape, dtype=float32))` (NumPy
    keeps float32 there: 1e-9 is a Python float)."""
    return gumbel_noise(np.random.default_rng([seed, index]).random(shape, dtype=np.float32))


def generator_sums(predicted, ce, lm_ids, weights):
    """(weighted count of correct predictions, weighted cross-entropy sum, weight sum) of some
    masked slots, in float64: `corrupt` adds them up chunk by chunk, `DeviceScorer` once."""
    weights = np.asarray(weights).astype(np.float64)
    return (float(np.sum(weights * (np.asarray(predicted) == np.asarray(lm_ids)))),
            float(np.sum(weights * np.asarray(ce, np.float64))), float(weights.sum()))


def generator_metrics(correct, loss, weight):
    """{"gen_accuracy", "gen_loss"} of `generator_sums` over the whole batch."""
    return {"gen_accuracy": correct / max(weight, 1e-6), "gen_loss": loss / max(weight, 1e-6)}


def discriminate(batch, corrupted, disc_logits_fn, chunk=32):
    """Discriminator ROC AUC and accuracy on `corrupt`'s fake ids, over all input_mask tokens
    ([CLS]/[SEP] included, as ELECTRA's loss), and the fraction of them replaced."""
    scores = []
    for start in range(0, len(batch["input_ids"]), chunk):
        mask = np.asarray(batch["input_mask"])[start:start + chunk]
        segments = np.asarray(batch["segment_ids"])[start:start + chunk]
        scores.append(np.asarray(disc_logits_fn(corrupted["fake_ids"][start:start + chunk], mask,
                                                segments), np.float32))
    return disc_metrics(corrupted["labels"], np.concatenate(scores), batch["input_mask"])


def disc_metrics(labels, disc_logits, input_mask):
    """`discriminate`'s metrics of discriminator logits [B, T] (float32) against replaced labels
    [B, T], over the input_mask tokens (row-major order, as every caller gathers them)."""
    real = np.asarray(input_mask) == 1
    labels = np.asarray(labels)[real]
    scores = np.asarray(disc_logits, np.float32)[real]
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
    over `values=` (a `snapshot` taken earlier: one fixed corruption, many discriminators). The
    host scorer's functions on JAX; a run scores on the device (`DeviceScorer`)."""
    import jax
    import keras
    from pretrain import masking
    if pretrainer.disc_head is None:
        raise EvalError("the run is a plain MLM (electra_objective false): no discriminator")
    variables = list(pretrainer.trainable_variables) + list(pretrainer.non_trainable_variables)

    def scoped(fn):
        @jax.jit
        def run(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args).astype("float32")

        def call(*args, values=None):
            values = [v.value for v in variables] if values is None else values
            return np.asarray(run(values, *(np.asarray(a, np.int32) for a in args)))
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


# ------------------------------------------------------------------------------------ on the device
class DeviceHeldout:
    """A `heldout_batch` on the JAX device, uploaded once: its arrays and the Gumbel noise of every
    chunk (`sampling_noise`, made on the host as `corrupt` makes it, float32), padded to whole
    chunks and shaped [chunks, chunk, ...]. Several `DeviceScorer`s (models with the same
    vocabulary) can share one: the noise is [B, N, V] float32 (~0.6 GB at 256 x 19 x 30,522).

    `batch` is the host batch itself (the host metrics read it); padded rows have input_mask 0 and
    weight 0 in every slot, and their outputs are dropped."""

    def __init__(self, batch, vocab_size, seed=4321, chunk=32):
        import jax
        self.batch = batch
        self.size = len(batch["input_ids"])
        self.chunk, self.seed, self.vocab_size = int(chunk), seed, int(vocab_size)
        self.chunks = max(1, -(-self.size // self.chunk))
        names = FEATURES + ("masked_input_ids", "masked_lm_positions", "masked_lm_ids",
                            "masked_lm_weights")
        self.arrays = {name: jax.device_put(self.chunked(batch[name])) for name in names}
        n = np.asarray(batch["masked_lm_positions"]).shape[1]
        noise = np.zeros((self.chunks, self.chunk, n, self.vocab_size), np.float32)
        for index, start in enumerate(range(0, self.size, self.chunk)):
            rows = min(self.chunk, self.size - start)
            noise[index, :rows] = sampling_noise(seed, index, (rows, n, self.vocab_size))
        self.arrays["noise"] = jax.device_put(noise)

    def chunked(self, array):
        """A host [B, ...] array -> [chunks, chunk, ...], zero-padded; float32 stays float32,
        anything else (ids, masks, labels) becomes int32."""
        array = np.asarray(array)
        if array.dtype != np.float32:
            array = array.astype(np.int32)
        padded = np.zeros((self.chunks * self.chunk,) + array.shape[1:], array.dtype)
        padded[:self.size] = array
        return padded.reshape((self.chunks, self.chunk) + array.shape[1:])

    def unchunked(self, array):
        """A device [chunks, chunk, ...] output -> host [B, ...] (the padded rows dropped)."""
        array = np.asarray(array)
        return array.reshape((-1,) + array.shape[2:])[:self.size]


def write_samples_device(input_ids, sampled, positions, weights):
    """`write_samples` in jax.numpy for one chunk: (fake_ids [b, T] int32, written [b, T] bool).

    NumPy's fancy assignment keeps the last of several slots at one position; a scatter with
    duplicate indices is unspecified, so of the slots at one position only the last chosen one
    is written and the others go to index T (out of range, dropped). Position 0 is never
    written."""
    import jax.numpy as jnp
    rows, length = input_ids.shape
    n = positions.shape[1]
    chosen = (weights > 0) & (positions > 0)
    later = jnp.arange(n)[None, :] > jnp.arange(n)[:, None]            # [j, k]: k after j
    superseded = jnp.any((positions[:, :, None] == positions[:, None, :]) & later[None]
                         & chosen[:, None, :], axis=-1)
    index = jnp.where(chosen & ~superseded, positions, length)
    row = jnp.arange(rows)[:, None]
    fake = input_ids.at[row, index].set(sampled.astype(input_ids.dtype), mode="drop")
    written = jnp.zeros(input_ids.shape, bool).at[row, index].set(True, mode="drop")
    return fake, written


class DeviceScorer:
    """`evaluate` of an `ElectraPretrainer` on Keras-on-JAX with the held-out batch kept on the
    device (`DeviceHeldout`): one jitted program over the pre-trainer's variable values runs the
    generator, its log-softmax (float32 here; `corrupt`'s is float64 on the host), the
    Gumbel-max sample (`logits / float32(temperature) + noise`, the host's float32 operation on
    the same values), the writing of the samples and the discriminator, chunk by chunk
    (`lax.map`, so memory stays that of one chunk). Only [B, N] and [B, T] arrays come back: the
    generator's argmax ids and cross-entropy per slot, the fake ids, the replaced labels and the
    discriminator logits; the host then computes the metrics with `evaluate`'s own code
    (`generator_sums`, `disc_metrics`), so generator accuracy equals `evaluate`'s and the rest
    agree to float32 round-off (tests/pretrain/test_heldout_device.py, on the CPU). That assumes
    the same logits as `jax_fns`' program: XLA compiles the same operations there and here, but
    may choose other kernels (a GPU's GEMM autotuning), which can flip a near-tie argmax.

        scorer = device_scorer(pretrainer, batch, temperature)
        metrics = scorer.evaluate()                       # = evaluate(batch, *jax_fns(pretrainer))
        last = scorer.corrupt()                           # one fixed corruption ...
        scorer.discriminate(last, values=snapshot_values)["disc_auc"]   # ... many discriminators

    `values=` (a `snapshot`) scores those values instead of the pre-trainer's current ones.
    `precompile_jobs()` gives both programs to training/jax_programs.precompile."""

    def __init__(self, pretrainer, heldout, temperature=1.0):
        import jax
        import keras
        from pretrain import masking
        from training.jax_programs import PrecompilableStep
        if pretrainer.disc_head is None:
            raise EvalError("the run is a plain MLM (electra_objective false): no discriminator")
        self.pretrainer, self.heldout = pretrainer, heldout
        self.batch = heldout.batch
        self.temperature = np.float32(temperature)
        self.variables = (list(pretrainer.trainable_variables)
                          + list(pretrainer.non_trainable_variables))
        variables = self.variables

        def inputs(ids, mask, segments):
            return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}

        def disc_logits(fake, mask, segments):
            hidden = pretrainer.discriminator(inputs(fake, mask, segments), training=False)
            return pretrainer.disc_head(hidden).astype("float32")

        def score_chunk(temperature, part):
            hidden = pretrainer.generator(inputs(part["masked_input_ids"], part["input_mask"],
                                                 part["segment_ids"]), training=False)
            logits = pretrainer.mlm_head(masking.gather_positions(
                hidden, part["masked_lm_positions"])).astype("float32")
            if logits.shape[-1] != heldout.vocab_size:
                raise EvalError(f"generator logits over {logits.shape[-1]} tokens, held-out noise "
                                f"over {heldout.vocab_size}")
            log_probs = jax.nn.log_softmax(logits, axis=-1)
            ce = -jax.numpy.take_along_axis(log_probs, part["masked_lm_ids"][..., None],
                                            axis=-1)[..., 0]
            sampled = jax.numpy.argmax(logits / temperature + part["noise"], axis=-1)
            fake, written = write_samples_device(part["input_ids"], sampled,
                                                 part["masked_lm_positions"],
                                                 part["masked_lm_weights"])
            return {"predicted": jax.numpy.argmax(logits, axis=-1).astype("int32"), "ce": ce,
                    "fake_ids": fake, "labels": written & (fake != part["input_ids"]),
                    "disc_logits": disc_logits(fake, part["input_mask"], part["segment_ids"])}

        @jax.jit
        def score(values, temperature, arrays):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return jax.lax.map(lambda part: score_chunk(temperature, part), arrays)

        @jax.jit
        def discriminate(values, fake, mask, segments):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return jax.lax.map(lambda part: disc_logits(*part), (fake, mask, segments))

        self._score = PrecompilableStep(score)
        self._discriminate = PrecompilableStep(discriminate)

    def _values(self, values):
        return [v.value for v in self.variables] if values is None else values

    def _score_args(self, values=None):
        return (self._values(values), self.temperature, self.heldout.arrays)

    def _discriminate_args(self, fake, values=None):
        arrays = self.heldout.arrays
        return (self._values(values), fake, arrays["input_mask"], arrays["segment_ids"])

    def run(self, values=None):
        """The scoring program's outputs on the host, [B, ...] each: predicted and ce [B, N],
        fake_ids, labels and disc_logits [B, T]; plus "fake_ids_device" (still chunked there)."""
        out = self._score(*self._score_args(values))
        host = {k: self.heldout.unchunked(v) for k, v in out.items()}
        host["fake_ids_device"] = out["fake_ids"]
        return host

    def evaluate(self, values=None):
        """`evaluate(batch, gen_fn, disc_fn, temperature, seed, chunk)`'s metrics, computed on
        the device (see the class docstring)."""
        out = self.run(values)
        return {**self._generator_metrics(out),
                **disc_metrics(out["labels"], out["disc_logits"], self.batch["input_mask"])}

    def corrupt(self, values=None):
        """`corrupt`'s dict (fake_ids, labels, gen_accuracy, gen_loss) from the scoring program
        (its discriminator half runs too and is dropped), plus "fake_ids_device", which
        `discriminate` uses without uploading the fake ids again."""
        out = self.run(values)
        return {"fake_ids": out["fake_ids"], "labels": out["labels"],
                "fake_ids_device": out["fake_ids_device"], **self._generator_metrics(out)}

    def discriminate(self, corrupted, values=None):
        """`discriminate(batch, corrupted, disc_fn)` on the device: the discriminator (current
        values, or `values`) on the fake ids of a corruption made earlier, this scorer's
        `corrupt` or the host's."""
        import jax
        fake = corrupted.get("fake_ids_device")
        if fake is None:
            fake = jax.device_put(self.heldout.chunked(corrupted["fake_ids"]))
        logits = self.heldout.unchunked(self._discriminate(*self._discriminate_args(fake, values)))
        return disc_metrics(corrupted["labels"], logits, self.batch["input_mask"])

    def precompile_jobs(self, name="held-out"):
        """[(name, PrecompilableStep, example arguments)] of the scoring and the fixed-corruption
        discriminator programs, for training/jax_programs.precompile."""
        fake = self.heldout.arrays["input_ids"]
        return [(f"{name} scoring", self._score, self._score_args()),
                (f"{name} discriminator", self._discriminate, self._discriminate_args(fake))]

    def _generator_metrics(self, out):
        return generator_metrics(*generator_sums(out["predicted"], out["ce"],
                                                 self.batch["masked_lm_ids"],
                                                 self.batch["masked_lm_weights"]))


def device_scorer(pretrainer, batch, temperature=1.0, seed=4321, chunk=32):
    """A `DeviceScorer` of `pretrainer` on `batch` (a `heldout_batch` dict, uploaded here with
    its noise for `seed` and `chunk`, or a `DeviceHeldout` already uploaded: shared, its seed
    and chunk kept)."""
    if not isinstance(batch, DeviceHeldout):
        batch = DeviceHeldout(batch, pretrainer.config.vocab_size, seed, chunk)
    return DeviceScorer(pretrainer, batch, temperature)


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
