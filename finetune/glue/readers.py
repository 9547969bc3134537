"""Readers for the GLUE download layout `<data_dir>/<TASK>/{train,dev,test}.tsv`.

GLUE's TSV files are not CSV: sentences contain unbalanced `"` characters (MRPC, MNLI, QQP), so
quote characters are ordinary text here (`quotechar=None`). Files are read as UTF-8 with an
optional BOM (MRPC's train/dev start with one). Any malformed input raises `DataError` naming the
file and line, instead of silently dropping rows as ELECTRA's `_load_glue` does.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import logging

from base import fileio
from finetune.glue.tasks import DataError, GlueTask, get_task


@dataclasses.dataclass(frozen=True)
class InputExample:
    guid: str                        # the file's index/id column, or the 0-based row number
    text_a: str
    text_b: str | None
    label: str | float | None        # label string; float for STS-B; None for test files
    task_name: str = ""


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Column positions of one GLUE file format (0-based; None = not present)."""
    num_columns: int
    has_header: bool
    text_a: int
    text_b: int | None
    label: int | None    # None: unlabeled (test / diagnostic)
    index: int | None    # None: use the running row number as guid


def _labeled_pair(num_columns):   # index, sentence1, sentence2, label (QNLI/RTE/WNLI)
    return _Layout(num_columns, True, 1, 2, 3, 0)


_TEST_PAIR = _Layout(3, True, 1, 2, None, 0)   # index, sentence1, sentence2

# (task, file kind) -> layout; file kind is "train", "dev" or "test" (see _file_kind).
_LAYOUTS = {
    # CoLA train/dev: source, label, original judgement, sentence -- no header row.
    ("cola", "train"): _Layout(4, False, 3, None, 1, None),
    ("cola", "dev"): _Layout(4, False, 3, None, 1, None),
    ("cola", "test"): _Layout(2, True, 1, None, None, 0),
    ("sst", "train"): _Layout(2, True, 0, None, 1, None),       # sentence, label
    ("sst", "dev"): _Layout(2, True, 0, None, 1, None),
    ("sst", "test"): _Layout(2, True, 1, None, None, 0),        # index, sentence
    # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String (test: index instead of Quality).
    ("mrpc", "train"): _Layout(5, True, 3, 4, 0, None),
    ("mrpc", "dev"): _Layout(5, True, 3, 4, 0, None),
    ("mrpc", "test"): _Layout(5, True, 3, 4, None, 0),
    # STS-B: index genre filename year old_index source1 source2 sentence1 sentence2 [score]
    ("sts", "train"): _Layout(10, True, 7, 8, 9, 0),
    ("sts", "dev"): _Layout(10, True, 7, 8, 9, 0),
    ("sts", "test"): _Layout(9, True, 7, 8, None, 0),
    # QQP: id qid1 qid2 question1 question2 is_duplicate; test: id question1 question2
    ("qqp", "train"): _Layout(6, True, 3, 4, 5, 0),
    ("qqp", "dev"): _Layout(6, True, 3, 4, 5, 0),
    ("qqp", "test"): _TEST_PAIR,
    # MNLI: index promptID pairID genre s1_binary_parse s2_binary_parse s1_parse s2_parse
    # sentence1 sentence2, then label1 gold_label (train) / label1..label5 gold_label (dev).
    ("mnli", "train"): _Layout(12, True, 8, 9, 11, 0),
    ("mnli", "dev"): _Layout(16, True, 8, 9, 15, 0),
    ("mnli", "test"): _Layout(10, True, 8, 9, None, 0),
    ("mnli", "diagnostic"): _TEST_PAIR,
    ("qnli", "train"): _labeled_pair(4), ("qnli", "dev"): _labeled_pair(4),
    ("qnli", "test"): _TEST_PAIR,
    ("rte", "train"): _labeled_pair(4), ("rte", "dev"): _labeled_pair(4),
    ("rte", "test"): _TEST_PAIR,
    ("wnli", "train"): _labeled_pair(4), ("wnli", "dev"): _labeled_pair(4),
    ("wnli", "test"): _TEST_PAIR,
    ("ax", "test"): _TEST_PAIR,
}


def _file_kind(split: str) -> str:
    """'dev_mismatched' -> 'dev', 'test_matched' -> 'test'; 'diagnostic' stays itself."""
    return split.split("_")[0]


