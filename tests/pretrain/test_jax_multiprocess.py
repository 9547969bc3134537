"""Several processes on JAX's own distributed runtime (training/jax_distribution.py
`start_processes`, issue 50 item 3): run_pretraining.py (tiny, MLM) as 2 processes x 2 CPU devices
joined on loopback (JAX's coordinator on 127.0.0.1, gloo CPU collectives) trains as 1 process x 4
CPU devices does, the losses of 10 steps within 1e-5; each process reads its own TFRecord file
(input_shares 2: the one-process run reads the same two shares), process 0 alone writes the
model_dir. A SIGKILL of process 1 ends process 0 at once with one line (its next call with process 1
fails), its checkpoint whole; a SIGTERM to process 1 alone stops both at one step (agreed after
every call), where process 0 writes the checkpoint both name; a rerun of both resumes and ends bit
for bit as the pair never interrupted (losses, final checkpoint, exports). Every process writes
the step it compiled to the test's JAX compilation cache (training/compile_cache.py: on the CPU an
entry holds its process's devices), so that the pairs after the first compile nothing.
Loopback only; TensorFlow cannot be imported in any of the processes."""
import json
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.pretrain.test_jax_trainer import NO_TF, losses
from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    REPO, driver_cmd, driver_env, tiny_data, tiny_hparams)

pytest.importorskip("jax")

