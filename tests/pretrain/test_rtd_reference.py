"""The independent RTD reference: pretrain/heldout_eval.py and reproduce/rtd_reference.py.

* `electra_mask` against ELECTRA's definition of `pretrain_helpers.mask` on a hand-made batch;
* `evaluate` with fake generator / discriminator functions (labels, replaced fraction, AUC);
* `roc_auc` with ties;
* the torch reference's pieces: shared embeddings, tied output layer, ELECTRA's optimizer and
  schedule (against our Keras ones), and the training batches (exactly our trainer's);
* end to end: a 4-step ELECTRA-architecture run of `run_pretraining.py`, then the `ours`,
  `reference` and `compare` subcommands.
"""
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from pretrain import heldout_eval as he

REPO = pathlib.Path(__file__).resolve().parents[2]
CLS, SEP, MASK = 101, 102, 103
SEQ = 32
ELECTRA_TINY = {"model_size": "tiny", "train_batch_size": 8, "max_seq_length": SEQ,
                "model_hparam_overrides": {"hidden_size": 64, "embedding_size": 32,
                                           "num_hidden_layers": 1, "num_attention_heads": 1,
                                           "head_ratio": 1, "conv_type": "none",
                                           "intermediate_size": 128},
                "generator_hidden_size": 0.5, "num_warmup_steps": 2, "learning_rate": 2e-3,
                "shuffle_buffer": 50}
METRICS = ("gen_accuracy", "gen_loss", "disc_auc", "disc_accuracy", "replaced_fraction")


