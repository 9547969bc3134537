"""Elastic pre-training (elastic/pretrain.py): `python -m elastic.pretrain` on tiny shards trains
the full ELECTRA objective plus the discriminator's sub-networks and logs the smallest cell; every
extracted cell loads and equals the sliced trained model; the full-model part of the loss IS plain
pre-training's (same batch, same weights: bit-identical); the cells drawn are a function of
(seed, step) only, and a run killed and resumed ends bit-identical to one never interrupted.
The (L, H) grid (`--elastic_hidden_sizes`, `--elastic_layers`): a tiny run whose extracted
hidden-size cells load and equal the sliced trained model, the grid's cells and draws, errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import keras_backend
from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    REPO, driver_env, read_summary, tiny_data, tiny_hparams)

pytestmark = pytest.mark.skipif(keras_backend() != "tensorflow",
                                reason="the TensorFlow training core")

# 2 layers, 2 self-attention + 2 convolution heads (head size 16), FFN 128: every cell differs.
ELASTIC_MODEL = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_ratio": 2}
WIDTHS, DEPTHS = (1.0, 0.5), (1.0, 0.5)
CELLS = [(w, d) for w in WIDTHS for d in DEPTHS]
STEPS, SAVE_EVERY, RESUME_AT = 4, 2, 2
FLAGS = (f"--num_train_steps={STEPS}", f"--save_checkpoints_steps={SAVE_EVERY}",
         "--log_every_n_steps=1", "--keep_checkpoint_max=3", "--seed=7", "--deterministic",
         "--elastic_widths=1,0.5", "--elastic_depths=1,0.5", "--num_sampled=1")


def elastic_hparams():
    return tiny_hparams(model_hparam_overrides=ELASTIC_MODEL)   # dropout on: its RNG resumes too


def elastic_cmd(data, model_dir, *flags):
    pattern, vocab = data
    return [sys.executable, "-m", "elastic.pretrain", f"--pretrain_tfrecords={pattern}",
            f"--vocab_file={vocab}", f"--model_dir={model_dir}",
            "--hparams=" + json.dumps(elastic_hparams()), *flags]


def run_elastic(data, model_dir, *flags, timeout=300):
    return subprocess.run(elastic_cmd(data, model_dir, *flags), cwd=str(REPO),
                          env=driver_env(), capture_output=True, text=True, timeout=timeout)


def checkpoint_tensors(model_dir, step):
    import tensorflow as tf
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", f"ckpt-{step}"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """An uninterrupted elastic run with its cells extracted."""
    model_dir = tmp_path_factory.mktemp("elastic") / "reference"
    proc = run_elastic(tiny_data, model_dir, *FLAGS, "--extract_cells")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return model_dir, proc


# ------------------------------------------------------------------------------- (a) training
def test_elastic_pretraining_runs_and_logs_the_smallest_cell(reference):
    model_dir, proc = reference
    summary = read_summary(model_dir)
    assert summary["global_step"] == STEPS and len(summary["history"]) == STEPS
    for record in summary["history"]:
        for key in ("loss", "electra_loss", "gen_loss", "disc_loss", "small_disc_loss",
                    "small_disc_accuracy", "sampled_disc_loss", "sampled_disc_accuracy"):
            assert np.isfinite(record[key]), (key, record)
        # the total is the ELECTRA loss + 50 x (smallest + the one sampled cell)
        want = record["electra_loss"] + 50.0 * (record["small_disc_loss"]
                                                + record["sampled_disc_loss"])
        assert record["loss"] == pytest.approx(want, rel=1e-6)
        assert record["small_disc_loss"] > 0 and 0 <= record["small_disc_accuracy"] <= 1
    assert "w0.5_d0.5 disc loss" in proc.stdout
    assert "expected step cost" in proc.stdout
    elastic = summary["elastic"]
    assert elastic["widths"] == [1.0, 0.5] and elastic["num_sampled"] == 1
    assert elastic["relative_step_flops"] > 1.0
    assert json.loads((model_dir / "elastic.json").read_text())["depths"] == [1.0, 0.5]


# ------------------------------------------------------------------------------- (b) cells
def test_every_extracted_cell_loads_and_equals_the_sliced_model(reference):
    from keras import ops
    from elastic.slicing import Subnet, sliced_forward
    from model import ConvBertModel
    model_dir, _ = reference
    full = ConvBertModel.from_pretrained(str(model_dir))
    rng = np.random.default_rng(0)
    ids = rng.integers(5, full.config.vocab_size, (3, 20)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 14:] = 0
    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    names = sorted(os.listdir(model_dir / "cells"))
    assert names == sorted(f"w{w:g}_d{d:g}" for w, d in CELLS)
    for width, depth in CELLS:
        cell = ConvBertModel.from_pretrained(str(model_dir / "cells" / f"w{width:g}_d{depth:g}"))
        subnet = Subnet.for_width(full.config, width, depth)
        assert cell.config.num_hidden_layers == len(subnet.layers)
        got = ops.convert_to_numpy(cell(inputs, training=False))
        want = ops.convert_to_numpy(sliced_forward(full, inputs, subnet, training=False))
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------- (d) resume
def test_resume_is_bit_identical(reference, tiny_data, tmp_path):
    """The reference run's state at step RESUME_AT (its checkpoint: weights, Adam slots, step,
    examples consumed, dropout RNG) in a fresh model_dir, as a run killed after that save leaves
    it; resuming there to STEPS ends bit-identical to the uninterrupted run (the core's kill test,
    tests/pretrain/test_resume.py, shows a killed run leaves exactly this)."""
    import shutil
    ref_dir, _ = reference
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    for path in (ref_dir / "checkpoints").glob(f"ckpt-{RESUME_AT}.*"):
        shutil.copy(path, resumed / "checkpoints" / path.name)
    (resumed / "checkpoints" / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-{RESUME_AT}"\n'
        f'all_model_checkpoint_paths: "ckpt-{RESUME_AT}"\n')
    shutil.copy(ref_dir / "elastic.json", resumed / "elastic.json")

    proc = run_elastic(tiny_data, resumed, *FLAGS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and f"steps {RESUME_AT} -> {STEPS}" in proc.stdout
    want, got = checkpoint_tensors(ref_dir, STEPS), checkpoint_tensors(resumed, STEPS)
    assert sorted(want) == sorted(got)
    assert any("optimizer" in name for name in want)
    for name in want:
        a, b = np.asarray(want[name]), np.asarray(got[name])
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert (a.tobytes() == b.tobytes() if a.dtype != object else np.array_equal(a, b)), name


def test_resume_with_other_elastic_settings_is_refused(reference):
    from elastic.pretrain import ElasticError, check_resume_settings
    ref_dir, _ = reference
    stored = json.loads((ref_dir / "elastic.json").read_text())
    assert check_resume_settings(str(ref_dir), stored).endswith("elastic.json")
    with pytest.raises(ElasticError, match="elastic settings"):
        check_resume_settings(str(ref_dir), {**stored, "num_sampled": 0})


# ------------------------------------------------------------------------------- (c) objective
@pytest.fixture(scope="module")
def in_process(tiny_data):
    """hp, shards and vocab size of the tiny model, no dropout (for in-process comparisons)."""
    import glob
    from data.vocab import special_token_ids
    from pretrain.hparams import make_hparams
    pattern, vocab = tiny_data
    hp = make_hparams(None, tiny_hparams(model_hparam_overrides={
        **ELASTIC_MODEL, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
        {"seed": 7})
    size, special = special_token_ids(vocab, None)
    return hp, sorted(glob.glob(pattern)), size, special


def one_batch(task):
    batch = next(iter(task.dataset(0)))
    return batch, task.loss_denominators(batch)


def test_full_model_loss_is_plain_pretrainings(in_process):
    """Same hp -> same initial weights; the elastic step's ELECTRA part equals plain
    pre-training's loss and metrics bit for bit, and with no sub-networks the elastic loss IS
    the plain loss (the objective is reused, not rewritten)."""
    import tensorflow as tf
    from elastic.pretrain import ElasticPretrainingTask
    from pretrain.task import PretrainingTask
    hp, files, vocab_size, special = in_process
    plain = PretrainingTask(hp, files, vocab_size, special)
    plain.build()
    batch, denominators = one_batch(plain)
    step = tf.constant(3, tf.int64)
    plain_loss, plain_metrics = plain.compute(batch, step, denominators)

    def elastic(**kw):
        task = ElasticPretrainingTask(hp, files, vocab_size, special, WIDTHS, DEPTHS, **kw)
        task.build()
        for a, b in zip(plain.pretrainer.weights, task.pretrainer.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        return task.compute(batch, step, denominators)

    loss, metrics = elastic(num_sampled=1)
    assert float(metrics["electra_loss"]) == float(plain_loss)
    for key, value in plain_metrics.items():
        np.testing.assert_array_equal(np.asarray(metrics[key]), np.asarray(value), err_msg=key)
    small = float(metrics["small_disc_loss"]) / float(denominators["disc"])
    sampled = float(metrics["sampled_disc_loss"]) / float(denominators["disc"])
    assert float(loss) == pytest.approx(float(plain_loss) + 50.0 * (small + sampled), rel=1e-5)

    loss, metrics = elastic(num_sampled=0, include_smallest=False)
    assert float(loss) == float(plain_loss) and "small_disc_loss" not in metrics


def test_cells_drawn_are_a_function_of_seed_and_step(in_process):
    from elastic.pretrain import ElasticPretrainingTask, ElasticError
    hp, files, vocab_size, special = in_process
    grid = dict(widths=(1, 0.75, 0.5, 0.25), depths=(1, 0.75, 0.5))
    a = ElasticPretrainingTask(hp, files, vocab_size, special, num_sampled=2, **grid)
    b = ElasticPretrainingTask(hp, files, vocab_size, special, num_sampled=2, **grid)
    assert a.smallest == (0.25, 0.5) and len(a.pool) == 10
    draws = [a.sampled_cells(step) for step in range(40)]
    assert draws == [b.sampled_cells(step) for step in range(40)]
    for cells in draws:
        assert len(set(cells)) == 2 and not {(1.0, 1.0), (0.25, 0.5)} & set(cells)
    assert len({cell for cells in draws for cell in cells}) == 10   # every cell comes up
    with pytest.raises(ElasticError, match="num_sampled"):
        ElasticPretrainingTask(hp, files, vocab_size, special, WIDTHS, DEPTHS, num_sampled=3)


def run_main(argv, capsys):
    """elastic.pretrain.main on `argv` in this process -> (exit code, stderr)."""
    import run_pretraining
    from absl import flags
    from elastic.pretrain import define_flags, main
    define_flags(flags)
    run_pretraining.FLAGS.unparse_flags()
    try:
        run_pretraining.FLAGS(argv)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main([argv[0]])
    finally:
        run_pretraining.FLAGS.unparse_flags()
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("flag, message", [
    ("--elastic_widths=1,2", "error: --elastic_widths"),
    ("--elastic_depths=", "error: --elastic_depths"),
    ("--num_sampled=3", "error: --num_sampled 3"),          # 2 cells besides full + smallest
])
def test_bad_elastic_flags_are_one_line_errors(flag, message, tiny_data, tmp_path, capsys):
    pattern, vocab = tiny_data
    code, err = run_main(["elastic.pretrain", f"--pretrain_tfrecords={pattern}",
                          f"--vocab_file={vocab}", f"--model_dir={tmp_path / 'bad'}",
                          "--hparams=" + json.dumps(elastic_hparams()),
                          "--elastic_widths=1,0.5", "--elastic_depths=1,0.5", flag], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith(message), err
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------------------------------- (e) (L, H) grid
# The rebuttal's grid at tiny scale: hidden 64 (no embedding projection: the shared tables are cut)
# with cells H 32 / 64 x L 1 / 2; H 32 keeps 1 + 1 heads of 16 and FFN 64.
HIDDEN_MODEL = {**ELASTIC_MODEL, "embedding_size": 64}
HIDDEN_CELLS = [(layers, hidden) for hidden in (64, 32) for layers in (2, 1)]
HIDDEN_STEPS = 3
HIDDEN_FLAGS = (f"--num_train_steps={HIDDEN_STEPS}", f"--save_checkpoints_steps={HIDDEN_STEPS}",
                "--log_every_n_steps=1", "--seed=7", "--elastic_hidden_sizes=32,64",
                "--elastic_layers=1,2", "--num_sampled=1", "--extract_cells")


@pytest.fixture(scope="module")
def hidden_reference(tiny_data, tmp_path_factory):
    pattern, vocab = tiny_data
    model_dir = tmp_path_factory.mktemp("elastic_hidden") / "run"
    cmd = [sys.executable, "-m", "elastic.pretrain", f"--pretrain_tfrecords={pattern}",
           f"--vocab_file={vocab}", f"--model_dir={model_dir}",
           "--hparams=" + json.dumps(tiny_hparams(model_hparam_overrides=HIDDEN_MODEL)),
           *HIDDEN_FLAGS]
    proc = subprocess.run(cmd, cwd=str(REPO), env=driver_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return model_dir, proc


def test_hidden_grid_pretraining_runs_and_its_cells_load(hidden_reference):
    """`python -m elastic.pretrain --elastic_hidden_sizes=32,64 --elastic_layers=1,2`: the losses
    add up (smallest cell L1_H32 every step + 1 sampled), the expected cost covers every (L, H)
    cell, and every extracted cell loads and equals the sliced forward of the trained model."""
    from keras import ops
    from elastic.slicing import Subnet, sliced_forward
    from model import ConvBertModel
    model_dir, proc = hidden_reference
    summary = read_summary(model_dir)
    assert summary["global_step"] == HIDDEN_STEPS and len(summary["history"]) == HIDDEN_STEPS
    for record in summary["history"]:
        for key in ("loss", "electra_loss", "small_disc_loss", "sampled_disc_loss"):
            assert np.isfinite(record[key]), (key, record)
        want = record["electra_loss"] + 50.0 * (record["small_disc_loss"]
                                                + record["sampled_disc_loss"])
        assert record["loss"] == pytest.approx(want, rel=1e-6)
    assert "L1_H32 disc loss" in proc.stdout
    assert "hidden sizes 64,32 x layers 2,1" in proc.stdout
    elastic = summary["elastic"]
    assert (elastic["hidden_sizes"], elastic["layers"]) == ([64, 32], [2, 1])
    assert "widths" not in elastic
    share = elastic["cell_share_of_discriminator"]
    assert sorted(share) == sorted(f"L{n}_H{h}" for n, h in HIDDEN_CELLS)
    assert share["L2_H64"] == 1.0
    assert share["L2_H64"] > share["L1_H64"] > share["L1_H32"] > 0
    assert share["L2_H64"] > share["L2_H32"] > share["L1_H32"]
    assert 1.0 < elastic["relative_step_flops"] < 2.0

    full = ConvBertModel.from_pretrained(str(model_dir))
    assert full.embeddings_project is None
    rng = np.random.default_rng(0)
    ids = rng.integers(5, full.config.vocab_size, (3, 20)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 14:] = 0
    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    assert sorted(os.listdir(model_dir / "cells")) == sorted(share)
    for layers, hidden in HIDDEN_CELLS:
        cell = ConvBertModel.from_pretrained(str(model_dir / "cells" / f"L{layers}_H{hidden}"))
        assert (cell.config.num_hidden_layers, cell.config.hidden_size) == (layers, hidden)
        assert cell.config.embedding_size == hidden
        subnet = Subnet.for_hidden(full.config, hidden, num_layers=layers)
        got = ops.convert_to_numpy(cell(inputs, training=False))
        want = ops.convert_to_numpy(sliced_forward(full, inputs, subnet, training=False))
        assert got.shape == (3, 20, hidden)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_hidden_grid_cells_and_draws(in_process):
    """The (L, H) grid in-process (no training): cells, the smallest, the pool, draws a function
    of (seed, step), the resume settings, one-line errors for cells that do not fit."""
    from elastic.pretrain import ElasticError, ElasticPretrainingTask
    hp, files, vocab_size, special = in_process     # hidden 64, embedding 32 (a projection)

    def task(**kw):
        return ElasticPretrainingTask(hp, files, vocab_size, special, **kw)
    a = task(hidden_sizes=(16, 64, 48), layers=(1, 2), num_sampled=2)
    assert a.cells == [(2, 64), (1, 64), (2, 48), (1, 48), (2, 16), (1, 16)]
    assert a.smallest == (1, 16) and len(a.pool) == 4 and (2, 64) not in a.pool
    assert a.subnets[(1, 48)].hidden == 48 and a.subnets[(2, 64)].hidden is None
    assert a.settings() == {"hidden_sizes": [64, 48, 16], "layers": [2, 1], "num_sampled": 2,
                            "include_smallest": True}
    b = task(hidden_sizes="64,48,16", layers="2,1", num_sampled=2)
    draws = [a.sampled_cells(step) for step in range(30)]
    assert draws == [b.sampled_cells(step) for step in range(30)]
    assert {cell for cells in draws for cell in cells} == set(a.pool)
    assert task(hidden_sizes=(48,), num_sampled=0).cells == [(2, 48)]   # default: all layers
    for kw, message in [
            (dict(hidden_sizes=(40,)), "multiple of the head size 16"),
            (dict(hidden_sizes=(32, 64)), "cell L2_H32: cannot extract hidden size 32"),
            (dict(hidden_sizes=(16,), layers=(3,)), "layer count must be an integer in"),
            (dict(layers=(1,)), "needs --elastic_hidden_sizes"),
            (dict(hidden_sizes=(64,), layers=(2,)), "only the full cell")]:
        with pytest.raises(ElasticError, match=message) as e:
            task(num_sampled=0, **kw)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("flags, message", [
    (("--elastic_hidden_sizes=32,64", "--elastic_widths=1,0.5"),
     "error: --elastic_hidden_sizes defines an (L, H) grid"),
    (("--elastic_layers=1",), "error: --elastic_layers gives the layer counts"),
    (("--elastic_hidden_sizes=32,x",), "error: --elastic_hidden_sizes: not a comma list"),
    (("--elastic_hidden_sizes=24,64", "--num_sampled=0"), "error: --elastic_hidden_sizes / "
     "--elastic_layers: hidden size 24"),
])
def test_bad_hidden_grid_flags_are_one_line_errors(flags, message, tiny_data, tmp_path, capsys):
    pattern, vocab = tiny_data
    code, err = run_main(["elastic.pretrain", f"--pretrain_tfrecords={pattern}",
                          f"--vocab_file={vocab}", f"--model_dir={tmp_path / 'bad'}",
                          "--hparams=" + json.dumps(elastic_hparams()), *flags], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith(message), err
    assert not (tmp_path / "bad").exists()
