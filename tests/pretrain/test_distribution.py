"""Distribution: 2 mirrored replicas and 2 multi-worker processes train like one device.

Same global batch, same seed, dropout off (dropout masks are per replica): the per-step losses of
MirroredStrategy over 2 logical CPU devices and of MultiWorkerMirroredStrategy with 2 local worker
processes (TF_CONFIG on 127.0.0.1) match OneDeviceStrategy within 1e-5 (relative).
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from tests.pretrain.test_run_pretraining import (  # noqa: F401 (tiny_data is a fixture)
    REPO, NO_DROPOUT, driver_cmd, driver_env, read_summary, run_driver, tiny_data, tiny_hparams)

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
    with pytest.raises(DistributionError, match="conflicts with --distribution=mirrored"):
        make_strategy("mirrored", tpu="my-tpu")
    with pytest.raises(DistributionError, match="--tpu_zone / --gcp_project need --tpu"):
        make_strategy(None, tpu_zone="us-central1-a")
    env = os.environ.pop("TF_CONFIG", None)
    try:
        with pytest.raises(DistributionError, match="TF_CONFIG"):
            make_strategy("multi_worker")
    finally:
        if env is not None:
            os.environ["TF_CONFIG"] = env


class FakeResolver:
    """Stands in for TPUClusterResolver: records its arguments, contacts nothing."""
    calls = []

    def __init__(self, tpu=None, zone=None, project=None):
        FakeResolver.calls.append(("resolver", tpu, zone, project))


def test_tpu_name_alone_reaches_the_resolver(monkeypatch):
    """`--tpu=NAME --tpu_zone=Z --gcp_project=P` (no --distribution) resolves NAME in Z / P,
    connects, initializes the TPU system and builds TPUStrategy: all with fakes, no network."""
    import tensorflow as tf
    from training import distribution
    FakeResolver.calls = []
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", FakeResolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster",
                        lambda r: FakeResolver.calls.append(("connect", type(r).__name__)))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system",
                        lambda r: FakeResolver.calls.append(("initialize", type(r).__name__)))
    monkeypatch.setattr(tf.distribute, "TPUStrategy",
                        lambda r: ("TPUStrategy", type(r).__name__))
    strategy = distribution.make_strategy(None, tpu="my-v3-8", tpu_zone="europe-west4-a",
                                          gcp_project="my-project")
    assert strategy == ("TPUStrategy", "FakeResolver")
    assert FakeResolver.calls == [("resolver", "my-v3-8", "europe-west4-a", "my-project"),
                                  ("connect", "FakeResolver"), ("initialize", "FakeResolver")]
    FakeResolver.calls = []
    distribution.make_strategy("tpu", tpu="local")        # on a TPU VM: the resolver's literal
    assert FakeResolver.calls[0] == ("resolver", "local", None, None)

    # A TPU that never answers stops the run within the time limit, naming it.
    def hang(resolver):
        import time
        time.sleep(30)
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", hang)
    with pytest.raises(distribution.DistributionError,
                       match=r"cannot reach TPU my-v3-8 \(zone z\): no answer within 1s"):
        distribution._connect_tpu("my-v3-8", zone="z", timeout=1)


def test_unreachable_tpu_address_is_one_line_within_60s(tmp_path):
    """The acceptance command: nothing listens on 127.0.0.1:1 (loopback only)."""
    import time
    start = time.time()
    proc = subprocess.run(
        [sys.executable, str(REPO / "run_pretraining.py"), "--model_size=base",
         "--tpu=grpc://127.0.0.1:1", f"--model_dir={tmp_path / 'x'}"],
        cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
        text=True, timeout=120)
    assert time.time() - start < 60
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("error: cannot reach TPU grpc://127.0.0.1:1: ") and "Traceback" not in \
        proc.stderr
    assert not (tmp_path / "x").exists()
