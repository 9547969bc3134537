"""GLUE leaderboard files, their validator, and per-trial dev results.

Submission format (gluebenchmark.com, as jiant writes it): one `<NAME>.tsv` per test set with the
header `index<TAB>prediction`, the index being the test file's own id column, and predictions as
label strings (entailment/neutral/contradiction for MNLI and AX, entailment/not_entailment for
RTE and QNLI, 0/1 for CoLA, SST-2, MRPC, QQP, WNLI) or, for STS-B, a score with 3 decimals in
[0, 5]. The server takes a zip of the eleven files at its top level.

Every file is read and written through base/fileio.py (tf.io.gfile for buckets): directories may be
buckets (gs://...) or ram://; functions return a pathlib.Path for local paths, the URL otherwise.
"""
from __future__ import annotations

import collections
import dataclasses
import io
import json
import pathlib
import zipfile

import numpy as np

from base import fileio
from finetune.glue.metrics import compute_metrics, to_label_ids, to_scores
from finetune.glue.readers import read_examples, task_file
from finetune.glue.tasks import DataError, get_task, normalize_task_name

# Submission file stem -> (task, test split whose ids the file must cover).
SUBMISSION_FILES = {
    "CoLA": ("cola", "test"),
    "SST-2": ("sst", "test"),
    "MRPC": ("mrpc", "test"),
    "STS-B": ("sts", "test"),
    "QQP": ("qqp", "test"),
    "MNLI-m": ("mnli", "test_matched"),
    "MNLI-mm": ("mnli", "test_mismatched"),
    "QNLI": ("qnli", "test"),
    "RTE": ("rte", "test"),
    "WNLI": ("wnli", "test"),
    "AX": ("ax", "test"),
}
HEADER = "index\tprediction"
STS_DECIMALS = 3


class SubmissionError(DataError):
    """A submission that the GLUE server would reject; `.problems` lists every problem found."""

    def __init__(self, source, problems: list[str]):
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"invalid GLUE submission {source}: {problems[0]}{more}")


def submission_stem(key: str) -> str:
    """'cola' / 'CoLA' / 'CoLA.tsv' / 'mnli-mm' -> the submission file stem ('CoLA', 'MNLI-mm')."""
    text = str(key).strip()
    if text.lower().endswith(".tsv"):
        text = text[:-4]
    for stem in SUBMISSION_FILES:
        if text.lower() == stem.lower():
            return stem
    name = normalize_task_name(text)   # DataError for unknown names
    stems = [stem for stem, (task, _) in SUBMISSION_FILES.items() if task == name]
    if len(stems) != 1:
        raise DataError(f"{key!r} is ambiguous: say which of {', '.join(stems)}")
    return stems[0]


def format_predictions(task_name: str, predictions) -> list[str]:
    """Server strings for label ids / label strings / logits (or STS-B scores)."""
    task = get_task(task_name)
    if task.is_regression:
        scores = to_scores(predictions)
        if not np.all(np.isfinite(scores)):
            raise ValueError(f"{task.name}: non-finite regression predictions")
        scores = np.clip(scores, task.min_value, task.max_value)
        return [f"{s:.{STS_DECIMALS}f}" for s in scores]
    return [task.label_list[i] for i in to_label_ids(predictions, task.name)]


def _write_text(path, text: str) -> None:
    """UTF-8 text, written atomically (temporary name beside `path`, then rename)."""
    fileio.write_atomic(path, text.encode("utf-8"))


def write_submission_file(path, task_name: str, indices, predictions):
    """One leaderboard TSV: `index<TAB>prediction` rows in the given order."""
    indices = [str(i) for i in indices]
    formatted = format_predictions(task_name, predictions)
    if len(indices) != len(formatted):
        raise ValueError(f"{path}: {len(indices)} indices for {len(formatted)} predictions")
    lines = [HEADER] + [f"{i}\t{p}" for i, p in zip(indices, formatted)]
    _write_text(path, "\n".join(lines) + "\n")
    return fileio.as_path(path)


ZIP_NAME = "glue_submission.zip"


