"""Masking and the counter-based RNG (pretrain.masking, pretrain.sampling)."""
import numpy as np
from keras import ops

from pretrain import masking, sampling

CLS, SEP, MASK = 101, 102, 103


def make_batch(batch=64, seq_len=128, seed=0, vocab=1000):
    rng = np.random.default_rng(seed)
    ids = rng.integers(104, vocab, (batch, seq_len)).astype(np.int32)
    mask = np.zeros((batch, seq_len), np.int32)
    lengths = rng.integers(3, seq_len + 1, batch)
    lengths[:3] = [seq_len, 3, 10]
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = 0
        ids[b, 0] = CLS
        ids[b, n - 1] = SEP
        if n > 8:
            ids[b, n // 2] = SEP  # a two-segment example
    return ids, mask


def run_mask(ids, mask, example_id, step=0, seed=0, n=19, prob=0.15):
    out = masking.mask_inputs(ids, mask, example_id, step, seed, prob, n, CLS, SEP, MASK)
    return {k: ops.convert_to_numpy(v) for k, v in out.items()}


def test_default_max_predictions():
    assert masking.default_max_predictions_per_seq(128) == 19
    assert masking.default_max_predictions_per_seq(512) == 79


def test_never_masks_special_or_padding_and_counts_match_formula():
    ids, mask = make_batch()
    out = run_mask(ids, mask, np.arange(len(ids)), step=3)
    weights, positions = out["masked_lm_weights"], out["masked_lm_positions"]
    num_real = mask.sum(-1)
    expected = np.maximum(1, np.minimum(19, np.round(num_real.astype(np.float32) * np.float32(0.15))))
    np.testing.assert_array_equal(weights.sum(-1), expected)
    # weights are a prefix of the slots; unused slots point to 0 with label 0
    assert np.all(np.diff(weights, axis=-1) <= 0)
    assert np.all(positions[weights == 0] == 0)
    assert np.all(out["masked_lm_ids"][weights == 0] == 0)
    chosen = np.take_along_axis(ids, positions, 1)[weights > 0]
    assert not np.isin(chosen, [CLS, SEP, 0]).any()
    assert np.all(np.take_along_axis(mask, positions, 1)[weights > 0] == 1)
    np.testing.assert_array_equal(out["masked_lm_ids"], np.take_along_axis(ids, positions, 1) * weights)
    # only [MASK] is ever written, and only at chosen positions
    changed = out["input_ids"] != ids
    assert np.all(out["input_ids"][changed] == MASK)
    for b in range(len(ids)):
        assert set(np.nonzero(changed[b])[0]) <= set(positions[b][weights[b] > 0])
    assert np.all(out["input_ids"][ids == CLS] == CLS) and np.all(out["input_ids"][ids == SEP] == SEP)
    assert np.all(out["input_ids"][mask == 0] == 0)


def test_mask_85_15_split_and_uniform_positions():
    ids, mask = make_batch(batch=256, seed=1)
    ids[:, 1:-1] = np.random.default_rng(3).integers(104, 1000, (256, 126))
    ids[:, 0], ids[:, 64], ids[:, -1] = CLS, SEP, SEP
    mask[:] = 1  # all full length
    masked = kept = 0
    hist = np.zeros(128)
    for step in range(4):
        out = run_mask(ids, mask, np.arange(len(ids)), step=step)
        w, pos = out["masked_lm_weights"] > 0, out["masked_lm_positions"]
        assert w.sum(-1).tolist() == [19] * 256
        # count unique chosen positions: a position chosen twice is masked if either slot masks
        for b in range(len(ids)):
            for p in set(pos[b]):
                masked += out["input_ids"][b, p] == MASK
                kept += out["input_ids"][b, p] != MASK
        np.add.at(hist, pos.ravel(), 1)
    frac = masked / (masked + kept)
    assert 0.84 < frac < 0.88, frac
    # positions uniform over 1..126 except the middle [SEP] at 64
    assert hist[0] == 0 and hist[127] == 0 and hist[64] == 0
    counts = np.delete(hist[1:127], 63)
    expected = counts.sum() / counts.size
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 200, chi2  # 124 dof


def test_split_exactly_015_masks_85_percent_of_slots():
    ids, mask = make_batch(batch=512, seed=2)
    out = run_mask(ids, mask, np.arange(len(ids)), step=0)
    u = ops.convert_to_numpy(sampling.uniform(
        sampling.stream_keys(sampling.example_keys(0, 0, np.arange(len(ids))),
                             sampling.STREAM_MASK_REPLACE), 19))
    w = out["masked_lm_weights"] > 0
    frac = (u[w] < 0.85).mean()
    assert abs(frac - 0.85) < 0.01


def test_deterministic_and_depends_on_seed_step_and_example_id():
    ids, mask = make_batch(batch=16)
    ex = np.arange(100, 116)
    a = run_mask(ids, mask, ex, step=5, seed=1)
    b = run_mask(ids, mask, ex, step=5, seed=1)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    for other in (run_mask(ids, mask, ex, step=6, seed=1), run_mask(ids, mask, ex, step=5, seed=2),
                  run_mask(ids, mask, ex + 1, step=5, seed=1)):
        assert (other["masked_lm_positions"] != a["masked_lm_positions"]).any()


def test_replica_split_gives_identical_masks():
    ids, mask = make_batch(batch=32)
    ex = np.arange(1000, 1032)
    full = run_mask(ids, mask, ex, step=11)
    halves = [run_mask(ids[s], mask[s], ex[s], step=11) for s in (slice(0, 16), slice(16, 32))]
    for k in full:
        np.testing.assert_array_equal(full[k], np.concatenate([h[k] for h in halves]))
    # and a shuffled batch gives each example the same masking
    perm = np.random.default_rng(0).permutation(32)
    shuffled = run_mask(ids[perm], mask[perm], ex[perm], step=11)
    np.testing.assert_array_equal(shuffled["input_ids"], full["input_ids"][perm])


def test_no_candidates_means_no_weight():
    ids = np.array([[CLS, SEP, 0, 0], [CLS, 500, SEP, 0]], np.int32)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.int32)
    out = run_mask(ids, mask, np.arange(2), n=3)
    np.testing.assert_array_equal(out["masked_lm_weights"], [[0, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(out["masked_lm_positions"], [[0, 0, 0], [1, 0, 0]])


def test_scatter_update_matches_official_semantics():
    seq = np.array([[10, 11, 12, 13]], np.int32)
    upd = np.array([[100, 201, 300, 7]], np.int32)
    pos = np.array([[2, 2, 3, 0]], np.int32)  # duplicate at 2 (floor mean), position 0 ignored
    out, hit = masking.scatter_update(seq, upd, pos)
    np.testing.assert_array_equal(ops.convert_to_numpy(out), [[10, 11, 150, 300]])
    np.testing.assert_array_equal(ops.convert_to_numpy(hit), [[0, 0, 1, 1]])
    seqf = np.zeros((1, 4, 2), np.float32)
    updf = np.array([[[1, 2], [3, 4], [5, 6], [9, 9]]], np.float32)
    outf, _ = masking.scatter_update(seqf, updf, pos)
    np.testing.assert_allclose(ops.convert_to_numpy(outf)[0], [[0, 0], [0, 0], [2, 3], [5, 6]])


def test_uniforms_are_well_distributed():
    keys = sampling.example_keys(7, 3, np.arange(256))
    u = ops.convert_to_numpy(sampling.uniform_grid(keys, 19, 512)).ravel()
    assert u.min() >= 0 and u.max() < 1
    hist = np.histogram(u, bins=64, range=(0, 1))[0]
    expected = u.size / 64
    chi2 = ((hist - expected) ** 2 / expected).sum()
    assert chi2 < 130, chi2          # 63 dof: p ~ 1e-6
    assert abs(u.mean() - 0.5) < 0.002 and abs(u.var() - 1 / 12) < 0.001
    # neighbours (adjacent vocab entries, adjacent examples) are uncorrelated
    grid = u.reshape(256, 19, 512)
    assert abs(np.corrcoef(grid[..., :-1].ravel(), grid[..., 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(grid[:-1].ravel(), grid[1:].ravel())[0, 1]) < 0.01
    # Gumbel-max with equal logits picks every vocabulary entry about equally often
    ids = ops.convert_to_numpy(sampling.sample_from_softmax(np.zeros((256, 19, 8), np.float32), keys))
    freq = np.bincount(ids.ravel(), minlength=8) / ids.size
    assert np.all(np.abs(freq - 1 / 8) < 0.015)


def test_gumbel_sampling_follows_softmax():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
    keys = sampling.example_keys(0, 0, np.arange(4000))
    ids = ops.convert_to_numpy(sampling.sample_from_softmax(np.broadcast_to(logits, (4000, 5, 4)), keys))
    freq = np.bincount(ids.ravel(), minlength=4) / ids.size
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.01)
    # disallow removes the entry
    dis = np.zeros((4000, 5, 4), np.float32)
    dis[..., 0] = 1
    ids = ops.convert_to_numpy(sampling.sample_from_softmax(np.broadcast_to(logits, (4000, 5, 4)), keys,
                                                            disallow=dis))
    assert not (ids == 0).any()


def test_random_numbers_are_pinned():
    """Golden values: a resumed run (or another backend: see test_pretrain_jax) draws these."""
    keys = sampling.example_keys(3, 7, np.array([0, 1, 2 ** 31 - 1], np.int64))
    assert ops.convert_to_numpy(keys).tolist() == [438284435, 2462771635, 4013251636]
    grid = ops.convert_to_numpy(sampling.uniform(keys, 4)) * 2 ** 24
    assert grid.astype(np.int64).tolist() == [[10903283, 2395415, 983562, 8946234],
                                              [14722805, 15055079, 967862, 16462314],
                                              [6350676, 4310529, 11102937, 7698442]]
    grid = ops.convert_to_numpy(sampling.uniform_grid(keys, 2, 3)) * 2 ** 24
    assert grid.astype(np.int64).tolist() == [
        [[6197255, 5902896, 9656612], [11973854, 12987588, 3570330]],
        [[484604, 5594069, 7508851], [14241018, 15142635, 9684242]],
        [[9808013, 12710855, 13415940], [11934592, 4672116, 5778807]]]
