"""GLUE task registry: names, label lists, metrics and where each split lives on disk.

Task names follow ELECTRA/ConvBERT (`cola sst mrpc sts qqp mnli qnli rte wnli`); the GLUE
spellings (`SST-2`, `STS-B`, ...) are accepted too, case-insensitively. `ax` is the GLUE
diagnostic set: unlabeled, predicted with an MNLI model, and never part of the GLUE score.
"""
from __future__ import annotations

import dataclasses

from data import errors


class DataError(errors.DataError):
    """Bad GLUE input: unknown task, missing file, malformed row or unknown label.

    The message is one line and names the file (and line) at fault, so the command-line tools
    can show it as is (it is a `data.errors.DataError`, like the toolkit's other input errors).
    """


@dataclasses.dataclass(frozen=True)
class GlueTask:
    name: str                      # ELECTRA name, e.g. "sst"
    glue_dir: str                  # directory in the GLUE download, e.g. "SST-2"
    label_list: tuple[str, ...]    # label strings in label-id order; () for regression
    metric_names: tuple[str, ...]  # keys of compute_metrics(...) for this task
    splits: dict[str, str]         # split name -> file path relative to the GLUE data dir
    unordered_pair: bool = False   # sentence order carries no meaning (ELECTRA's double_unordered)
    min_value: float = 0.0         # regression label range (STS-B scores are 0..5)
    max_value: float = 0.0

    @property
    def is_regression(self) -> bool:
        return not self.label_list

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.label_list)


def _standard_splits(glue_dir):
    return {split: f"{glue_dir}/{split}.tsv" for split in ("train", "dev", "test")}

# MNLI label order is ELECTRA's (alphabetical); it fixes the classifier's output units, so keep
# it when loading ELECTRA/ConvBERT fine-tuned checkpoints.
MNLI_LABELS = ("contradiction", "entailment", "neutral")
BINARY_LABELS = ("0", "1")
ENTAILMENT_LABELS = ("entailment", "not_entailment")

TASKS: dict[str, GlueTask] = {
    t.name: t for t in [
        GlueTask("cola", "CoLA", BINARY_LABELS, ("mcc",), _standard_splits("CoLA")),
        GlueTask("sst", "SST-2", BINARY_LABELS, ("accuracy",), _standard_splits("SST-2")),
        GlueTask("mrpc", "MRPC", BINARY_LABELS, ("accuracy", "f1"), _standard_splits("MRPC"),
                 unordered_pair=True),
        GlueTask("sts", "STS-B", (), ("pearson", "spearman"), _standard_splits("STS-B"),
                 unordered_pair=True, min_value=0.0, max_value=5.0),
        GlueTask("qqp", "QQP", BINARY_LABELS, ("accuracy", "f1"), _standard_splits("QQP")),
        GlueTask("mnli", "MNLI", MNLI_LABELS, ("accuracy",), {
            "train": "MNLI/train.tsv",
            "dev": "MNLI/dev_matched.tsv",     # ELECTRA's "dev" for MNLI is the matched set
            "dev_matched": "MNLI/dev_matched.tsv",
            "dev_mismatched": "MNLI/dev_mismatched.tsv",
            "test": "MNLI/test_matched.tsv",
            "test_matched": "MNLI/test_matched.tsv",
            "test_mismatched": "MNLI/test_mismatched.tsv",
            "diagnostic": "diagnostic/diagnostic.tsv",   # AX lives beside the task dirs
        }),
        GlueTask("qnli", "QNLI", ENTAILMENT_LABELS, ("accuracy",), _standard_splits("QNLI")),
        GlueTask("rte", "RTE", ENTAILMENT_LABELS, ("accuracy",), _standard_splits("RTE")),
        GlueTask("wnli", "WNLI", BINARY_LABELS, ("accuracy",), _standard_splits("WNLI")),
        # AX (diagnostic): test only; GLUE scores it with R3 (3-class Matthews corr).
        GlueTask("ax", "diagnostic", MNLI_LABELS, ("mcc",), {"test": "diagnostic/diagnostic.tsv"}),
    ]
}

# The eight/nine tasks of the GLUE benchmark proper (AX is diagnostic only).
GLUE_TASK_NAMES = ("cola", "sst", "mrpc", "sts", "qqp", "mnli", "qnli", "rte", "wnli")

_ALIASES = {
    "sst-2": "sst", "sst2": "sst", "sts-b": "sts", "stsb": "sts", "diagnostic": "ax",
    "mnli-m": "mnli", "mnli-mm": "mnli", "mnli_matched": "mnli", "mnli_mismatched": "mnli",
}


def normalize_task_name(name: str) -> str:
    """'SST-2' -> 'sst', 'sts-b' -> 'sts', 'MNLI-mm' -> 'mnli'; DataError if unknown."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        raise DataError(f"unknown GLUE task {name!r}; known tasks: {', '.join(TASKS)} "
                        f"(GLUE spellings such as SST-2, STS-B are accepted too)")
    return key


def get_task(name: str) -> GlueTask:
    return TASKS[normalize_task_name(name)]
