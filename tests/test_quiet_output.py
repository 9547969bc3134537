"""Commands print no TensorFlow C++ start-up lines (base/command.py): not from the filter itself,
not from a driver; CONVBERT_TF_LOGS=1 brings them back (so the filter is what removes them).
Nor, on a machine without the device, TensorFlow's `failed call to cuInit` (printed when a
device is first used, after the import) or JAX's `Unable to initialize backend 'tpu'`. Nor, at
run time, oneDNN's DT_INT64 note (Keras's take_along_axis in a tf.function) or gloo's
connection lines (`kept_off_console`; in a several-process run:
tests/pretrain/test_jax_multiprocess.py)."""
import os
import subprocess
import sys

import pytest

from base.command import absent_devices
from tests.conftest import REPO_ROOT

NOISE = ("I0000", "WARNING: All log messages", "oneDNN")
# Only where the device is absent: on a GPU (TPU) machine such a line is a real error.
ABSENT_DEVICE_NOISE = {"gpu": "failed call to cuInit", "tpu": "Unable to initialize backend 'tpu'"}
# Keras's take_along_axis on TensorFlow transposes int64 indices: in a function, oneDNN's note
# `E0000 ... util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512` (any CPU).
SNIPPET = ("from base.command import quiet_tensorflow; quiet_tensorflow(); import keras; "
           "import sys; import tensorflow as tf; print(keras.ops.ones(1)); "
           "print(tf.function(lambda x, i: keras.ops.take_along_axis(x, i, axis=1))("
           "tf.ones((2, 3, 4)), tf.zeros((2, 1, 1), 'int32')).shape); "
           "print('own line', file=sys.stderr)")
# A JAX command as the drivers are: absl's app.run (Python logging at INFO), JAX's backends
# initialised; JAX_PLATFORMS unset (as a user has it), so JAX tries every backend it knows.
JAX_SNIPPET = """
from base.command import quiet_tensorflow
quiet_tensorflow()
from absl import app
def main(argv):
    import jax, sys
    print(jax.devices()); print('own line', file=sys.stderr)
app.run(main)
"""


def _run(args, **extra_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "CONVBERT_TF_LOGS",
                        "JAX_PLATFORMS")}
    # a fresh interpreter, not a fork of the tests' zygote: its start-up lines are the subject
    env.update(PYTHONPATH=str(REPO_ROOT), CONVBERT_TEST_ZYGOTE="0", **extra_env)
    return subprocess.run([sys.executable, *args], cwd=str(REPO_ROOT), env=env,
                          capture_output=True, text=True, timeout=300)


def noisy_lines(proc):
    absent = [text for kind, text in ABSENT_DEVICE_NOISE.items() if kind in absent_devices()]
    return [line for line in (proc.stdout + proc.stderr).splitlines()
            if line.startswith(NOISE[:2]) or NOISE[2] in line
            or any(text in line for text in absent)]


def test_start_up_lines_dropped_and_other_lines_kept():
    quiet = _run(["-c", SNIPPET])
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert noisy_lines(quiet) == []
    assert "own line" in quiet.stderr
    loud = _run(["-c", SNIPPET], CONVBERT_TF_LOGS="1")
    assert loud.returncode == 0 and noisy_lines(loud), "TensorFlow printed nothing to filter"
    if "oneDNN custom operations are on" in loud.stderr:    # oneDNN's graph pass runs
        assert "oneDNN supports DT_INT64 only" in loud.stderr


