"""GLUE: task registry, TSV readers, metrics and leaderboard files (no model code here)."""
from finetune.glue.leaderboard import (SUBMISSION_FILES, SubmissionError, format_summary,
                                       make_submission, summarize_trials, validate_submission,
                                       write_dev_predictions, write_submission,
                                       write_trials_summary)
from finetune.glue.metrics import compute_metrics, glue_score
from finetune.glue.readers import InputExample, read_examples
from finetune.glue.tasks import GLUE_TASK_NAMES, TASKS, DataError, get_task, normalize_task_name

__all__ = [
    "DataError", "GLUE_TASK_NAMES", "InputExample", "SUBMISSION_FILES", "SubmissionError",
    "TASKS", "compute_metrics", "format_summary", "get_task", "glue_score",
    "make_submission", "normalize_task_name", "read_examples", "summarize_trials", "validate_submission",
    "write_dev_predictions", "write_submission", "write_trials_summary",
]
