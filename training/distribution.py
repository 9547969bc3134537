"""The tf.distribute strategy of a pre-training run, from `--distribution`.

* `one_device`   - OneDeviceStrategy on the first GPU, else the CPU.
* `mirrored`     - MirroredStrategy over all local GPUs (or `num_cpu_devices` logical CPUs, which
                   is how the tests run it without a GPU).
* `multi_worker` - MultiWorkerMirroredStrategy; the cluster comes from the TF_CONFIG environment
                   variable (one process per worker, worker 0 is the chief).
* `tpu`          - TPUStrategy; `--tpu` is a TPU name, a grpc:// address or "local" (TPU VM).
                   Naming a TPU is enough: `--tpu=NAME` alone selects it, as ELECTRA's
                   `--use_tpu --tpu_name`. `--tpu_zone` and `--gcp_project` go to
                   TPUClusterResolver (defaults: the TPU VM's metadata / gcloud config).

Must run before TensorFlow creates any tensor (logical devices and the multi-worker cluster are
fixed at start-up), which run_pretraining.py does first thing.
"""
import json
import os
import socket
import threading
import urllib.parse

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")
# How long reaching a TPU may take before the run stops with one line (a TPU that never answers
# would otherwise hang TensorFlow's connect call indefinitely).
TPU_CONNECT_TIMEOUT_S = 45


class DistributionError(ValueError):
    """A distribution setting that cannot work on this machine; one-line message."""


def split_cpu(num_devices):
    """Split the (first) physical CPU into `num_devices` logical devices. Call before TF starts."""
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
    except RuntimeError as e:
        raise DistributionError(f"cannot split the CPU into {num_devices} devices after "
                                f"TensorFlow has started ({e})") from None
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def task_info():
    """(task_type, task_index, num_workers) from TF_CONFIG; ("chief"-like defaults without)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None, 0, 1
    try:
        conf = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DistributionError(f"TF_CONFIG is not valid JSON ({e.msg})") from None
    cluster = conf.get("cluster", {})
    task = conf.get("task", {})
    num = sum(len(cluster.get(k, [])) for k in ("chief", "worker"))
    return task.get("type"), int(task.get("index", 0)), max(1, num)


def is_chief(strategy=None):
    """True in the process that writes checkpoints, exports, logs and summaries."""
    if strategy is not None and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        task_type, task_id = resolver.task_type, resolver.task_id
        return task_type in (None, "chief") or (
            task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs)
    task_type, task_index, _ = task_info()
    return task_type in (None, "chief") or (task_type == "worker" and task_index == 0 and "chief"
                                            not in json.loads(os.environ["TF_CONFIG"])["cluster"])


def _probe_grpc(tpu, timeout):
    """A grpc://host:port TPU address must accept a TCP connection (fails fast, no traceback)."""
    parsed = urllib.parse.urlparse(tpu)
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout):
            pass
    except (OSError, ValueError, TypeError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise DistributionError(f"cannot reach TPU {tpu}: {reason}") from None


def _connect_tpu(tpu, zone=None, project=None, timeout=TPU_CONNECT_TIMEOUT_S):
    """TPUClusterResolver -> connect -> initialize, within `timeout` seconds."""
    if tpu.startswith("grpc://"):
        _probe_grpc(tpu, min(timeout, 10))
    outcome = {}

    def connect():
        try:
            # "local" (a TPU VM's own chips) is the resolver's literal; "" would mean "look in
            # $TPU_NAME" and fail on a TPU VM.
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=tpu, zone=zone, project=project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            outcome["resolver"] = resolver
        except Exception as e:  # noqa: BLE001 -- reported as one line below
            outcome["error"] = e

    thread = threading.Thread(target=connect, daemon=True)   # a hung connect dies with us
    thread.start()
    thread.join(timeout)
    where = "".join(f" ({k} {v})" for k, v in (("zone", zone), ("project", project)) if v)
    if thread.is_alive():
        raise DistributionError(f"cannot reach TPU {tpu}{where}: no answer within {timeout}s")
    if "error" in outcome:
        lines = str(outcome["error"]).strip().splitlines()
        raise DistributionError(f"cannot reach TPU {tpu}{where}: "
                                f"{lines[0] if lines else type(outcome['error']).__name__}")
    return outcome["resolver"]


def make_strategy(name=None, tpu=None, num_cpu_devices=0, tpu_zone=None, gcp_project=None):
    """Returns the tf.distribute.Strategy for `name` (default one_device, or tpu when `tpu` is
    given); raises DistributionError."""
    name = name or ("tpu" if tpu else "one_device")
    if name not in STRATEGIES:
        raise DistributionError(f"unknown --distribution {name!r}; choose one of "
                                f"{', '.join(STRATEGIES)}")
    if tpu and name != "tpu":
        raise DistributionError(f"--tpu selects the TPU strategy; it conflicts with "
                                f"--distribution={name}")
    if (tpu_zone or gcp_project) and name != "tpu":
        raise DistributionError("--tpu_zone / --gcp_project need --tpu")
    if name == "tpu":
        if not tpu:
            raise DistributionError("--distribution=tpu needs --tpu (a TPU name, grpc:// address "
                                    "or 'local')")
        return tf.distribute.TPUStrategy(_connect_tpu(tpu, tpu_zone, gcp_project))
    if name == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            raise DistributionError("--distribution=multi_worker needs the TF_CONFIG environment "
                                    "variable (cluster + task); see docs/PRETRAINING.md")
        task_info()  # validates the JSON
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    gpus = tf.config.list_physical_devices("GPU")
    if name == "mirrored":
        if num_cpu_devices and num_cpu_devices > 1:
            devices = split_cpu(num_cpu_devices)
            return tf.distribute.MirroredStrategy(devices=devices)
        if not gpus:
            return tf.distribute.MirroredStrategy(devices=["/cpu:0"])
        return tf.distribute.MirroredStrategy()
    device = "/gpu:0" if gpus else "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)


def describe(strategy):
    kind = type(strategy).__name__
    for cls, name in ((tf.distribute.MultiWorkerMirroredStrategy, "MultiWorkerMirroredStrategy"),
                      (tf.distribute.TPUStrategy, "TPUStrategy"),
                      (tf.distribute.MirroredStrategy, "MirroredStrategy"),
                      (tf.distribute.OneDeviceStrategy, "OneDeviceStrategy")):
        if isinstance(strategy, cls):
            kind = name
            break
    return f"{kind} with {strategy.num_replicas_in_sync} replica(s)"
