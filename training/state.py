"""Run state on disk: checkpoints (keep-N, exact resume) and atomic writes of files.

Two checkpoint formats, one per training core, both keep-N and restored exactly:
* TensorFlow (training/core.py): `tf.train.Checkpoint` through `tf.train.CheckpointManager`
  (`CheckpointSaver`, `restore_latest`), `<dir>/ckpt-<step>.index|data-*` + `checkpoint`;
* JAX (training/jax_core.py, no TensorFlow): `<dir>/ckpt-<step>.safetensors`, every variable by
  name plus the step and examples counters (`save_safetensors_checkpoint`,
  `restore_safetensors_checkpoint`).
Every path goes through tf.io.gfile / base/fileio.py, so a model_dir may be a bucket (gs://...)
or TensorFlow's in-memory ram:// filesystem (tests). TensorFlow is imported only by the
TensorFlow format.
"""
import json
import os

import numpy as np

from base import fileio
from training.loop import TrainingError, run_summary


CHECKPOINT_NAME = "ckpt"


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def restore_latest(checkpoint, directory):
    """Restore the newest checkpoint in `directory` into `checkpoint`; its path, or None if there
    is none. A checkpoint of another shape (model size, vocab, precision) is a TrainingError."""
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(directory)
    if latest is None:
        return None
    try:
        status = checkpoint.restore(latest)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise TrainingError(f"the checkpoint {latest} does not match this configuration "
                            f"(another model size, vocab or precision?): {_first_line(e)}") \
            from None
    return latest


class CheckpointSaver:
    """Saves `checkpoint` as <directory>/ckpt-<step>, keeping the last `keep` of them.

    tf.train.CheckpointManager writes the data files first and the `checkpoint` index file last
    (atomically), so a run killed mid-save resumes from the previous checkpoint. Under a
    multi-worker strategy every worker must save (the save has collectives); a worker that is not
    the chief saves into `scratch_dir`, which is removed straight after."""

    def __init__(self, checkpoint, directory, keep, scratch_dir=None):
        import tensorflow as tf
        self.scratch_dir = scratch_dir
        self.manager = tf.train.CheckpointManager(
            checkpoint, scratch_dir or directory, max_to_keep=keep,
            checkpoint_name=CHECKPOINT_NAME)

    def save(self, step):
        path = self.manager.save(checkpoint_number=int(step))
        if self.scratch_dir:
            fileio.remove_tree(self.scratch_dir)
        return path


def checkpoint_step(path):
    """The step a checkpoint path `.../ckpt-<step>` was saved at (None for None)."""
    return None if path is None else int(path.rsplit("-", 1)[-1])


def write_text_atomic(text, path):
    """`text` to `path` atomically (base/fileio.py: temporary file beside it + rename)."""
    fileio.write_text_atomic(path, text)


def write_json_atomic(obj, path, indent=2):
    write_text_atomic(json.dumps(obj, indent=indent) + "\n", path)


# ------------------------------------------------------------------ the JAX core's format
def _safetensors_checkpoints(directory):
    found = []
    for path in fileio.glob(os.path.join(directory, f"{CHECKPOINT_NAME}-*.safetensors")):
        stem = os.path.basename(path)[len(CHECKPOINT_NAME) + 1:-len(".safetensors")]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def save_safetensors_checkpoint(directory, named_state, step, examples, keep):
    """{name: array} + counters as one safetensors file (no pickle), atomically; keep-N."""
    from safetensors.numpy import save
    tensors = {"step": np.asarray([step], np.int64), "examples": np.asarray([examples], np.int64)}
    tensors.update({name: np.asarray(value) for name, value in named_state.items()})
    fileio.makedirs(directory)
    path = os.path.join(directory, f"{CHECKPOINT_NAME}-{step}.safetensors")
    fileio.write_bytes_atomic(path, save(tensors))
    for _, old in _safetensors_checkpoints(directory)[:-keep]:
        fileio.remove(old)
    # A save killed before its rename (SIGKILL, a lost host) left its bytes under write_bytes_
    # atomic's temporary name, which no resume reads: removed, not kept for every kill.
    for stale in fileio.glob(os.path.join(directory, f"{CHECKPOINT_NAME}-*.safetensors.tmp-*")):
        fileio.remove(stale)
    return path


def restore_safetensors_checkpoint(directory, named_state):
    """({name: array}, step, examples, path) from the newest checkpoint, or None."""
    from safetensors.numpy import load
    found = _safetensors_checkpoints(directory) if fileio.isdir(directory) else []
    if not found:
        return None
    path = found[-1][1]
    try:
        tensors = load(fileio.read_bytes(path))
        restored = {name: tensors[name].astype(np.asarray(value).dtype).reshape(np.shape(value))
                    for name, value in named_state.items()}
    except Exception as e:  # noqa: BLE001 -- a model of another shape, a damaged file
        raise TrainingError(f"the checkpoint {path} does not match this configuration "
                            f"(another model size, vocab or precision?): {_first_line(e)}") \
            from None
    return restored, int(tensors["step"][0]), int(tensors["examples"][0]), path


def finish_run(settings, result, started_at, num_params, extra, summary_path=None, writes=True):
    """The end of both cores' fit: the run summary (training/loop.py `run_summary` with the
    backend's `extra`), written atomically to `summary_path` where this process `writes`;
    returned."""
    summary = run_summary(settings, result, started_at, num_params, extra=extra)
    if summary_path is not None and writes:
        write_json_atomic(summary, summary_path)
    return summary