def write_submission(output_dir, predictions: dict, zip_name: str = ZIP_NAME):
    """Write `<output_dir>/<NAME>.tsv` for each entry, then zip every submission file in
    `output_dir` — those written now and those earlier runs left there — and return the zip's path.

    predictions: {file stem or task key ("CoLA", "sst", "MNLI-mm", "ax", ...):
                  (test indices, predictions)}; indices are the test examples' `guid`s.
    """
    output_dir = fileio.norm(output_dir)
    for key, (indices, preds) in predictions.items():
        stem = submission_stem(key)
        task_name = SUBMISSION_FILES[stem][0]
        write_submission_file(fileio.join(output_dir, f"{stem}.tsv"), task_name, indices, preds)
    return _write_zip(output_dir, _present_files(output_dir), zip_name)


def _present_files(directory) -> list[str]:
    """The submission files (the eleven known names) in `directory`, in the server's order."""
    paths = [fileio.join(directory, f"{stem}.tsv") for stem in SUBMISSION_FILES]
    return [p for p in paths if fileio.isfile(p)]


def _stem(path) -> str:
    return fileio.basename(path)[:-len(".tsv")]


def _write_zip(directory, files, zip_name: str):
    """The zip is built in memory and written like every other file (atomically, via gfile)."""
    zip_path = fileio.join(directory, zip_name)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in files:   # files at the zip's top level
            zf.writestr(_zip_info(path), fileio.read_bytes(path))
    fileio.write_atomic(zip_path, buffer.getvalue())
    return fileio.as_path(zip_path)


