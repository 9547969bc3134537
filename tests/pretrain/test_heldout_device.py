"""pretrain/heldout_eval.py's device scorer (`device_scorer`, Keras-on-JAX) against the host path
(`evaluate` over `jax_fns`): on a tiny ElectraPretrainer in one subprocess (KERAS_BACKEND=jax, JAX
on the CPU, `tensorflow` unimportable), the same held-out metrics (generator accuracy exactly,
discriminator AUC within 1e-6), the same fake ids, and the same fixed-corruption discriminator
score, including batches with duplicate masked positions and a last chunk that is padded."""
import pytest

from tests.conftest import run_jax_script

RUN = r"""
import json, sys
sys.modules["tensorflow"] = None
import numpy as np
import keras

# Test-only speed-up: on the CPU Keras' zeros / ones of a new shape are each an XLA compile
# (the truncated normal is drawn with NumPy: model/initializers.py); NumPy constants instead.
def _numpy_init(kind):
    def init(self, shape, dtype=None):
        dtype = keras.backend.standardize_dtype(dtype or "float32")
        return np.full(shape, 1.0 if kind == "ones" else 0.0, dtype)
    return init
keras.initializers.Zeros.__call__ = _numpy_init("zeros")
keras.initializers.Ones.__call__ = _numpy_init("ones")

import jax
assert keras.backend.backend() == "jax", keras.backend.backend()
from model import ConvBertConfig
from pretrain import ElectraPretrainer, generator_config
from pretrain import heldout_eval as he
from training.seeds import set_random_seed

set_random_seed(0)      # the weights' draws (model/initializers.py): the same in every run
VOCAB, SEQ = 1000, 32
cfg = ConvBertConfig(vocab_size=VOCAB, hidden_size=32, embedding_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
pretrainer = ElectraPretrainer(cfg, generator_config(cfg, 0.5))
# Half the tokens are among 8 frequent ids, which get a large output bias: the generator predicts
# some masked tokens right and its samples keep some originals (labels of both classes).
bias = np.zeros(VOCAB, np.float32)
bias[104:112] = np.linspace(2.0, 4.0, 8)
pretrainer.mlm_head.output_bias.assign(bias)


def examples(n, lengths, seed):
    # [CLS] a [SEP] b [SEP] then padding, as the packer lays an example out
    rng = np.random.default_rng(seed)
    ids = np.where(rng.random((n, SEQ)) < 0.5, rng.integers(104, 112, (n, SEQ)),
                   rng.integers(104, VOCAB, (n, SEQ))).astype(np.int32)
    mask = np.zeros((n, SEQ), np.int32)
    segments = np.zeros((n, SEQ), np.int32)
    for b in range(n):
        length = int(rng.integers(*lengths))
        cut = int(rng.integers(1, length - 2))
        ids[b, 0], ids[b, cut], ids[b, length - 1] = 101, 102, 102
        segments[b, cut + 1:length] = 1
        mask[b, :length] = 1
        ids[b, length:] = 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def duplicates(batch):
    # weighted slots (position > 0) whose position an other weighted slot of the row also holds
    count = 0
    for pos, w in zip(batch["masked_lm_positions"], batch["masked_lm_weights"]):
        chosen = pos[(w > 0) & (pos > 0)]
        count += len(chosen) - len(set(chosen.tolist()))
    return count


gen_fn, disc_fn = he.jax_fns(pretrainer)
# other discriminator values than the current ones: the fixed-corruption score of a `snapshot`
other = [v * 1.05 if np.issubdtype(v.dtype, np.floating) else v
         for v in he.snapshot(pretrainer)]
cases = {
    # 64 examples of 20-32 tokens, 4 chunks of 16
    "full": (he.masked_heldout(examples(64, (20, 33), 1)), 16),
    # 40 short examples (5-8 tokens) masked at 0.9: more draws than candidates, so many
    # duplicate positions; 3 chunks of 16, the last one padded
    "duplicates": (he.masked_heldout(examples(40, (5, 9), 2), mask_prob=0.9), 16),
}
out = {}
for name, (batch, chunk) in cases.items():
    scorer = he.device_scorer(pretrainer, batch, 1.0, chunk=chunk)
    host_corruption = he.corrupt(batch, gen_fn, 1.0, chunk=chunk)
    device_corruption = scorer.corrupt()
    out[name] = {
        "duplicates": duplicates(batch), "chunks": scorer.heldout.chunks,
        "host": he.evaluate(batch, gen_fn, disc_fn, 1.0, chunk=chunk),
        "device": scorer.evaluate(),
        "fake_ids_equal": bool(np.array_equal(host_corruption["fake_ids"],
                                              device_corruption["fake_ids"])),
        "labels_equal": bool(np.array_equal(host_corruption["labels"],
                                            device_corruption["labels"])),
        "fixed_host": he.discriminate(batch, host_corruption,
                                      lambda *a: disc_fn(*a, values=other), chunk=chunk),
        "fixed_device": scorer.discriminate(device_corruption, values=other),
        "fixed_device_of_host_corruption": scorer.discriminate(host_corruption, values=other)}

# write_samples_device keeps what write_samples keeps (the last slot at a repeated position),
# on slots whose samples all differ, so keeping another slot would show
rng = np.random.default_rng(5)
ids = rng.integers(104, VOCAB, (8, 12)).astype(np.int32)
positions = rng.integers(0, 5, (8, 10)).astype(np.int32)
weights = (rng.random((8, 10)) < 0.8).astype(np.float32)
sampled = (np.arange(80).reshape(8, 10) + 10).astype(np.int32)
fake, written = he.write_samples(ids, sampled, positions, weights)
fake_d, written_d = jax.jit(he.write_samples_device)(ids, sampled, positions, weights)
first = ids.copy()
for b in range(8):
    for j in reversed(range(10)):
        if weights[b, j] > 0 and positions[b, j] > 0:
            first[b, positions[b, j]] = sampled[b, j]
out["write_samples"] = {"fake_equal": bool(np.array_equal(fake, np.asarray(fake_d))),
                        "written_equal": bool(np.array_equal(written, np.asarray(written_d))),
                        "first_slot_differs": bool(not np.array_equal(first, fake)),
                        "position_0_untouched": bool(np.array_equal(np.asarray(fake_d)[:, 0],
                                                                    ids[:, 0]))}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    pytest.importorskip("jax")
    pytest.importorskip("sklearn")
    return run_jax_script(RUN, tmp_path_factory.mktemp("heldout_device") / "scored.json")


@pytest.mark.parametrize("case", ["full", "duplicates"])
def test_device_scorer_equals_host_evaluate(scored, case):
    host, device = scored[case]["host"], scored[case]["device"]
    assert 0 < host["gen_accuracy"] < 1 and 0 < host["replaced_fraction"] < 1
    assert device["gen_accuracy"] == host["gen_accuracy"]
    assert device["gen_loss"] == pytest.approx(host["gen_loss"], rel=1e-5)
    assert device["disc_auc"] == pytest.approx(host["disc_auc"], abs=1e-6)
    assert device["disc_accuracy"] == host["disc_accuracy"]
    assert device["replaced_fraction"] == host["replaced_fraction"]
    assert scored[case]["fake_ids_equal"] and scored[case]["labels_equal"]


@pytest.mark.parametrize("case", ["full", "duplicates"])
def test_fixed_corruption_score_equals_host_discriminate(scored, case):
    host = scored[case]["fixed_host"]
    for device in (scored[case]["fixed_device"],
                   scored[case]["fixed_device_of_host_corruption"]):
        assert device["disc_auc"] == pytest.approx(host["disc_auc"], abs=1e-6)
        assert device["disc_accuracy"] == host["disc_accuracy"]
        assert device["replaced_fraction"] == host["replaced_fraction"]
    # other values than the current ones were scored
    assert host["disc_auc"] != scored[case]["host"]["disc_auc"]


def test_cases_have_duplicates_and_several_chunks(scored):
    assert scored["duplicates"]["duplicates"] > 0
    assert scored["full"]["chunks"] == 4 and scored["duplicates"]["chunks"] == 3


def test_device_write_keeps_the_last_slot_at_a_repeated_position(scored):
    assert scored["write_samples"] == {"fake_equal": True, "written_equal": True,
                                       "first_slot_differs": True, "position_0_untouched": True}
