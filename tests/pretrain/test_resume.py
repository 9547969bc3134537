"""Resume: a run killed with SIGKILL and rerun ends bit-identical to a run never killed.

Deterministic mode on CPU: op determinism, fixed seeds, data order a function of the seed, and the
already-consumed batches skipped on resume. Model weights, optimizer slots and step are compared
bit for bit from the final checkpoints, and the exported discriminators byte for byte.
"""
import os
import random
import signal
import subprocess

import numpy as np

from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    driver_cmd, driver_env, run_driver, tiny_data, tiny_hparams)

STEPS = 16
SAVE_EVERY = 4
FLAGS = (f"--num_train_steps={STEPS}", f"--save_checkpoints_steps={SAVE_EVERY}",
         "--log_every_n_steps=1", "--keep_checkpoint_max=3", "--seed=7", "--deterministic")


def checkpoint_tensors(model_dir):
    import tensorflow as tf
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", f"ckpt-{STEPS}"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def test_resume_after_kill_is_bit_identical(tiny_data, tmp_path):
    hparams = tiny_hparams()  # dropout on: its RNG state must be restored too
    reference = tmp_path / "reference"
    proc = run_driver(tiny_data, reference, hparams, *FLAGS)
    assert proc.returncode == 0, proc.stderr[-3000:]

    killed = tmp_path / "killed"
    kill_at = random.Random().randint(SAVE_EVERY + 1, STEPS - 2)
    proc = subprocess.Popen(driver_cmd(tiny_data, killed, hparams, *FLAGS),
                            env=driver_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(f"step {kill_at}/"):
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-2000:]
    # At least one checkpoint was written before the kill, and not the last one.
    assert os.path.exists(killed / "checkpoints" / "checkpoint")
    assert not os.path.exists(killed / "checkpoints" / f"ckpt-{STEPS}.index")

    proc = run_driver(tiny_data, killed, hparams, *FLAGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout

    want, got = checkpoint_tensors(reference), checkpoint_tensors(killed)
    assert sorted(want) == sorted(got)
    assert any("optimizer" in name for name in want)  # slots are part of the state
    for name in want:
        a, b = np.asarray(want[name]), np.asarray(got[name])
        assert a.dtype == b.dtype and a.shape == b.shape, name
        same = a.tobytes() == b.tobytes() if a.dtype != object else np.array_equal(a, b)
        assert same, name
    for part in ("discriminator", "generator"):
        a = (reference / part / "model.safetensors").read_bytes()
        b = (killed / part / "model.safetensors").read_bytes()
        assert a == b, part
