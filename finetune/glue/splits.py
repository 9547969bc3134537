"""Which GLUE splits a fine-tuning run reads, and reading them as it does: the one home of both,
for the run (finetune/glue_task.py, finetune/run.py), the feature files' command
(`python -m finetune.features`, which tokenizes the train split exactly as a run reads it) and
DynaBERT (elastic/).

    glue_eval_splits("mnli")        # [("mnli-m", "dev_matched"), ("mnli-mm", "dev_mismatched")]
    data = load_glue_data("mrpc", hp, data_dir, do_train=True, do_eval=True, do_predict=False)
"""
from __future__ import annotations

from base import fileio
from finetune.console import warn


def glue_eval_splits(task):
    return [("mnli-m", "dev_matched"), ("mnli-mm", "dev_mismatched")] if task == "mnli" \
        else [(task, "dev")]


def glue_predict_splits(task, data_dir, manifest=None):
    """[(submission file stem, split)] of `task`'s test predictions. MNLI's AX (the diagnostic
    set) is there when `data_dir` has diagnostic/diagnostic.tsv or, with a features `manifest`
    (finetune/feature_files.py), when it lists mnli_diagnostic."""
    from finetune.glue.leaderboard import SUBMISSION_FILES
    if task == "mnli":
        splits = [("MNLI-m", "test_matched"), ("MNLI-mm", "test_mismatched")]
        if manifest is not None:
            found = "mnli_diagnostic" in manifest["files"]
            missing = f"{data_dir}: no mnli_diagnostic features"
        else:
            found = fileio.isfile(fileio.join(data_dir, "diagnostic", "diagnostic.tsv"))
            missing = f"{data_dir}/diagnostic/diagnostic.tsv not found"
        if found:
            splits.append(("AX", "diagnostic"))
        else:
            warn(f"{missing}: no AX predictions")
        return splits
    stem = [s for s, (t, _) in SUBMISSION_FILES.items() if t == task][0]
    return [(stem, "test")]


class GlueData:
    """The examples of one GLUE task, read (and checked) before any model work."""

    def __init__(self, task, train, evals, predicts):
        self.task = task
        self.train = train          # [InputExample] or None
        self.evals = evals          # [(result key, [InputExample])]
        self.predicts = predicts    # [(submission stem, [InputExample])]


def load_glue_data(task, hp, data_dir, do_train, do_eval, do_predict):
    """Reads every file the run needs; DataError (file + line) on bad input."""
    from finetune.glue.readers import add_swapped_pairs, read_examples, task_file
    from finetune.glue.tasks import DataError, get_task
    spec = get_task(task)
    train = None
    if do_train:
        train = read_examples(data_dir, task, "train")
        if not train:
            raise DataError(f"{task_file(data_dir, task, 'train')}: no training examples")
        if hp.max_train_examples:
            train = train[:hp.max_train_examples]
        if hp.double_unordered and spec.unordered_pair:
            train = add_swapped_pairs(train)
    evals = []
    if do_eval:
        for key, split in glue_eval_splits(task):
            examples = read_examples(data_dir, task, split)
            if not examples:
                raise DataError(f"{task_file(data_dir, task, split)}: no examples to evaluate")
            if hp.max_eval_examples:
                examples = examples[:hp.max_eval_examples]
            evals.append((key, examples))
    predicts = []
    if do_predict:   # always the whole test file: the leaderboard needs every id
        for stem, split in glue_predict_splits(task, data_dir):
            predicts.append((stem, read_examples(data_dir, task, split)))
    return GlueData(task, train, evals, predicts)
