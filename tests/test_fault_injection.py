"""Interruptions (issue 19 item 2): a run killed anywhere, rerun with the same command, ends where
a run never interrupted ends; a preemption notice (SIGTERM) or Ctrl-C (SIGINT) saves first.

The kills are real: SIGKILL of the driver process. To land one inside a checkpoint save, an export
or a shard commit, the driver runs under `_FAULT_RUNNER`, which wraps one library function so the
process kills itself at that point (test-only; nothing in the toolkit has a hook). Pre-training is
compared bit for bit (deterministic mode on CPU), fine-tuning by its dev metrics.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    REPO, driver_cmd, driver_env, tiny_data, tiny_hparams)
from tests.test_bad_inputs import stderr_lines

STEPS = 8
SAVE_EVERY = 4
FLAGS = (f"--num_train_steps={STEPS}", f"--save_checkpoints_steps={SAVE_EVERY}",
         "--log_every_n_steps=1", "--keep_checkpoint_max=3", "--seed=7", "--deterministic")

# Runs a driver script (argv[1:]) with one fault armed by FAULT=<point>:<arg>:
#   checkpoint:N   SIGKILL inside ckpt-N's save. TensorFlow: after its data files are written,
#                  before the `checkpoint` index names it (CheckpointManager._record_state);
#                  KERAS_BACKEND=jax: after ckpt-N.safetensors is written whole under its temporary
#                  name, before the rename that publishes it (base/fileio.py write_bytes_atomic);
#   export:N       SIGKILL before the N-th write of a generator export's weights (the
#                  discriminator's export of that save is already on disk; either backend);
#   shard_write:N  SIGKILL in the N-th ShardWriter.write call (shards still `.incomplete`);
#   shard_commit:N SIGKILL before the N-th rename of an `.incomplete` shard (some published).
_FAULT_RUNNER = r'''
import os, runpy, signal, sys
point, arg = os.environ["FAULT"].split(":")
arg = int(arg)
calls = [0]

def kill():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

def counted(original, wanted=lambda *a, **k: True):
    def wrapper(*a, **k):
        if wanted(*a, **k):
            calls[0] += 1
            if calls[0] == arg:
                kill()
        return original(*a, **k)
    return wrapper

if point == "checkpoint" and os.environ.get("KERAS_BACKEND") == "jax":
    replace = os.replace
    def _replace(src, dst, *a, **k):
        if os.path.basename(dst) == f"ckpt-{arg}.safetensors":
            kill()
        return replace(src, dst, *a, **k)
    os.replace = _replace
elif point == "checkpoint":
    from tensorflow.python.checkpoint import checkpoint_management as cm
    record = cm.CheckpointManager._record_state
    def _record_state(self):
        if str(self._latest_checkpoint).endswith(f"-{arg}"):
            kill()
        return record(self)
    cm.CheckpointManager._record_state = _record_state
elif point == "export":
    from base import fileio
    fileio.write_bytes_atomic = counted(
        fileio.write_bytes_atomic,
        lambda path, data: "generator" in str(path) and str(path).endswith(".safetensors"))
elif point == "shard_write":
    from data import shard_writer
    shard_writer.ShardWriter.write = counted(shard_writer.ShardWriter.write)
elif point == "shard_commit":
    import tensorflow as tf
    tf.io.gfile.rename = counted(tf.io.gfile.rename,
                                 lambda src, *a, **k: str(src).endswith(".incomplete"))
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
'''


def _faulty(cmd, fault, env=None):
    """`cmd` (python script args...) run under the fault runner with FAULT=fault (and `env`)."""
    assert cmd[0] == sys.executable
    return [sys.executable, "-c", _FAULT_RUNNER, *cmd[1:]], driver_env({**(env or {}),
                                                                        "FAULT": fault})


def _run(cmd, env=None, timeout=300):
    return subprocess.run(cmd, cwd=str(REPO), env=env or driver_env(), capture_output=True,
                          text=True, timeout=timeout)


def _state(model_dir):
    """{variable: bytes} of the final checkpoint (weights, optimizer slots, step, RNG). Not
    `save_counter`: it counts saves, and an interrupted run saves once more."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", f"ckpt-{STEPS}"))
    return {name: np.asarray(reader.get_tensor(name)).tobytes()
            for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def _exports(model_dir):
    return {part: (model_dir / part / "model.safetensors").read_bytes()
            for part in ("discriminator", "generator")}


def _assert_same_run(reference, rerun):
    want, got = _state(reference), _state(rerun)
    assert sorted(want) == sorted(got)
    assert any("optimizer" in name for name in want)
    assert [n for n in want if want[n] != got[n]] == []
    assert _exports(reference) == _exports(rerun)


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """The uninterrupted pre-training run every interrupted one must end equal to."""
    model_dir = tmp_path_factory.mktemp("fault_reference") / "model"
    proc = _run(driver_cmd(tiny_data, model_dir, tiny_hparams(), *FLAGS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return model_dir


def _start_and_signal(cmd, env, sig, at_line):
    """Start `cmd`, send `sig` once stdout shows a line starting with `at_line`; -> (code, out,
    err)."""
    proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(at_line):
                proc.send_signal(sig)
                break
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(seen) + out, err


def test_sigterm_saves_then_the_rerun_equals_an_uninterrupted_run(tiny_data, reference,
                                                                   tmp_path):
    model_dir = tmp_path / "model"
    cmd = driver_cmd(tiny_data, model_dir, tiny_hparams(), *FLAGS)
    code, out, err = _start_and_signal(cmd, driver_env(), signal.SIGTERM, "step 2/")
    assert code == 128 + signal.SIGTERM, err[-3000:]
    lines = stderr_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    # The checkpoint is of the step the signal arrived at (2, or 3 if the next call had begun),
    # not of a save boundary.
    assert lines[0].startswith("error: stopped by SIGTERM at step "), lines
    step = int(lines[0].split("at step ")[1].split("/")[0])
    assert step in (2, 3) and f"ckpt-{step}" in lines[0]
    assert (model_dir / "checkpoints" / f"ckpt-{step}.index").exists()
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout
    _assert_same_run(reference, model_dir)


def test_sigkill_inside_a_checkpoint_save(tiny_data, reference, tmp_path):
    model_dir = tmp_path / "model"
    cmd = driver_cmd(tiny_data, model_dir, tiny_hparams(), *FLAGS)
    faulty, env = _faulty(cmd, f"checkpoint:{STEPS}")
    proc = _run(faulty, env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    # The data of ckpt-8 is on disk but the index still names ckpt-4: a resume takes ckpt-4.
    ckpts = model_dir / "checkpoints"
    assert list(ckpts.glob(f"ckpt-{STEPS}.data-*"))
    assert f"ckpt-{SAVE_EVERY}\"" in (ckpts / "checkpoint").read_text()
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and f"ckpt-{SAVE_EVERY}" in proc.stdout
    _assert_same_run(reference, model_dir)


def test_sigkill_inside_the_final_export(tiny_data, reference, tmp_path):
    model_dir = tmp_path / "model"
    cmd = driver_cmd(tiny_data, model_dir, tiny_hparams(), *FLAGS)
    # Exports happen at every save: the 2nd generator write is the final one (step 8).
    faulty, env = _faulty(cmd, f"export:{STEPS // SAVE_EVERY}")
    proc = _run(faulty, env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    # The generator export on disk is the previous save's, never a torn file.
    assert _exports(model_dir)["generator"] != _exports(reference)["generator"]
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same_run(reference, model_dir)


# ------------------------------------------------------------------------------ shard building
def _builder_cmd(corpus, vocab, output):
    return [sys.executable, str(REPO / "build_pretraining_dataset.py"), f"--corpus_dir={corpus}",
            f"--vocab_file={vocab}", f"--output_dir={output}", "--num_shards=3",
            "--max_seq_length=32", "--noprogress"]


def _digests(directory):
    """The shards' SHA-256 (the summary JSON holds timings, so it is only checked to exist)."""
    assert (directory / "pretrain_data.summary.json").exists()
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("pretrain_data.tfrecord*"))}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(corpus dir, vocab, the uninterrupted build's output dir)."""
    from data.default_corpus import default_vocab_file
    root = tmp_path_factory.mktemp("fault_builder")
    corpus = root / "corpus"
    corpus.mkdir()
    words = ("the a of and to in is was it for on that with as by at from this be are first "
             "second sentence here follows new document one more text some words game").split()
    rng = np.random.default_rng(0)
    for f in range(3):
        lines = [" ".join(rng.choice(words, size=12)) for _ in range(120)]
        (corpus / f"doc{f}.txt").write_text("\n".join(lines) + "\n")
    vocab = default_vocab_file()
    output = root / "reference"
    proc = _run(_builder_cmd(corpus, vocab, output))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return corpus, vocab, output


@pytest.mark.parametrize("fault", ["shard_write:2", "shard_commit:2"])
def test_sigkill_while_building_shards(built, tmp_path, tiny_data, fault):
    corpus, vocab, reference = built
    output = tmp_path / "shards"
    cmd = _builder_cmd(corpus, vocab, output)
    faulty, env = _faulty(cmd, fault)
    proc = _run(faulty, env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    # What the kill left cannot be trained on by mistake: either nothing is published, or a
    # glob over the set names the first missing shard in one line.
    published = sorted(p.name for p in output.iterdir() if not p.name.endswith(".incomplete"))
    if fault.startswith("shard_write"):
        assert published == []
    else:
        assert published == ["pretrain_data.tfrecord-0-of-3"]
        train = _run(driver_cmd((str(output / "pretrain_data.tfrecord*"), tiny_data[1]),
                                tmp_path / "model", tiny_hparams(), "--num_train_steps=1"))
        lines = stderr_lines(train.stderr)
        assert train.returncode == 1 and len(lines) == 1, train.stderr[-3000:]
        assert "pretrain_data.tfrecord-1-of-3: missing, only its unfinished" in lines[0]
        assert not (tmp_path / "model" / "checkpoints").exists()
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _digests(output) == _digests(reference)


# ------------------------------------------------------------------------------ fine-tuning
# A tiny step takes ~16 ms: the signal goes at step 3 of 30, so a test process slowed by a busy
# machine still lands it well inside the training loop (at step 3, or a few steps later).
FT_STEPS, FT_SIGNAL_AT = 30, 3


def _finetune_cmd(glue_dir, vocab, model_dir):
    from tests.finetune.test_run_finetuning import TINY_HPARAMS
    hparams = dict(TINY_HPARAMS, max_train_examples=96)
    return [sys.executable, str(REPO / "run_finetuning.py"), "--task_names=sst",
            f"--data_dir={glue_dir}", f"--vocab_file={vocab}", f"--model_dir={model_dir}",
            "--hparams", json.dumps(hparams), "--max_seq_length=32",
            f"--max_train_steps={FT_STEPS}"]


def _dev_metrics(model_dir):
    path = model_dir / "results" / "sst_dev_metrics.json"
    return json.loads(path.read_text())["metrics"]


@pytest.fixture(scope="module")
def finetune_inputs():
    from tests.conftest import shared_path
    return shared_path("data", "glue"), shared_path("data", "vocab", "bert-uncased-vocab.txt")


@pytest.fixture(scope="module")
def finetune_reference(finetune_inputs, tmp_path_factory):
    """The uninterrupted run both signals are compared with (made once)."""
    glue_dir, vocab = finetune_inputs
    reference = tmp_path_factory.mktemp("finetune_reference")
    proc = _run(_finetune_cmd(glue_dir, vocab, reference))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return reference


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_finetuning_reruns_to_the_same_metrics(finetune_inputs, finetune_reference,
                                                           tmp_path, sig):
    glue_dir, vocab = finetune_inputs
    reference = finetune_reference
    model_dir = tmp_path / "interrupted"
    cmd = _finetune_cmd(glue_dir, vocab, model_dir)
    code, out, err = _start_and_signal(cmd, driver_env(), sig, f"sst: step {FT_SIGNAL_AT}/")
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        assert code == 128 + signal.SIGINT, err[-3000:]
        errors = [line for line in stderr_lines(err) if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
        assert stderr_lines(err)[-1] == errors[0]
        # The step the signal arrived at, or a later one if the test process was slow to send it.
        match = re.match(r"error: sst: stopped by SIGINT at step (\d+)/(\d+); this run writes "
                         r"no checkpoints", errors[0])
        assert match, errors
        assert FT_SIGNAL_AT <= int(match[1]) < FT_STEPS and int(match[2]) == FT_STEPS, errors
    # Nothing of the interrupted run reads as a result.
    assert not (model_dir / "results" / "sst_dev_metrics.json").exists()
    proc = _run(cmd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _dev_metrics(model_dir) == _dev_metrics(reference)


# ------------------------------------------------------------------------------ the catalogue
def test_the_interruption_rows_name_tests_that_exist():
    """docs/RELIABILITY.md's interruption section names its tests (`test_x` for this module's,
    `tests/….py::test_x` for another's): each exists, and each test of this module is named."""
    doc = (REPO / "docs" / "RELIABILITY.md").read_text()
    section = doc.split("## Interruptions and fault injection", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(?:(tests/[\w/]+\.py)::)?(test_\w+)(?:\[[^\]`]*\])?`", section))
    here = "tests/test_fault_injection.py"
    assert len(named) >= 8
    for path, name in sorted(named):
        source = (REPO / (path or here)).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"{path or here}::{name} is not a test"
    own = set(re.findall(r"^def (test_\w+)\(", (REPO / here).read_text(), re.M))
    assert own <= {name for path, name in named if path in ("", here)}, \
        f"docs/RELIABILITY.md does not name {sorted(own - {n for _, n in named})}"
