"""One training core for every objective (pre-training RTD / MLM, GLUE, SQuAD, ...).

    from training import Task, TrainSettings, TrainingCore
    core = TrainingCore(task, settings, strategy)
    core.build()
    result = core.fit(dataset_fn, checkpoint_dir=..., log_dir=...)

A `Task` (training/task.py) supplies what is its own: its models, its loss and metrics for one
batch, how a window of metrics reads, and what to export. The core (training/core.py) owns the
rest: precision and loss scaling, the optimizer and schedule, gradient clipping, the distributed
step, checkpoints with exact resume, the step loop with its non-finite guard, progress line,
TensorBoard scalars and the run summary. See docs/ARCHITECTURE.md.
"""
__all__ = ["DISTRIBUTION_FLAGS", "PRECISIONS", "Task", "TrainSettings", "TrainingCore", "TrainingError"]

# The --precision values of every driver (Keras policies in training/core.py).
PRECISIONS = ("fp32", "bf16", "mixed_float16")

# The strategy flags of every driver (training/distribution.py): name -> (type, help).
DISTRIBUTION_FLAGS = {
    "distribution": (str, "one_device (default) | mirrored | multi_worker | tpu (implied by "
                          "--tpu)."),
    "tpu": (str, "TPU name, grpc://host:port or 'local' (on a TPU VM); selects TPUStrategy."),
    "tpu_zone": (str, "GCE zone of --tpu (default: the TPU VM's metadata / gcloud config)."),
    "gcp_project": (str, "GCP project of --tpu (default: the metadata / gcloud config)."),
    "num_cpu_devices": (int, "With --distribution=mirrored and no GPU: split the CPU into this "
                             "many logical devices (tests)."),
}


def define_distribution_flags(define_string, define_integer):
    """Defines DISTRIBUTION_FLAGS with a driver's absl DEFINE_* functions."""
    for name, (kind, help_text) in DISTRIBUTION_FLAGS.items():
        (define_integer if kind is int else define_string)(name, None, help_text)


def __getattr__(name):
    # Lazy: `training.progress` (pure Python) is used by data builders and benchmarks that must not
    # pay for importing TensorFlow.
    if name == "TrainingCore":
        from training.core import TrainingCore
        return TrainingCore
    if name == "TrainSettings":
        from training.settings import TrainSettings
        return TrainSettings
    if name == "TrainingError":
        from training.loop import TrainingError
        return TrainingError
    if name == "Task":
        from training.task import Task
        return Task
    raise AttributeError(f"module 'training' has no attribute {name!r}")