def _zip_info(path) -> zipfile.ZipInfo:
    """The member entry ZipFile.write makes for a regular file: its name, modification time
    (now where the filesystem keeps none) and rw-r--r--, deflated."""
    import time
    mtime = fileio.mtime(path)
    if mtime is None or mtime < 315619200:   # the zip format starts in 1980
        mtime = time.time()
    info = zipfile.ZipInfo(fileio.basename(path), date_time=time.localtime(mtime)[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o100644 << 16
    return info


@dataclasses.dataclass
class SubmissionStatus:
    zip_path: pathlib.Path | str | None    # None when nothing was written; str for a URL
    rows: dict                        # {file name: prediction rows}, every file in the zip
    missing: list                     # file names the server expects that are not there
    unchecked: list                   # files whose test set was not found under the data dir


def make_submission(directory, glue_data_dir, allow_partial: bool = False,
                    zip_name: str = ZIP_NAME) -> SubmissionStatus:
    """Gather every `<NAME>.tsv` in `directory` (the latest predictions of each task: a rerun of
    a task overwrites its file) into `<directory>/<zip_name>`, the one zip the GLUE server takes.

    Each file is checked against its test set under `glue_data_dir` when that test set is there
    (ids, row count, labels; `unchecked` lists the others, all of them when `glue_data_dir` is
    None: a run from feature files without --data_dir). Raises SubmissionError, writing
    nothing, when a file is invalid, or when one of the eleven is missing and not `allow_partial`.
    """
    directory = fileio.norm(directory)
    if not fileio.isdir(directory):
        raise DataError(f"{directory}: submission directory not found")
    files = _present_files(directory)
    if not files:
        raise SubmissionError(directory, ["no submission files found (expected "
                                          f"{', '.join(f'{s}.tsv' for s in SUBMISSION_FILES)})"])
    problems, rows, unchecked = [], {}, []
    for path in files:
        name = fileio.basename(path)
        task_name, split = SUBMISSION_FILES[_stem(path)]
        text = _read_text(path)
        rows[name] = max(len(text.splitlines()) - 1, 0)
        try:
            if glue_data_dir is None:
                raise DataError("no GLUE data dir")
            task_file(glue_data_dir, task_name, split)
        except DataError:
            unchecked.append(name)
            continue
        test_ids = [e.guid for e in read_examples(glue_data_dir, task_name, split)]
        problems += _check_file(name, text, task_name, test_ids)
    missing = [f"{stem}.tsv" for stem in SUBMISSION_FILES if f"{stem}.tsv" not in rows]
    if problems:
        raise SubmissionError(directory, problems)
    if missing and not allow_partial:
        raise SubmissionError(directory, [
            f"missing {', '.join(missing)} (the server rejects a submission without all "
            f"{len(SUBMISSION_FILES)} files; --allow_partial zips the {len(rows)} present)"])
    return SubmissionStatus(_write_zip(directory, files, zip_name), rows, missing, unchecked)


def majority_class_predictions(glue_data_dir, task_name: str):
    """(test ids, label strings) predicting the train set's most frequent label for every test
    example: what BERT submitted for WNLI, whose dev set is adversarial to its train set."""
    train = read_examples(glue_data_dir, task_name, "train")
    counts = collections.Counter(e.label for e in train)
    label = max(sorted(counts), key=lambda k: counts[k])    # ties: the first label
    test = read_examples(glue_data_dir, task_name, "test")
    return [e.guid for e in test], [label] * len(test)


def _read_text(path) -> str:
    try:
        return fileio.read_text(path)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None


def _submission_texts(source: str) -> dict[str, str]:
    """{file name: text} of a submission directory or zip."""
    if fileio.isdir(source):
        try:
            return {fileio.basename(p): fileio.read_text(p)
                    for p in fileio.list_files(source, "*.tsv")}
        except UnicodeDecodeError:
            raise DataError(f"{source}: a .tsv file is not UTF-8 text") from None
    data = fileio.read_bytes(source) if fileio.exists(source) else b""
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            try:
                return {info.filename: zf.read(info).decode("utf-8")
                        for info in zf.infolist() if not info.is_dir()}
            except UnicodeDecodeError:
                raise DataError(f"{source}: a member is not UTF-8 text") from None
    raise DataError(f"{source}: neither a directory nor a zip file")


def _check_file(name: str, text: str, task_name: str, test_ids: list[str]) -> list[str]:
    task = get_task(task_name)
    lines = text.splitlines()
    if not lines or lines[0] != HEADER:
        return [f"{name}:1: header must be 'index\\tprediction'"]
    problems, seen = [], set()
    for line_no, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != 2:
            problems.append(f"{name}:{line_no}: expected 2 tab-separated columns, "
                            f"found {len(cells)}")
            continue
        index, prediction = cells
        if index in seen:
            problems.append(f"{name}:{line_no}: duplicate index {index!r}")
        seen.add(index)
        if task.is_regression:
            try:
                ok = task.min_value <= float(prediction) <= task.max_value
            except ValueError:
                ok = False
            if not ok:
                problems.append(f"{name}:{line_no}: prediction {prediction!r} is not a number "
                                f"in [{task.min_value:g}, {task.max_value:g}]")
        elif prediction not in task.label_list:
            problems.append(f"{name}:{line_no}: prediction {prediction!r} not in "
                            f"{{{', '.join(task.label_list)}}}")
    missing = [i for i in test_ids if i not in seen]
    extra = sorted(seen - set(test_ids))
    if missing:
        problems.append(f"{name}: {len(missing)} test ids missing, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{name}: {len(extra)} ids not in the test file, e.g. {extra[:3]}")
    return problems


def validate_submission(source, glue_data_dir, require_all: bool = True) -> dict[str, int]:
    """Check a submission dir or zip against the GLUE test files; {file name: rows} if valid.

    Every file must be one of the eleven known names, have the `index<TAB>prediction` header,
    cover exactly the test file's ids (no duplicates) and use the task's label strings (STS-B:
    numbers in [0, 5]). require_all: also demand all eleven files, as the server does.
    Raises SubmissionError listing all problems.
    """
    source = fileio.norm(source)
    texts = _submission_texts(source)
    known = {f"{stem}.tsv": stem for stem in SUBMISSION_FILES}
    problems, rows = [], {}
    for name, text in texts.items():
        if name not in known:
            problems.append(f"{name}: not a GLUE submission file name "
                            f"(expected {', '.join(known)})")
            continue
        task_name, split = SUBMISSION_FILES[known[name]]
        try:
            test_ids = [e.guid for e in read_examples(glue_data_dir, task_name, split)]
        except DataError as e:
            problems.append(f"{name}: cannot read its test file ({e})")
            continue
        problems += _check_file(name, text, task_name, test_ids)
        rows[name] = len(text.splitlines()) - 1
    if require_all:
        problems += [f"{name}: missing" for name in known if name not in texts]
    if not texts:
        problems.append("no submission files found")
    if problems:
        raise SubmissionError(source, problems)
    return rows


# ----------------------------------------------------------------------------------------------
# Dev-set results of fine-tuning trials:
# <model_dir>/results/<task>_dev_predictions.tsv and <task>_dev_metrics.json

def _result_key(task_key: str) -> str:
    """File-name key: the ELECTRA task name, keeping MNLI's 'mnli-m' / 'mnli-mm' apart."""
    key = str(task_key).strip().lower()
    return key if key in ("mnli-m", "mnli-mm") else normalize_task_name(key)


def _trial_suffix(trial) -> str:
    return "" if trial is None else f"_trial{trial}"


def dev_metrics_path(model_dir, task_key: str, trial=None) -> str:
    """`<model_dir>/results/<task>_dev_metrics[_trial<k>].json`: what `write_dev_predictions`
    writes last, so its presence says a trial is done."""
    return fileio.join(model_dir, "results",
                       f"{_result_key(task_key)}_dev_metrics{_trial_suffix(trial)}.json")


def write_dev_predictions(model_dir, task_key: str, indices, predictions, labels,
                          trial=None) -> dict[str, float]:
    """Write `<task>_dev_predictions.tsv` (index, prediction, label) and `<task>_dev_metrics.json`
    under `<model_dir>/results/` (suffix `_trial<k>` when `trial` is given); returns the metrics."""
    key = _result_key(task_key)
    task = get_task(key)
    metrics = compute_metrics(key, predictions, labels)
    if task.is_regression:   # dev predictions keep their raw (unclipped) value
        pred_strings = [f"{x:.6f}" for x in to_scores(predictions)]
        label_strings = [f"{x:.3f}" for x in to_scores(labels)]
    else:
        pred_strings = format_predictions(key, predictions)
        label_strings = format_predictions(key, labels)
    indices = [str(i) for i in indices]
    if not len(indices) == len(pred_strings) == len(label_strings):
        raise ValueError(f"{key}: {len(indices)} indices for {len(pred_strings)} predictions")
    results = fileio.join(model_dir, "results")
    suffix = _trial_suffix(trial)
    lines = ["index\tprediction\tlabel"] + [
        f"{i}\t{p}\t{g}" for i, p, g in zip(indices, pred_strings, label_strings)]
    _write_text(fileio.join(results, f"{key}_dev_predictions{suffix}.tsv"),
                "\n".join(lines) + "\n")
    record = {"task": key, "split": "dev", "trial": trial, "num_examples": len(indices),
              "metrics": metrics}
    _write_text(dev_metrics_path(model_dir, key, trial), json.dumps(record, indent=2) + "\n")
    return metrics


def summarize_trials(metrics_per_trial: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """{metric: {median, mean, std, min, max, n}} over trials (std: sample std, ddof=1).

    The ELECTRA and ConvBERT papers report the median over (9) fine-tuning runs.
    """
    if not metrics_per_trial:
        raise ValueError("no trials to summarize")
    summary = {}
    for name in metrics_per_trial[0]:
        values = np.array([m[name] for m in metrics_per_trial], dtype=np.float64)
        summary[name] = {
            "median": float(np.median(values)), "mean": float(np.mean(values)),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "min": float(np.min(values)), "max": float(np.max(values)), "n": int(len(values))}
    return summary


def write_trials_summary(model_dir, task_key: str, metrics_per_trial=None) -> dict:
    """Summarize `<task>_dev_metrics*.json` (or the given metric dicts) into
    `<model_dir>/results/<task>_dev_summary.json`; returns the summary."""
    key = _result_key(task_key)
    results = fileio.join(model_dir, "results")
    if metrics_per_trial is None:
        files = fileio.list_files(results, f"{key}_dev_metrics*.json")
        metrics_per_trial = [json.loads(fileio.read_text(p))["metrics"] for p in files]
    summary = summarize_trials(metrics_per_trial)
    _write_text(fileio.join(results, f"{key}_dev_summary.json"),
                json.dumps({"task": key, "summary": summary}, indent=2) + "\n")
    return summary


def format_summary(task_key: str, summary: dict) -> str:
    """'mrpc accuracy 87.50 (median of 9; mean 87.31 ± 0.62), f1 ...' for logs."""
    parts = [f"{name} {s['median']:.2f} (median of {s['n']}; mean {s['mean']:.2f} ± {s['std']:.2f})"
             for name, s in summary.items()]
    return f"{_result_key(task_key)} " + ", ".join(parts)