# ------------------------------------------------------------------------------------ masking
def hand_batch():
    """5 examples of 40 tokens: padding, two segments, only [CLS][SEP], [MASK] tokens inside, and
    one with only 2 candidates for 3 predictions."""
    rng = np.random.default_rng(7)
    t = 40
    rows = [
        [CLS] + list(rng.integers(104, 200, 8)) + [SEP],                          # n=10 -> 2 (1.5)
        [CLS] + list(rng.integers(104, 200, 13)) + [SEP] + list(rng.integers(104, 200, 14))
        + [SEP],                                                                  # n=30 -> 4 (4.5)
        [CLS, SEP],                                                               # n=2 -> none
        [CLS] + list(rng.integers(104, 200, 38)) + [SEP],                         # n=40 -> 6
        [CLS, 150, 151, SEP] + [SEP, MASK] * 8,                                   # n=20 -> 3 of 2
    ]
    rows[3][5] = rows[3][17] = rows[3][30] = MASK  # [MASK] tokens are no candidates
    ids = np.zeros((len(rows), t), np.int32)
    mask = np.zeros((len(rows), t), np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return ids, mask


def expected_counts(ids, mask, n=19, prob=0.15):
    """ELECTRA: max(1, min(N, tf.round(float32(sum(mask)) * prob))), 0 without candidates."""
    counts = np.round(mask.sum(1).astype(np.float32) * np.float32(prob)).astype(int)
    counts = np.maximum(1, np.minimum(n, counts))
    candidates = (mask == 1) & ~np.isin(ids, [CLS, SEP, MASK])
    return counts * (candidates.sum(1) > 0), candidates


def test_electra_mask_definition():
    ids, mask = hand_batch()
    np.testing.assert_array_equal(expected_counts(ids, mask)[0], [2, 4, 0, 6, 3])
    reps = 2000
    big_ids, big_mask = np.tile(ids, (reps, 1)), np.tile(mask, (reps, 1))
    out = he.electra_mask(big_ids, big_mask, np.random.default_rng(0))
    masked, pos = out["masked_input_ids"], out["masked_lm_positions"]
    lm_ids, w = out["masked_lm_ids"], out["masked_lm_weights"]
    assert masked.dtype == pos.dtype == lm_ids.dtype == np.int32 and w.dtype == np.float32
    assert pos.shape == lm_ids.shape == w.shape == (len(big_ids), 19)

    counts, candidates = expected_counts(big_ids, big_mask)
    slots = np.arange(19)[None, :]
    np.testing.assert_array_equal(w, (slots < counts[:, None]).astype(np.float32))
    weighted = w > 0
    rows = np.nonzero(weighted)[0]
    assert candidates[rows, pos[weighted]].all()                 # never CLS / SEP / MASK / PAD
    assert (pos[~weighted] == 0).all() and (lm_ids[~weighted] == 0).all()
    np.testing.assert_array_equal(lm_ids[weighted], big_ids[rows, pos[weighted]])

    # Written positions hold [MASK] or their own token, never a random id; nothing else changes.
    written = np.zeros(big_ids.shape, bool)
    written[rows, pos[weighted]] = True
    changed = masked != big_ids
    assert not (changed & ~written).any()
    assert (masked[changed] == MASK).all()

    # 85% [MASK] among slots whose position no other slot of the row chose.
    unique = np.zeros_like(weighted)
    for b in range(len(big_ids)):
        values, n_hits = np.unique(pos[b][weighted[b]], return_counts=True)
        once = set(values[n_hits == 1].tolist())
        unique[b] = weighted[b] & np.isin(pos[b], list(once))
    share = (masked[np.nonzero(unique)[0], pos[unique]] == MASK).mean()
    assert unique.sum() > 10000 and abs(share - 0.85) < 0.02, share

    # With replacement: 3 draws from 2 candidates always repeat; uniform over the candidates.
    row4 = np.arange(len(big_ids)) % len(ids) == 4
    assert all(len(set(p[:3])) < 3 for p in pos[row4])
    row3 = np.arange(len(big_ids)) % len(ids) == 3
    freq = np.bincount(pos[row3][w[row3] > 0], minlength=40)[candidates[3]]
    assert freq.min() > 0.8 * freq.mean() and freq.max() < 1.2 * freq.mean()
    assert any(len(set(p[:6])) < 6 for p in pos[row3])          # duplicates among 35 candidates

    # Other N, other special ids; the same rng seed gives the same masking.
    small = he.electra_mask(ids, mask, np.random.default_rng(1), max_predictions_per_seq=5)
    np.testing.assert_array_equal(small["masked_lm_weights"].sum(1), [2, 4, 0, 5, 3])
    again = he.electra_mask(ids, mask, np.random.default_rng(1), max_predictions_per_seq=5)
    for key in small:
        np.testing.assert_array_equal(small[key], again[key])


# ------------------------------------------------------------------------------------ evaluate
V = 128


def random_batch(size=40, t=24, seed=3):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(6, t + 1, size)
    ids = rng.integers(104, V, (size, t)).astype(np.int32)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
    ids[:, 0] = CLS
    ids[np.arange(size), lengths - 1] = SEP
    ids[mask == 0] = 0
    batch = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    batch.update(he.electra_mask(ids, mask, rng, max_predictions_per_seq=4))
    return batch


class Fakes:
    """Generator / discriminator functions that see the chunk's original batch rows."""

    def __init__(self, batch, chunk, gen="perfect"):
        self.batch, self.chunk, self.gen = batch, chunk, gen
        self.gen_calls = self.disc_calls = 0

    def rows(self, calls):
        return slice(calls * self.chunk, (calls + 1) * self.chunk)

    def gen_fn(self, masked, mask, segments, positions):
        part = self.rows(self.gen_calls)
        self.gen_calls += 1
        np.testing.assert_array_equal(masked, self.batch["masked_input_ids"][part])
        if self.gen == "uniform":
            return np.zeros(positions.shape + (V,), np.float32)
        return 100.0 * np.eye(V, dtype=np.float32)[self.batch["masked_lm_ids"][part]]

    def disc_fn(self, fake, mask, segments):
        part = self.rows(self.disc_calls)
        self.disc_calls += 1
        original = self.batch["input_ids"][part]
        w = self.batch["masked_lm_weights"][part] > 0
        allowed = np.zeros(fake.shape, bool)
        allowed[np.nonzero(w)[0], self.batch["masked_lm_positions"][part][w]] = True
        assert not ((fake != original) & ~allowed).any()   # only weighted positions are written
        return np.where(fake != original, 5.0, -5.0).astype(np.float32)  # the true labels


def test_evaluate_with_fake_models():
    batch = random_batch()
    perfect = Fakes(batch, 16)
    m = he.evaluate(batch, perfect.gen_fn, perfect.disc_fn, chunk=16)
    assert perfect.gen_calls == perfect.disc_calls == 3
    assert m["gen_accuracy"] == 1.0 and m["gen_loss"] < 1e-6
    assert m["replaced_fraction"] == 0.0 and math.isnan(m["disc_auc"])
    assert m["disc_accuracy"] == 1.0

    uniform = Fakes(batch, 16, gen="uniform")
    m = he.evaluate(batch, uniform.gen_fn, uniform.disc_fn, chunk=16)
    _, written = he.write_samples(batch["input_ids"], np.zeros_like(batch["masked_lm_ids"]),
                                  batch["masked_lm_positions"], batch["masked_lm_weights"])
    expected = written.sum() * (1 - 1 / V) / batch["input_mask"].sum()
    assert abs(m["replaced_fraction"] - expected) < 0.02, (m, expected)
    assert m["disc_auc"] == 1.0 and m["disc_accuracy"] == 1.0
    assert abs(m["gen_loss"] - math.log(V)) < 1e-6
    # Same noise for every run: a second evaluation is identical.
    again = Fakes(batch, 16, gen="uniform")
    assert he.evaluate(batch, again.gen_fn, again.disc_fn, chunk=16) == m


def test_fixed_corruption_scores_only_the_discriminator():
    """`evaluate` = `corrupt` + `discriminate`; a corruption made once scores any discriminator."""
    batch = random_batch()
    uniform = Fakes(batch, 16, gen="uniform")
    corrupted = he.corrupt(batch, uniform.gen_fn, chunk=16)
    assert corrupted["fake_ids"].shape == batch["input_ids"].shape
    again = Fakes(batch, 16, gen="uniform")
    m = he.evaluate(batch, again.gen_fn, again.disc_fn, chunk=16)
    scored = he.discriminate(batch, corrupted, Fakes(batch, 16).disc_fn, chunk=16)
    assert scored == {k: m[k] for k in ("disc_auc", "disc_accuracy", "replaced_fraction")}
    assert (corrupted["gen_accuracy"], corrupted["gen_loss"]) == (m["gen_accuracy"], m["gen_loss"])

    def constant(fake, mask, segments):
        return np.zeros(fake.shape, np.float32)
    assert he.discriminate(batch, corrupted, constant, chunk=16)["disc_auc"] == 0.5


def test_roc_auc_with_ties():
    from sklearn.metrics import roc_auc_score
    labels = [0, 0, 1, 1, 0, 1]
    scores = [0.1, 0.5, 0.5, 0.9, 0.5, 0.1]
    assert he.roc_auc(labels, scores) == pytest.approx(5.5 / 9)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    scores = np.round(rng.normal(size=500) + labels, 1)  # many ties
    assert he.roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert math.isnan(he.roc_auc([1, 1, 1], [0.1, 0.2, 0.3]))


# ------------------------------------------------------------------------------------ optimizer
def test_reference_optimizer_and_schedule_match_ours():
    import keras
    import tensorflow as tf
    import torch
    from reproduce import rtd_reference as ref
    from training import optimization

    schedule = optimization.linear_warmup_linear_decay(1e-3, 3, 10, power=0.5)
    for step in range(12):
        assert ref.learning_rate(step, 1e-3, 3, 10, 0.5) == pytest.approx(
            float(schedule(step)), rel=1e-5, abs=1e-12)

    grads = [np.array([0.3, -1.0, 2.0], np.float32) * (k + 1) for k in range(3)]
    start = np.array([0.5, -0.2, 1.0], np.float32)
    var = keras.Variable(start, name="kernel")  # decayed: not LayerNorm, not a bias
    keras_opt = optimization.AdamWeightDecay(0.1, weight_decay_rate=0.01, clip_norm=None)
    for g in grads:
        keras_opt.apply([tf.constant(g)], [var])

    def torch_result(bias_correction):
        p = torch.nn.Parameter(torch.tensor(start))
        opt = ref.adam_weight_decay([{"params": [p], "weight_decay": 0.01}], bias_correction)
        for g in grads:
            p.grad = torch.tensor(g)
            opt.param_groups[0]["lr"] = 0.1
            opt.step()
        return p.detach().numpy()

    np.testing.assert_allclose(torch_result(False), var.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(torch_result(True), var.numpy(), atol=1e-3)  # --bias_correction

    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert ref.clip_by_global_norm([a, b], 1.0) == pytest.approx(5.0)
    clipped, _ = tf.clip_by_global_norm([tf.constant([3.0, 0.0]), tf.constant([4.0])], 1.0)
    np.testing.assert_allclose(a.grad.numpy(), clipped[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), clipped[1].numpy(), rtol=1e-6)


# ------------------------------------------------------------------------------------ end to end
def write_tiny_shards(out, num_shards=3, per_shard=64, vocab_size=300):
    """Hand-made shards (Zipf tokens, [CLS] a [SEP] b [SEP]) and a vocab with BERT's special ids;
    returns the globs of the 2 training shards and the held-out one, and the vocab file."""
    import tensorflow as tf
    from data.shard_writer import serialize_example, shard_path
    from data.vocab import bert_reserved_tokens, write_vocab
    out.mkdir(parents=True, exist_ok=True)
    special = bert_reserved_tokens()
    write_vocab(special + [f"w{i}" for i in range(vocab_size - len(special))], out / "vocab.txt")
    rng = np.random.default_rng(0)
    positions = np.arange(SEQ)
    for shard in range(num_shards):
        with tf.io.TFRecordWriter(shard_path(out, shard, num_shards)) as writer:
            for _ in range(per_shard):
                n = int(rng.integers(8, SEQ + 1))
                first_sep = int(rng.integers(2, n - 2))
                ids = np.zeros(SEQ, int)
                ids[:n] = rng.zipf(1.3, size=n) % (vocab_size - 104) + 104
                ids[0], ids[first_sep], ids[n - 1] = CLS, SEP, SEP
                segments = ((positions > first_sep) & (positions < n)).astype(int)
                writer.write(serialize_example(ids.tolist(), (positions < n).astype(int).tolist(),
                                               segments.tolist()))
    return (str(out / "pretrain_data.tfrecord-[01]-of-3"),
            str(out / "pretrain_data.tfrecord-2-of-3"), str(out / "vocab.txt"))


def run_cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, *map(str, args)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """Our 4-step tiny ELECTRA-architecture run, evaluated by `ours`, the 4-step reference, and
    `compare` (the last as a subprocess: the CLI as users run it, no TensorFlow needed)."""
    from reproduce import rtd_reference as ref
    root = tmp_path_factory.mktemp("rtd")
    train, heldout, vocab = write_tiny_shards(root / "shards")
    model_dir = root / "run"
    proc = run_cli(REPO / "run_pretraining.py", f"--pretrain_tfrecords={train}",
                   f"--vocab_file={vocab}", f"--model_dir={model_dir}",
                   "--hparams=" + json.dumps(ELECTRA_TINY), "--num_train_steps=4",
                   "--save_checkpoints_steps=2", "--keep_checkpoint_max=10",
                   "--log_every_n_steps=2", "--seed=5")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    common = [f"--model_dir={model_dir}", f"--heldout={heldout}", "--heldout_examples=16",
              f"--vocab_file={vocab}"]
    ours, reference = root / "ours.jsonl", root / "ref.jsonl"
    assert ref.main(["ours", *common, f"--output={ours}"]) == 0
    assert ref.main(["reference", *common, f"--output={reference}", f"--train_tfrecords={train}",
                     "--num_train_steps=4", "--eval_every=2"]) == 0
    png, md = root / "rtd.png", root / "rtd.md"
    proc = run_cli(REPO / "reproduce" / "rtd_reference.py", "compare", f"--reference={reference}",
                   f"--ours={ours}", f"--extra={ours}", "--extra_label=ours again",
                   f"--png={png}", f"--markdown={md}", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"model_dir": model_dir, "train": train, "heldout": heldout, "vocab": vocab,
            "ours": ours, "reference": reference, "png": png, "md": md}


def test_end_to_end_jsonl(e2e):
    for path in (e2e["ours"], e2e["reference"]):
        records = read_jsonl(path)
        assert [r["step"] for r in records] == [2, 4], path
        for r in records:
            for key in METRICS:
                assert math.isfinite(r[key]), (path, r)
            assert 0 <= r["gen_accuracy"] <= 1 and 0 <= r["disc_auc"] <= 1
    assert all(r["wall_seconds"] >= 0 for r in read_jsonl(e2e["reference"]))
    # Ours also scores every discriminator against the last generator's replacements; at the
    # last checkpoint that is its own generator.
    ours = read_jsonl(e2e["ours"])
    assert all(0 <= r["disc_auc_last_gen"] <= 1 for r in ours)
    assert ours[-1]["disc_auc_last_gen"] == ours[-1]["disc_auc"]


def test_end_to_end_compare(e2e):
    with open(e2e["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    text = pathlib.Path(e2e["md"]).read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["2", "4"]
    assert "No common step >= 200" in text


def test_reference_models_and_batches_are_ours(e2e):
    """The torch models share one embeddings module and tie the output layer to it, have our
    parameter count, and train on exactly the batches our trainer reads."""
    import tensorflow as tf
    from reproduce import rtd_reference as ref
    from data.tfrecord_io import find_shards
    from pretrain.task import make_core
    hp, _ = he.load_hparams(e2e["model_dir"])
    generator, discriminator = ref.build_models(hp)
    assert generator.electra.embeddings is discriminator.electra.embeddings
    assert (generator.generator_lm_head.weight
            is discriminator.electra.embeddings.word_embeddings.weight)
    assert generator.generator_lm_head.bias is not None
    params = ref.named_parameters(generator, discriminator)
    assert len({id(p) for _, p in params}) == len(params)
    optimizer = ref.make_optimizer(generator, discriminator, hp.weight_decay_rate)
    no_decay = {id(p) for p in optimizer.param_groups[1]["params"]}
    for name, p in params:
        assert (id(p) in no_decay) == ("LayerNorm" in name or name.endswith("bias")), name

    files = find_shards(e2e["train"])
    task, core = make_core(hp, files, tf.distribute.get_strategy(), hp.vocab_size)
    assert core.num_params == sum(p.numel() for _, p in params)
    theirs = iter(task.dataset(0))
    mine = ref.training_batches(hp, files)
    for _ in range(3):
        a, b = next(mine), next(theirs)
        for key in he.FEATURES:
            np.testing.assert_array_equal(a[key], b[key].numpy())

    disc_config, _ = ref.model_configs(hp)
    assert ref.architecture_warnings(disc_config) == []
    assert "ConvBERT" in ref.architecture_warnings(disc_config.replace(conv_type="sdconv",
                                                                       head_ratio=2))[0]


def test_cli_errors(e2e, tmp_path, capsys):
    from reproduce import rtd_reference as ref
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["ours", f"--model_dir={empty}", f"--heldout={e2e['heldout']}",
          f"--output={tmp_path / 'o.jsonl'}"], "error: no hparams.json"),
        (["reference", f"--model_dir={e2e['model_dir']}", f"--heldout={e2e['heldout']}",
          f"--output={tmp_path / 'r.jsonl'}", f"--train_tfrecords={tmp_path / 'none*'}"],
         "error: no pre-training shards match"),
        (["compare", f"--reference={tmp_path / 'missing.jsonl'}", f"--ours={e2e['ours']}",
          f"--png={tmp_path / 'x.png'}", f"--markdown={tmp_path / 'x.md'}"], "error: "),
    ]
    (empty / "hparams.json").write_text("{}")  # a run without checkpoints
    cases.append((["ours", f"--model_dir={empty}", f"--heldout={e2e['heldout']}",
                   f"--output={tmp_path / 'o.jsonl'}"], "error: no checkpoints in"))
    (empty / "hparams.json").unlink()
    for argv, message in cases[:3]:
        assert ref.main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(message), err
    (empty / "hparams.json").write_text("{}")
    assert ref.main(cases[3][0]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(cases[3][1]), err
