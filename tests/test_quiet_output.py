"""Commands print no TensorFlow C++ start-up lines (base/command.py): not from the filter itself,
not from a driver; CONVBERT_TF_LOGS=1 brings them back (so the filter is what removes them)."""
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

NOISE = ("I0000", "WARNING: All log messages", "oneDNN")
SNIPPET = ("from base.command import quiet_tensorflow; quiet_tensorflow(); import keras; "
           "import sys; print(keras.ops.ones(1)); print('own line', file=sys.stderr)")


def _run(args, **extra_env):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "CONVBERT_TF_LOGS")}
    # a fresh interpreter, not a fork of the tests' zygote: its start-up lines are the subject
    env.update(PYTHONPATH=str(REPO_ROOT), CONVBERT_TEST_ZYGOTE="0", **extra_env)
    return subprocess.run([sys.executable, *args], cwd=str(REPO_ROOT), env=env,
                          capture_output=True, text=True, timeout=300)


def noisy_lines(proc):
    return [line for line in (proc.stdout + proc.stderr).splitlines()
            if line.startswith(NOISE[:2]) or NOISE[2] in line]


def test_start_up_lines_dropped_and_other_lines_kept():
    quiet = _run(["-c", SNIPPET])
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert noisy_lines(quiet) == []
    assert "own line" in quiet.stderr
    loud = _run(["-c", SNIPPET], CONVBERT_TF_LOGS="1")
    assert loud.returncode == 0 and noisy_lines(loud), "TensorFlow printed nothing to filter"


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
