"""The tf.distribute strategy of a pre-training run, from `--distribution`.

* `one_device`   - OneDeviceStrategy on the first GPU, else the CPU.
* `mirrored`     - MirroredStrategy over all local GPUs (or `num_cpu_devices` logical CPUs, which
                   is how the tests run it without a GPU).
* `multi_worker` - MultiWorkerMirroredStrategy; the cluster comes from the TF_CONFIG environment
                   variable (one process per worker, worker 0 is the chief).
* `tpu`          - TPUStrategy; `--tpu` is a TPU name, a grpc:// address or "local" (TPU VM).

Must run before TensorFlow creates any tensor (logical devices and the multi-worker cluster are
fixed at start-up), which run_pretraining.py does first thing.
"""
import json
import os

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker", "tpu")


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


def make_strategy(name="one_device", tpu=None, num_cpu_devices=0):
    """Returns the tf.distribute.Strategy for `name`; raises DistributionError."""
    if name not in STRATEGIES:
        raise DistributionError(f"unknown --distribution {name!r}; choose one of "
                                f"{', '.join(STRATEGIES)}")
    if tpu and name != "tpu":
        raise DistributionError("--tpu needs --distribution=tpu")
    if name == "tpu":
        if not tpu:
            raise DistributionError("--distribution=tpu needs --tpu (a TPU name, grpc:// address "
                                    "or 'local')")
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu="" if tpu == "local" else tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as e:
            raise DistributionError(f"cannot reach TPU {tpu!r}: "
                                    f"{str(e).strip().splitlines()[0]}") from None
        return tf.distribute.TPUStrategy(resolver)
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