def task_file(data_dir, task_name: str, split: str):
    """Path of one split's TSV, checking that the task directory and the file exist
    (a pathlib.Path for a local data dir, the URL string for gs://, ram://, ...)."""
    task = get_task(task_name)
    if split not in task.splits:
        raise DataError(f"task {task.name!r} has no split {split!r}; "
                        f"available: {', '.join(task.splits)}")
    path = fileio.join(data_dir, task.splits[split])
    parent = fileio.dirname(path)
    if not fileio.isdir(parent):
        raise DataError(f"{parent}: GLUE task directory not found (expected the GLUE "
                        f"download layout <data_dir>/{fileio.basename(parent)}/; "
                        f"see scripts/download_glue_data.py)")
    if not fileio.isfile(path):
        raise DataError(f"{path}: GLUE file not found")
    return fileio.as_path(path)


def read_tsv(path) -> list[tuple[int, list[str]]]:
    """All rows of a GLUE TSV as (1-based line number, cells); blank lines are skipped."""
    path = fileio.norm(path)
    try:
        raw = fileio.read_bytes(path)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{path}:{_first_bad_utf8_line(raw)}: not valid UTF-8") from None
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quotechar=None,
                            quoting=csv.QUOTE_NONE)
        return [(reader.line_num, row) for row in reader if row]
    except csv.Error as e:
        raise DataError(f"{path}: unreadable TSV ({e})") from None


def _first_bad_utf8_line(raw: bytes) -> int:
    for line_no, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return line_no
    return 1


def _parse_label(task: GlueTask, raw: str, where: str):
    if task.is_regression:
        try:
            value = float(raw)
        except ValueError:
            raise DataError(f"{where}: label {raw!r} is not a number for task {task.name}"
                            ) from None
        if not task.min_value <= value <= task.max_value:
            raise DataError(f"{where}: label {value} outside [{task.min_value}, {task.max_value}] "
                            f"for task {task.name}")
        return value
    if raw not in task.label_list:
        raise DataError(f"{where}: unknown label {raw!r} for task {task.name} "
                        f"(expected one of {', '.join(task.label_list)})")
    return raw


def read_examples(data_dir, task_name: str, split: str, double_unordered: bool = False,
                  skip_malformed_rows: bool = False) -> list[InputExample]:
    """Examples of one GLUE split.

    split: "train", "dev", "test"; for MNLI also "dev_matched", "dev_mismatched",
    "test_matched", "test_mismatched" and "diagnostic" (= task "ax", split "test").
    double_unordered: for train splits of order-free pair tasks (MRPC, STS-B), also add every
    pair with its sentences swapped, as ELECTRA does by default.
    skip_malformed_rows: log and drop rows with the wrong number of columns instead of raising
    (what ELECTRA's loader does); for damaged copies of a file, never needed with GLUE's own.
    """
    task = get_task(task_name)
    path = task_file(data_dir, task.name, split)
    layout = _LAYOUTS[(task.name, _file_kind(split))]
    rows = read_tsv(path)
    if layout.has_header:
        rows = rows[1:]
    examples = []
    for row_number, (line, cells) in enumerate(rows):
        where = f"{path}:{line}"
        if len(cells) != layout.num_columns:
            message = (f"{where}: expected {layout.num_columns} tab-separated columns for "
                       f"{task.name} {split}, found {len(cells)}")
            if not skip_malformed_rows:
                raise DataError(message)
            logging.warning("skipping malformed row: %s", message)
            continue
        label = None
        if layout.label is not None:
            label = _parse_label(task, cells[layout.label].strip(), where)
        guid = cells[layout.index].strip() if layout.index is not None else str(row_number)
        text_b = cells[layout.text_b] if layout.text_b is not None else None
        examples.append(InputExample(guid, cells[layout.text_a], text_b, label, task.name))
    if not examples:
        raise DataError(f"{path}: no examples (empty file?)")
    if double_unordered and split == "train" and task.unordered_pair:
        examples = add_swapped_pairs(examples)
    return examples


def add_swapped_pairs(examples: list[InputExample]) -> list[InputExample]:
    """examples + a copy of each pair with text_a and text_b swapped (ELECTRA double_unordered)."""
    swapped = [dataclasses.replace(e, guid=f"{e.guid}-swapped", text_a=e.text_b, text_b=e.text_a)
               for e in examples if e.text_b is not None]
    return list(examples) + swapped


def label_counts(examples) -> dict:
    """{label: count}: a quick check of a split's balance."""
    counts: dict = {}
    for e in examples:
        counts[e.label] = counts.get(e.label, 0) + 1
    return counts
