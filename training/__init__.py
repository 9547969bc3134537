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

# The drivers' shared flags (training/flags.py, pure Python): the package's names for them.
from training.flags import DISTRIBUTION_FLAGS, PRECISIONS, define_distribution_flags  # noqa: E402,F401


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
