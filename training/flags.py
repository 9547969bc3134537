"""What every driver's flags share: the --precision values and the strategy flags (name, type,
help), defined with a driver's own absl registry. Pure Python: the drivers import it before
TensorFlow or JAX starts, and `training` re-exports it (`from training import PRECISIONS`).

The strategy flags mean the same on both backends where they can: on TensorFlow they pick a
tf.distribute strategy (training/distribution.py `make_strategy`), on Keras-on-JAX the local
devices of a `keras.distribution.DataParallel` (training/jax_distribution.py `jax_num_devices`), or
with multi_worker every device of several processes joined on JAX's runtime (`start_processes`,
with the JAX-only flags below)."""

# The --precision values of every driver (Keras policies in training/core.py).
PRECISIONS = ("fp32", "bf16", "mixed_float16")

# The strategy flags of every driver: name -> (type, help).
DISTRIBUTION_FLAGS = {
    "distribution": (str, "one_device (default) | mirrored | multi_worker | tpu (implied by "
                          "--tpu). On KERAS_BACKEND=jax: mirrored (the default: every local "
                          "device, the batch split over them) | one_device | multi_worker "
                          "(several processes on JAX's distributed runtime: --coordinator_address "
                          "etc., or found in a TPU pod slice / SLURM / Open MPI environment)."),
    "tpu": (str, "TPU name, grpc://host:port or 'local' (on a TPU VM); selects TPUStrategy "
                 "(TensorFlow; JAX sees a TPU VM's chips as local devices)."),
    "tpu_zone": (str, "GCE zone of --tpu (default: the TPU VM's metadata / gcloud config)."),
    "gcp_project": (str, "GCP project of --tpu (default: the metadata / gcloud config)."),
    "num_cpu_devices": (int, "With --distribution=mirrored and no GPU: split the CPU into this "
                             "many logical devices (tests; on JAX with any --distribution)."),
    # KERAS_BACKEND=jax only (TensorFlow's several hosts: multi_worker + TF_CONFIG).
    "coordinator_address": (str, "KERAS_BACKEND=jax, several processes: host:port of process 0 "
                                 "(it serves JAX's coordinator there); implies "
                                 "--distribution=multi_worker."),
    "num_processes": (int, "KERAS_BACKEND=jax, several processes: how many (with "
                           "--coordinator_address)."),
    "process_id": (int, "KERAS_BACKEND=jax, several processes: this one's index, 0 .. "
                        "num_processes - 1 (0 serves the coordinator and writes the outputs)."),
    "distributed_timeout": (int, "KERAS_BACKEND=jax, several processes: seconds to wait for the "
                                 "coordinator and every process to join (default 300)."),
    "peer_timeout": (int, "KERAS_BACKEND=jax, several processes: seconds without a heartbeat "
                          "after which a process counts as lost (killed, its host gone) and the "
                          "others are stopped (default 60)."),
}

# The flags above that only Keras-on-JAX reads.
JAX_ONLY_FLAGS = ("coordinator_address", "num_processes", "process_id", "distributed_timeout",
                  "peer_timeout")


def jax_only_flags_error(flag_values):
    """The one-line error of a TensorFlow run given a JAX-only flag, else None."""
    given = [f"--{name}" for name in JAX_ONLY_FLAGS if getattr(flag_values, name) is not None]
    if given:
        return (f"{', '.join(given)}: for KERAS_BACKEND=jax (several processes on JAX's "
                "runtime); TensorFlow's several hosts: --distribution=multi_worker with TF_CONFIG")
    return None


def define_distribution_flags(define_string, define_integer):
    """Defines DISTRIBUTION_FLAGS with a driver's absl DEFINE_* functions."""
    for name, (kind, help_text) in DISTRIBUTION_FLAGS.items():
        (define_integer if kind is int else define_string)(name, None, help_text)
