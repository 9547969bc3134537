"""Run state on disk: checkpoints (keep-N, exact resume) and atomic writes of files and directories.

Every path goes through tf.io.gfile, so a model_dir may be a bucket (gs://...) or TensorFlow's
in-memory ram:// filesystem (tests).
"""
import json

import tensorflow as tf


class TrainingError(RuntimeError):
    """The run cannot continue; the message is one line for the user."""


CHECKPOINT_NAME = "ckpt"


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def restore_latest(checkpoint, directory):
    """Restore the newest checkpoint in `directory` into `checkpoint`; its path, or None if there
    is none. A checkpoint of another shape (model size, vocab, precision) is a TrainingError."""
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
        self.scratch_dir = scratch_dir
        self.manager = tf.train.CheckpointManager(
            checkpoint, scratch_dir or directory, max_to_keep=keep,
            checkpoint_name=CHECKPOINT_NAME)

    def save(self, step):
        path = self.manager.save(checkpoint_number=int(step))
        if self.scratch_dir:
            remove_tree(self.scratch_dir)
        return path


def checkpoint_step(path):
    """The step a checkpoint path `.../ckpt-<step>` was saved at (None for None)."""
    return None if path is None else int(path.rsplit("-", 1)[-1])


def remove_tree(path):
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


def write_text_atomic(text, path):
    """`text` to `path` atomically (model/fileio.py: temporary file beside it + rename)."""
    from model import fileio
    fileio.write_text_atomic(path, text)


def write_json_atomic(obj, path, indent=2):
    write_text_atomic(json.dumps(obj, indent=indent) + "\n", path)