def test_runtime_lines_dropped_where_printed(capfd, monkeypatch):
    """`kept_off_console`: what is written on the file descriptor itself (as C++ writes) is
    kept, but for gloo's connection lines where every peer is connected; CONVBERT_TF_LOGS=1
    keeps all."""
    from base.command import GLOO_CONNECTED, ONEDNN_NOTE, kept_off_console
    gloo = ("[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer "
            "ranks is : 3\n")
    short = gloo.replace("to 3 peer", "to 2 peer")             # a peer missing: shown
    monkeypatch.delenv("CONVBERT_TF_LOGS", raising=False)
    with kept_off_console(1, GLOO_CONNECTED):
        os.write(1, f"before\n{gloo}{short}after\n".encode())
    assert capfd.readouterr().out == f"before\n{short}after\n"
    # Two devices' threads writing at once, piece by piece (as in a CI run, 2026-11-29): both
    # lines dropped; the same with a peer missing in one of them is kept as written.
    mixed = ("[Gloo] Rank [Gloo] Rank 0 is connected to 1 peer ranks. 0Expected number of "
             "connected peer ranks is : 1\n is connected to 1 peer ranks. Expected number of "
             "connected peer ranks is : 1\n")
    missing = mixed.replace("is : 1\n is", "is : 2\n is")
    for written, shown in ((mixed, ""), (missing, missing), (gloo + mixed + gloo, ""),
                           ("[Gloo] Rank 0 is\n", "[Gloo] Rank 0 is\n"),
                           ("[Gloo] Rank 1[Gloo] Rank 02 is connected to  is connected to 33 peer "
                            "ranks.  peer ranks. Expected number of connected peer ranks is : "
                            "Expected number of connected peer ranks is : 3\n3\n", "")):
        with kept_off_console(1, GLOO_CONNECTED):
            os.write(1, f"before\n{written}after\n".encode())
        assert capfd.readouterr().out == f"before\n{shown}after\n", written
    monkeypatch.setenv("CONVBERT_TF_LOGS", "1")
    with kept_off_console(1, GLOO_CONNECTED):
        os.write(1, gloo.encode())
    assert capfd.readouterr().out == gloo
    assert ONEDNN_NOTE.match(
        "E0000 00:00:1795868546.351288   28644 util.cc:131] oneDNN supports DT_INT64 only on "
        "platforms with AVX-512. Falling back to the default Eigen-based implementation if "
        "present.")


def test_a_driver_is_quiet(tmp_path):
    proc = _run(["run_finetuning.py", "--print_glue_table", f"--model_dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "GLUE dev" in proc.stdout
    assert noisy_lines(proc) == []


def test_a_module_command_is_quiet():
    """`python -m pretrain.export_step` imports TensorFlow when it is imported (the other `-m`
    commands do in main), and its package comes first: quiet before either. No flags: its
    one-line usage error, and nothing else."""
    proc = _run(["-m", "pretrain.export_step"])
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "error: the following arguments are required: --model_dir, --step, --output_dir"]


def test_jax_command_is_quiet_about_an_absent_tpu():
    """JAX logs `Unable to initialize backend 'tpu': ... libtpu.so` at INFO where libtpu is
    missing; base/command.py drops it where no TPU is present, and only that line."""
    pytest.importorskip("jax")
    if "tpu" not in absent_devices():
        pytest.skip("a TPU is present: its backend errors are real")
    quiet = _run(["-c", JAX_SNIPPET], KERAS_BACKEND="jax")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert noisy_lines(quiet) == [] and "own line" in quiet.stderr
    loud = _run(["-c", JAX_SNIPPET], KERAS_BACKEND="jax", CONVBERT_TF_LOGS="1")
    assert loud.returncode == 0, loud.stderr[-2000:]
    if "libtpu" not in loud.stderr:
        pytest.skip("this JAX reports no TPU backend error to filter")
    assert "Unable to initialize backend 'tpu'" in loud.stderr


def test_a_machine_with_the_devices_keeps_their_lines(monkeypatch):
    """On a GPU or TPU machine the same lines are real errors: kept (in process, faking the
    device nodes this machine lacks)."""
    import logging
    from base import command
    cuinit = ("E0000 00:00:1795803423.475417   31719 cuda_platform.cc:52] failed call to cuInit: "
              "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
    assert command.start_up_lines({"gpu", "tpu"}).match(cuinit)
    assert not command.start_up_lines({"tpu"}).match(cuinit)          # an NVIDIA device is there
    assert command.start_up_lines(set()).match("I0000 00:00:1.0 1 port.cc:153] oneDNN custom")

    def record(backend):
        return logging.LogRecord("jax._src.xla_bridge", logging.INFO, "xla_bridge.py", 849,
                                 "Unable to initialize backend '%s': %s", (backend, "no"), None)
    assert not command._AbsentJaxBackend({"tpu", "gpu"}).filter(record("tpu"))
    assert command._AbsentJaxBackend({"gpu"}).filter(record("tpu"))  # a TPU is there
    assert command._AbsentJaxBackend({"tpu"}).filter(record("cuda"))
    assert not command._AbsentJaxBackend({"gpu"}).filter(record("cuda"))
    assert command._AbsentJaxBackend({"tpu", "gpu"}).filter(record("rocm"))  # not judged here

    real_exists = os.path.exists
    monkeypatch.setattr(command.os.path, "exists",
                        lambda path: path == "/dev/nvidiactl" or real_exists(path))
    monkeypatch.setattr(command.glob, "glob", lambda pattern: (
        ["/dev/accel0"] if pattern == "/dev/accel*" else []))
    assert command.absent_devices() == set()
