"""Distribution: 2 mirrored replicas and 2 multi-worker processes train like one device.

Same global batch, same seed, dropout off (dropout masks are per replica): the per-step losses of
MirroredStrategy over 2 logical CPU devices and of MultiWorkerMirroredStrategy with 2 local worker
processes (TF_CONFIG on 127.0.0.1) match OneDeviceStrategy within 1e-5 (relative).
"""
import json
import os
import socket
import subprocess

import pytest

from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    NO_DROPOUT, driver_cmd, driver_env, read_summary, run_driver, tiny_data, tiny_hparams)

STEPS = 3
FLAGS = (f"--num_train_steps={STEPS}", "--log_every_n_steps=1", f"--save_checkpoints_steps={STEPS}",
         "--seed=11")


def dist_hparams():
    return tiny_hparams(model_hparam_overrides=NO_DROPOUT, train_batch_size=8, deterministic=True)


def losses(model_dir):
    history = read_summary(model_dir)["history"]
    assert [h["step"] for h in history] == list(range(1, STEPS + 1))
    return [(h["loss"], h["gen_loss"], h["disc_loss"]) for h in history]


def assert_same_losses(got, want):
    for step, (g, w) in enumerate(zip(got, want), 1):
        for name, a, b in zip(("loss", "gen_loss", "disc_loss"), g, w):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (step, name, a, b)


@pytest.fixture(scope="module")
def one_device(tiny_data, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("one_device") / "model"
    proc = run_driver(tiny_data, model_dir, dist_hparams(), *FLAGS, "--distribution=one_device")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return losses(model_dir)


def test_distribution_mirrored_two_cpus_matches_one_device(one_device, tiny_data, tmp_path):
    model_dir = tmp_path / "model"
    proc = run_driver(tiny_data, model_dir, dist_hparams(), *FLAGS, "--distribution=mirrored",
                      "--num_cpu_devices=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MirroredStrategy with 2 replica(s)" in proc.stdout
    assert_same_losses(losses(model_dir), one_device)
    # The weights after training are mirrored-identical and exported once.
    from model import ConvBertModel
    assert ConvBertModel.from_pretrained(str(model_dir)).config.hidden_size == 64


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def test_distribution_multi_worker_two_processes_matches_one_device(one_device, tiny_data,
                                                                   tmp_path):
    model_dir = tmp_path / "model"
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        procs.append(subprocess.Popen(
            driver_cmd(tiny_data, model_dir, dist_hparams(), *FLAGS,
                       "--distribution=multi_worker"),
            env=driver_env({"TF_CONFIG": json.dumps(tf_config)}), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for code, out, err in outputs:
        assert code == 0, err[-3000:]
    assert "MultiWorkerMirroredStrategy with 2 replica(s)" in outputs[0][1]
    assert_same_losses(losses(model_dir), one_device)
    assert not (model_dir / ".workers").exists() or not any((model_dir / ".workers").iterdir())


def test_distribution_bad_settings_are_one_line_errors():
    from training.distribution import DistributionError, make_strategy
    with pytest.raises(DistributionError, match="choose one of"):
        make_strategy("horovod")
    with pytest.raises(DistributionError, match="needs --tpu"):
        make_strategy("tpu")
    with pytest.raises(DistributionError, match="needs --distribution=tpu"):
        make_strategy("mirrored", tpu="my-tpu")
    env = os.environ.pop("TF_CONFIG", None)
    try:
        with pytest.raises(DistributionError, match="TF_CONFIG"):
            make_strategy("multi_worker")
    finally:
        if env is not None:
            os.environ["TF_CONFIG"] = env
