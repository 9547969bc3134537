"""Pre-training on Keras-on-JAX (pretrain/jax_trainer.py) through run_pretraining.py with
KERAS_BACKEND=jax, in subprocesses where importing TensorFlow fails: it trains, exports, resumes
exactly after a SIGKILL, and 2 virtual CPU devices (DataParallel) give the one-device losses
within 1e-5. The first run is where TensorFlow IS importable: the JAX path never imports it all
the same, and its TensorBoard scalars (written without TensorFlow) read back with TensorBoard's
own reader. A SIGKILL inside a checkpoint save or inside the export leaves nothing a rerun
misreads, and the rerun ends byte-identical (tests/test_fault_injection.py's fault runner). One
run killed inside its checkpoint save serves both the resume test and the fault test (each
reruns a copy of its directory)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import TENSORFLOW_WATCH
from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    REPO, driver_cmd, driver_env, read_summary, tiny_data, tiny_hparams)

pytest.importorskip("jax")

# Runs the driver with `import tensorflow` made impossible: the JAX path must not need it.
NO_TF = """
import runpy, sys
class BlockTF:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith(("tensorflow.", "tensorflow_text")):
            raise ImportError("TensorFlow is blocked in this test")
sys.meta_path.insert(0, BlockTF())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_jax(data, model_dir, *flags, devices=1, program=NO_TF):
    cmd = driver_cmd(data, model_dir, tiny_hparams(), "--log_every_n_steps=1", "--seed=2",
                     *flags)
    if devices > 1:
        cmd.append(f"--num_cpu_devices={devices}")
    env = driver_env({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    proc = subprocess.run([sys.executable, "-c", program, *cmd[1:]], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def tiny_data_vocab():
    from data.default_corpus import default_vocab_file
    return default_vocab_file()


def losses(model_dir):
    return [h["loss"] for h in read_summary(model_dir)["history"]]


@pytest.fixture(scope="module")
def one_device(tiny_data, tmp_path_factory):  # noqa: F811
    """The reference run, where TensorFlow is importable (exit status 3 had it been imported)."""
    model_dir = tmp_path_factory.mktemp("jax_one") / "model"
    proc = run_jax(tiny_data, model_dir, "--num_train_steps=4", "--save_checkpoints_steps=2",
                   program=TENSORFLOW_WATCH)
    return model_dir, proc


def test_tensorflow_is_never_imported(one_device):
    """Issue #50: not even where it is installed (Keras' set_random_seed imports it; the toolkit
    seeds through training/seeds.py)."""
    proc = one_device[1]
    assert proc.returncode == 0 and "tensorflow was imported" not in proc.stderr
    import importlib.util
    assert importlib.util.find_spec("tensorflow") is not None   # it was there to import


def test_tensorboard_scalars(one_device):
    """<model_dir>/train/ as on TensorFlow: every record of the summary's history, tag by tag,
    read by TensorBoard's own reader (training/summaries.py writes it without TensorFlow)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    model_dir = one_device[0]
    history = read_summary(model_dir)["history"]
    reader = EventAccumulator(str(model_dir / "train"), size_guidance={"tensors": 0})
    reader.Reload()
    tags = set(reader.Tags()["tensors"])
    assert tags == {"loss", "gen_loss", "gen_accuracy", "disc_loss", "disc_accuracy", "disc_auc",
                    "learning_rate", "grad_norm", "sequences_per_second"}
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    for tag in tags:
        written = [h for h in history if np.isfinite(h[tag])]   # a NaN (AUC) is left out
        events = reader.Tensors(tag)
        assert [e.step for e in events] == [h["step"] for h in written], tag
        np.testing.assert_allclose([float(tensor_util.make_ndarray(e.tensor_proto))
                                    for e in events], [h[tag] for h in written], rtol=1e-6)
        assert reader.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"


def test_trains_exports_and_summarizes(one_device):
    model_dir, proc = one_device
    summary = read_summary(model_dir)
    assert summary["backend"] == "jax" and summary["global_step"] == 4
    assert [h["step"] for h in summary["history"]] == [1, 2, 3, 4]
    assert all(np.isfinite(h["loss"]) and 0.0 <= h["disc_auc"] <= 1.0 or np.isnan(h["disc_auc"])
               for h in summary["history"])
    assert "step 4/4 (100.0%) | loss" in proc.stdout and "JAX: 1 cpu device(s)" in proc.stdout
    assert "JAX compilation cache: " in proc.stdout         # training/compile_cache.py
    assert sorted(p.name for p in (model_dir / "jax_checkpoints").iterdir()) == [
        "ckpt-2.safetensors", "ckpt-4.safetensors"]
    hp = json.loads((model_dir / "hparams.json").read_text())
    assert hp["num_train_steps"] == 4
    # the first call's line says its compilation (log every step: on the step-1 line); the
    # vocabulary lies beside the checkpoints, where fine-tuning's --init_checkpoint finds it
    assert "first call " in proc.stdout.split("step 1/4 (25.0%)")[1].splitlines()[0]
    from finetune.encoder_source import find_vocab_file
    assert find_vocab_file(None, str(model_dir)) == str(model_dir / "vocab.txt")
    assert (model_dir / "vocab.txt").read_bytes() == open(tiny_data_vocab(), "rb").read()
    # The export loads in the TensorFlow toolkit (this process) like any other.
    from model import ConvBertModel
    model = ConvBertModel.from_pretrained(str(model_dir / "discriminator"))
    assert model.config.hidden_size == hp["model_hparam_overrides"]["hidden_size"]


def _fault_run(tiny_data, model_dir, fault=None):  # noqa: F811
    """The driver on JAX (4 steps, ckpt-2 and ckpt-4), under tests/test_fault_injection.py's
    fault runner with FAULT=fault (SIGKILL at that point), or plainly."""
    from tests.test_fault_injection import _faulty
    cmd = driver_cmd(tiny_data, model_dir, tiny_hparams(), "--log_every_n_steps=1", "--seed=2",
                     "--num_train_steps=4", "--save_checkpoints_steps=2")
    backend = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    command, env = _faulty(cmd, fault, backend) if fault else (cmd, driver_env(backend))
    return subprocess.run(command, cwd=str(REPO), env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def killed_in_save(tiny_data, tmp_path_factory):  # noqa: F811
    """One run SIGKILLed inside its final checkpoint's save (after step 4: ckpt-4's bytes written
    under the temporary name, not yet renamed): (its model directory, the process). The resume
    test and the fault test each rerun a copy of that directory."""
    model_dir = tmp_path_factory.mktemp("jax_killed") / "model"
    return model_dir, _fault_run(tiny_data, model_dir, "checkpoint:4")


def _copy_of(killed_in_save, tmp_path):
    import shutil
    model_dir = tmp_path / "model"
    shutil.copytree(killed_in_save[0], model_dir)
    return model_dir


def test_resume_after_kill_is_exact(one_device, killed_in_save, tiny_data, tmp_path):  # noqa: F811
    """Killed (SIGKILL) after step 4, before its ckpt-4 was whole (the fault test's first kill,
    shared: `killed_in_save`), rerun: resumes from ckpt-2 and ends where the run never killed
    ended (same schedule, data stream, masking / dropout RNG state)."""
    import signal
    assert killed_in_save[1].returncode == -signal.SIGKILL, killed_in_save[1].stderr[-3000:]
    model_dir = _copy_of(killed_in_save, tmp_path)
    assert not (model_dir / "pretraining_summary.json").exists()
    rerun = run_jax(tiny_data, model_dir, "--num_train_steps=4", "--save_checkpoints_steps=2")
    assert "ckpt-2.safetensors at step 2" in rerun.stdout
    whole = losses(one_device[0])
    np.testing.assert_allclose(losses(model_dir), whole[2:], rtol=1e-6)
    from safetensors.numpy import load_file
    a = load_file(str(model_dir / "discriminator" / "model.safetensors"))
    b = load_file(str(one_device[0] / "discriminator" / "model.safetensors"))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_sigkill_inside_a_checkpoint_save_then_inside_the_export(
        one_device, killed_in_save, tiny_data, tmp_path):  # noqa: F811
    """The JAX rows of tests/test_fault_injection.py's kills, one run after the other: SIGKILL
    inside the final checkpoint's save (ckpt-4's bytes written under the temporary name, not yet
    renamed: `killed_in_save`, rerun here on a copy of its directory), the rerun killed inside the
    final export (the discriminator published, the generator's weights not written), a third run
    completes it. Each kill leaves the newest whole checkpoint and no half-written file a resume
    or a user reads; the end is byte-identical to the run never killed: the final checkpoint
    (weights, Adam slots, step, examples) and both exports."""
    import signal
    reference = one_device[0]

    def files(directory):
        return {p.relative_to(directory).as_posix(): p.read_bytes()
                for p in sorted(directory.rglob("*")) if p.is_file()}

    proc = killed_in_save[1]
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert "step 4/4" in proc.stdout
    model_dir = _copy_of(killed_in_save, tmp_path)
    ckpts = model_dir / "jax_checkpoints"
    # ckpt-2 whole; ckpt-4 only under its temporary name, which no resume globs.
    assert (ckpts / "ckpt-2.safetensors").read_bytes() == (
        reference / "jax_checkpoints" / "ckpt-2.safetensors").read_bytes()
    assert not (ckpts / "ckpt-4.safetensors").exists()
    assert [p.name for p in ckpts.glob("ckpt-4.safetensors.tmp-*")], sorted(ckpts.iterdir())
    proc = _fault_run(tiny_data, model_dir, "export:1")
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert "ckpt-2.safetensors at step 2" in proc.stdout
    # The killed save's temporary file is gone; no generator export, not even a torn one.
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt-2.safetensors", "ckpt-4.safetensors"]
    assert (model_dir / "discriminator" / "model.safetensors").exists()
    assert not (model_dir / "generator").exists()
    assert list(model_dir.glob(".generator.tmp-*"))        # its unfinished export, hidden
    proc = _fault_run(tiny_data, model_dir)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "ckpt-4.safetensors at step 4" in proc.stdout
    assert (ckpts / "ckpt-4.safetensors").read_bytes() == (
        reference / "jax_checkpoints" / "ckpt-4.safetensors").read_bytes()
    for part in ("discriminator", "generator"):
        assert files(model_dir / part) == files(reference / part), part
    assert not [p for p in model_dir.rglob("*") if ".tmp-" in p.name]   # nothing left over


def test_two_devices_match_one(one_device, tiny_data, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    proc = run_jax(tiny_data, model_dir, "--num_train_steps=4", "--save_checkpoints_steps=4",
                   devices=2)
    assert "JAX: 2 cpu device(s) (DataParallel)" in proc.stdout
    np.testing.assert_allclose(losses(model_dir), losses(one_device[0]), rtol=1e-5)


def test_bf16(tiny_data, tmp_path):  # noqa: F811
    model_dir = tmp_path / "model"
    proc = run_jax(tiny_data, model_dir, "--num_train_steps=2", "--save_checkpoints_steps=2",
                   "--precision=bf16")
    # 2 steps under TINY's 2-step warm-up: said before the first step, as on TensorFlow
    assert "note: all 2 steps of this run lie inside its 2-step learning-rate warm-up" in \
        proc.stdout.split("step 1/2")[0]
    summary = read_summary(model_dir)
    assert summary["precision"] == "bf16" and all(np.isfinite(losses(model_dir)))
    from safetensors.numpy import load_file
    weights = load_file(str(model_dir / "discriminator" / "model.safetensors"))
    assert {str(v.dtype) for v in weights.values()} == {"float32"}   # fp32 master weights


def test_tensorflow_flags_are_refused(tiny_data, tmp_path):  # noqa: F811
    cmd = driver_cmd(tiny_data, tmp_path / "m", None, "--tpu=local")
    env = driver_env({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    proc = subprocess.run([sys.executable, "-c", NO_TF, *cmd[1:]], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --tpu is for TensorFlow")
    assert not (tmp_path / "m").exists()


def test_distribution_flags_on_jax(monkeypatch):
    """The TensorFlow drivers' --distribution vocabulary on JAX (both drivers,
    training/jax_distribution.jax_num_devices): every local device by default and for mirrored, one
    for one_device, --num_cpu_devices through XLA_FLAGS, multi_worker several processes; what only
    TensorFlow has is one line."""
    import re
    from training.jax_distribution import jax_num_devices
    from training.loop import TrainingError
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo")
    assert jax_num_devices() is None and jax_num_devices("mirrored") is None
    assert jax_num_devices("one_device") == 1
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo"
    assert jax_num_devices("mirrored", num_cpu_devices=2) is None
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_foo --xla_force_host_platform_device_count=2"
    # multi_worker: every device of every process (start_processes joins them; its test:
    # tests/pretrain/test_jax_multiprocess.py); none asked for: one process
    assert jax_num_devices("multi_worker") is None
    from training.jax_distribution import start_processes
    assert start_processes("mirrored") == (0, 1)
    with pytest.raises(TrainingError, match="one_device and several processes"):
        start_processes("one_device", coordinator_address="127.0.0.1:1")
    for flags, message in (({"distribution": "tpu"}, "--distribution=tpu is for TensorFlow"),
                           ({"tpu": "local"}, "--tpu is for TensorFlow; on JAX"),
                           ({"gcp_project": "p"}, "--gcp_project is for TensorFlow"),
                           ({"distribution": "mirored"}, "unknown --distribution 'mirored'")):
        with pytest.raises(TrainingError, match=re.escape(message)):
            jax_num_devices(**flags)


def test_gpu_benchmark_runs_the_cores_program(tmp_path):
    """benchmarks/gpu_pretrain.py (what a GPU machine runs) times the JAX training core's
    program at each size it is given; its CPU smoke mode keeps it from rotting between GPU runs.
    One size: every size runs the same code (base only adds compile time)."""
    env = driver_env({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"})
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-c", NO_TF, "benchmarks/gpu_pretrain.py", "--tiny",
                           "--model_size=small", f"--output={out}"], cwd=str(REPO),
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [line.split() for line in proc.stdout.splitlines() if " seq/s " in line]
    assert [line[:2] for line in lines] == [["ConvBERT", "small"], ["ELECTRA", "small"]]
    assert all(np.isfinite(float(line[-1])) for line in lines)      # the loss
    assert "ConvBERT / ELECTRA step time, small:" in proc.stdout
    results = json.loads(out.read_text())
    for size in ("small",):
        rows = results["sizes"][size]["models"]
        assert rows["ConvBERT"]["sequences_per_second"] > 0 and rows["ELECTRA"]["mfu"] is None
        assert results["sizes"][size]["convbert_over_electra_step_time"] == pytest.approx(
            rows["ConvBERT"]["step_ms"] / rows["ELECTRA"]["step_ms"], rel=1e-3)