STEPS = 10


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data, model_dir, *flags, devices, cache=None):
    # BERT's MLM objective: the same machinery as ELECTRA's (whose devices-vs-one check is
    # tests/pretrain/test_jax_trainer.py), half its compile time, compiled by each process.
    hparams = tiny_hparams(input_shares=2, electra_objective=False)
    if cache is not None:
        flags += (f"--jax_cache_dir={cache}",)
    cmd = driver_cmd(data, model_dir, hparams, "--log_every_n_steps=1",
                     "--seed=2", f"--num_train_steps={STEPS}", "--save_checkpoints_steps=5",
                     f"--num_cpu_devices={devices}", *flags)
    env = driver_env({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    return subprocess.Popen([sys.executable, "-c", NO_TF, *cmd[1:]], cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pair(data, model_dir, cache=None):
    """Processes 0 and 1 of 2, 2 CPU devices each, on a free loopback port."""
    address = f"127.0.0.1:{free_port()}"
    return [start(data, model_dir, f"--coordinator_address={address}", "--num_processes=2",
                  f"--process_id={i}", "--distributed_timeout=120", devices=2, cache=cache)
            for i in (0, 1)]


def finish(procs):
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, out[-2000:] + err[-3000:]
        outs.append(out)
    return outs


def stderr_end(err):
    """The end of a process's stderr for an assertion message, without the list of extension
    modules Python's faulthandler adds after a fatal error (an abort's own lines, above it, are
    what tells why)."""
    return err.split("\nExtension modules:")[0][-3000:]


def signal_after(proc, line_start, signum):
    """Sends `signum` to `proc` once its stdout shows a line starting with `line_start`: the
    time it was sent and the lines read until then."""
    read = []
    for line in proc.stdout:
        read.append(line)
        if line.startswith(line_start):
            proc.send_signal(signum)
            return time.time(), "".join(read)
    raise AssertionError(f"no line {line_start!r}: {''.join(read)[-2000:]}")


def test_two_processes_match_one(tiny_data, tmp_path):  # noqa: F811
    one_dir, two_dir, cache = tmp_path / "one", tmp_path / "two", tmp_path / "jax_cache"
    # All three at once: the compiles overlap the other processes' start-up.
    procs = [start(tiny_data, one_dir, devices=4, cache=cache)] + pair(tiny_data, two_dir, cache)
    one, first, second = finish(procs)
    assert "JAX: 4 cpu device(s) (DataParallel)" in one
    for i, out in enumerate((first, second)):
        assert f"JAX distributed: process {i} of 2 (127.0.0.1:" in out
        assert "[Gloo]" not in out       # gloo's connection lines (stdout): base/command.py
        assert "JAX: 4 cpu device(s) over 2 processes (DataParallel)" in out
    assert "the input in 2 shares" in one and "the input in 2 shares" in first
    reference = losses(one_dir)
    assert len(reference) == STEPS
    np.testing.assert_allclose(losses(two_dir), reference, rtol=1e-5)
    summary = json.loads((two_dir / "pretraining_summary.json").read_text())
    assert summary["distribution"] == "JAX cpu x4 over 2 processes"
    assert (two_dir / "discriminator").is_dir() and (two_dir / "hparams.json").is_file()
    # The step's program of each of the 3 processes, each its own entry (not process 0's alone).
    assert len(list(cache.glob("jit_run-*-cache"))) == 3, sorted(cache.iterdir())

    # SIGKILL of process 1 after step 6: process 0's next call with it fails at once (gloo's
    # connection closed) and it ends with one line, no C++ stack, leaving ckpt-5 whole.
    stopped_dir = tmp_path / "stopped"
    procs = pair(tiny_data, stopped_dir, cache)
    signalled, _ = signal_after(procs[1], "step 6/10", signal.SIGKILL)
    (_, lost), _ = [proc.communicate(timeout=120) for proc in procs]
    waited = time.time() - signalled
    assert [proc.returncode for proc in procs] == [1, -signal.SIGKILL], stderr_end(lost)
    assert lost.strip().splitlines()[-1].startswith(
        "error: another process was lost (killed, or its host gone): a call with process 1 of "
        "2 failed ("), stderr_end(lost)
    assert lost.count("error:") == 1 and "Traceback" not in lost and "terminate" not in lost
    assert waited < 60, waited
    assert sorted(p.name for p in (stopped_dir / "jax_checkpoints").glob("*.safetensors")) == [
        "ckpt-5.safetensors"]
    # The rerun of both resumes from it. SIGTERM to process 1 alone after step 7: the processes
    # agree on the stop after every call, so both stop at once at one step, where process 0
    # writes the checkpoint both name; the rerun of both resumes from it and ends as the whole
    # run did.
    procs = pair(tiny_data, stopped_dir, cache)
    signalled, before = signal_after(procs[1], "step 7/10", signal.SIGTERM)
    ends = [proc.communicate(timeout=120) for proc in procs]
    waited = time.time() - signalled
    assert [proc.returncode for proc in procs] == [128 + signal.SIGTERM] * 2, ends
    assert all("ckpt-5.safetensors at step 5" in out for out in (ends[0][0], before))
    lines = [err.strip().splitlines()[-1] for _, err in ends]
    stop = int(lines[1].split("at step ")[1].split("/")[0])
    checkpoint = stopped_dir / "jax_checkpoints" / f"ckpt-{stop}.safetensors"
    assert lines[1] == (f"error: stopped by SIGTERM at step {stop}/{STEPS}; saved {checkpoint}; "
                        "rerun the same command to resume")
    assert lines[0] == (f"error: stopped at step {stop}/{STEPS} with the other processes (one "
                        f"was stopped by SIGTERM); saved {checkpoint}; rerun the same command "
                        "to resume")
    assert 7 <= stop < STEPS and checkpoint.is_file() and waited < 60, (stop, waited)
    for out in finish(pair(tiny_data, stopped_dir, cache)):
        assert f"ckpt-{stop}.safetensors at step {stop}" in out
    np.testing.assert_allclose(losses(stopped_dir), reference[stop:], rtol=1e-5)
    # ... and bit for bit as the pair never interrupted (two_dir): every loss after the resume,
    # the final checkpoint (weights, Adam slots, step, examples) and the exports.
    assert losses(stopped_dir) == losses(two_dir)[stop:]
    final = f"jax_checkpoints/ckpt-{STEPS}.safetensors"
    assert (stopped_dir / final).read_bytes() == (two_dir / final).read_bytes()
    for part in ("discriminator", "generator"):
        for path in sorted((two_dir / part).rglob("*")):
            if path.is_file():
                again = stopped_dir / path.relative_to(two_dir)
                assert again.read_bytes() == path.read_bytes(), again


def test_input_shares(tiny_data, monkeypatch):  # noqa: F811
    """Each process's rows are its shares of the files (no JAX): the processes' parts of a
    global batch, side by side, are the one-process stream of the same input_shares, resumed
    alike; files, batch or processes that do not split evenly are one line naming the input.
    The core's fallback for a task without shares cuts each process's rows out of the global
    batches."""
    import glob
    from data.errors import DataError
    from pretrain.hparams import make_hparams
    from pretrain.task import PretrainingTask, input_shares
    from training import jax_distribution
    files = sorted(glob.glob(tiny_data[0]))
    hp = make_hparams("tiny", overrides={**tiny_hparams(input_shares=2), "vocab_size": 100})
    task = PretrainingTask(hp, files, 100)
    for skip in (0, 3):
        whole = task.host_batches(skip)
        parts = [task.host_batches(skip, process=(i, 2)) for i in (0, 1)]
        for _ in range(2):
            batch, first, second = next(whole), next(parts[0]), next(parts[1])
            assert set(batch) == set(first) == set(second)
            for key, value in batch.items():
                np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), value)
        np.testing.assert_array_equal(batch["example_id"], (skip + 1) * 8 + np.arange(8))
        for stream in [whole] + parts:
            stream.close()
    # process 1 reads file 1 alone (files[1::2])
    from data.tfrecord_io import pretraining_batches
    own = pretraining_batches(files[1:], 4, hp.max_seq_length, seed=hp.seed,
                              shuffle_buffer=hp.shuffle_buffer, workers=1)
    np.testing.assert_array_equal(next(task.host_batches(0, process=(1, 2)))["input_ids"],
                                  next(own)["input_ids"])
    own.close()
    with pytest.raises(DataError, match=r"1 TFRecord file\(s\) do not split evenly over 2 "
                                        r"processes"):
        input_shares(make_hparams("tiny", overrides=tiny_hparams()), files[:1], 2)
    with pytest.raises(DataError, match="input_shares 3 is not a multiple of the 2 processes"):
        input_shares(make_hparams("tiny", overrides=tiny_hparams(input_shares=3)), files, 2)
    assert input_shares(make_hparams("tiny", overrides=tiny_hparams()), files[:1], 1) == 1

    class Whole:                       # a task without shares: global batches only
        def host_batches(self, skip):
            return iter([{"x": np.arange(8) + 8 * skip}])
    monkeypatch.setattr("jax.process_count", lambda: 2)
    monkeypatch.setattr("jax.process_index", lambda: 1)
    np.testing.assert_array_equal(next(jax_distribution.process_batches(Whole(), 1))["x"],
                                  np.arange(12, 16))
