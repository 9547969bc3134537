"""GLUE leaderboard files on the real test sets, the validator, and per-trial dev results."""
import json
import re
import statistics
import zipfile

import numpy as np
import pytest

from finetune.glue import leaderboard
from finetune.glue.leaderboard import (SUBMISSION_FILES, SubmissionError, format_summary,
                                       validate_submission, write_dev_predictions,
                                       write_submission, write_trials_summary)
from finetune.glue.readers import read_examples
from finetune.glue.tasks import DataError, get_task
from tests.conftest import shared_path
from tests.finetune.test_glue_readers import make_mnli, make_qqp

AVAILABLE = ["CoLA", "SST-2", "MRPC", "STS-B", "QNLI", "RTE", "WNLI", "AX"]  # no MNLI/QQP here


def random_predictions(glue_dir, stems, seed=0):
    """{stem: (test ids, random predictions)}: label ids, or STS-B scores partly out of [0, 5]."""
    rng = np.random.default_rng(seed)
    out = {}
    for stem in stems:
        task_name, split = SUBMISSION_FILES[stem]
        ids = [e.guid for e in read_examples(glue_dir, task_name, split)]
        task = get_task(task_name)
        preds = (rng.uniform(-0.5, 5.5, len(ids)) if task.is_regression
                 else rng.integers(0, task.num_labels, len(ids)))
        out[stem] = (ids, preds)
    return out


def read_rows(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0], [line.split("\t") for line in lines[1:]]


def test_real_test_sets_write_and_validate(tmp_path):
    glue = shared_path("data", "glue")
    preds = random_predictions(glue, AVAILABLE)
    zip_path = write_submission(tmp_path / "sub", preds)
    expected_rows = {f"{stem}.tsv": len(preds[stem][0]) for stem in AVAILABLE}
    assert expected_rows["RTE.tsv"] == 3000 and expected_rows["AX.tsv"] == 1104
    assert validate_submission(tmp_path / "sub", glue, require_all=False) == expected_rows
    assert validate_submission(zip_path, glue, require_all=False) == expected_rows
    with zipfile.ZipFile(zip_path) as zf:
        assert sorted(zf.namelist()) == sorted(expected_rows)
    # Label strings as the server wants them.
    header, rows = read_rows(tmp_path / "sub" / "AX.tsv")
    assert header == "index\tprediction"
    assert {p for _, p in rows} == {"entailment", "neutral", "contradiction"}
    assert {p for _, p in read_rows(tmp_path / "sub" / "RTE.tsv")[1]} == {"entailment",
                                                                           "not_entailment"}
    assert {p for _, p in read_rows(tmp_path / "sub" / "CoLA.tsv")[1]} == {"0", "1"}
    # STS-B: clipped to [0, 5], three decimals.
    sts = read_rows(tmp_path / "sub" / "STS-B.tsv")[1]
    raw = preds["STS-B"][1]
    assert [p for _, p in sts] == [f"{min(max(x, 0.0), 5.0):.3f}" for x in raw]
    assert {"0.000", "5.000"} <= {p for _, p in sts}
    # The index column is the test file's id column, in order.
    assert [i for i, _ in sts] == preds["STS-B"][0]
    # Atomic writes leave no temporary files behind.
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == sorted(
        list(expected_rows) + ["glue_submission.zip"])
    # The real data dir lacks MNLI/QQP, so a complete submission cannot be required there.
    with pytest.raises(SubmissionError, match="QQP.tsv: missing"):
        validate_submission(zip_path, glue)


def complete_glue_dir(tmp_path):
    """Real task dirs (symlinked) + hand-made MNLI and QQP test files: all eleven test sets."""
    glue = shared_path("data", "glue")
    root = tmp_path / "glue"
    make_mnli(root)
    make_qqp(root)
    for name in ["CoLA", "SST-2", "MRPC", "STS-B", "QNLI", "RTE", "WNLI"]:
        (root / name).symlink_to(glue / name, target_is_directory=True)
    (root / "diagnostic" / "diagnostic.tsv").unlink()
    (root / "diagnostic").rmdir()
    (root / "diagnostic").symlink_to(glue / "diagnostic", target_is_directory=True)
    return root


def test_complete_submission(tmp_path):
    root = complete_glue_dir(tmp_path)
    preds = random_predictions(root, list(SUBMISSION_FILES), seed=1)
    # Task keys work as well as file stems; MNLI-m/-mm must be explicit.
    preds["sst"] = preds.pop("SST-2")
    preds["mnli-mm"] = preds.pop("MNLI-mm")
    zip_path = write_submission(tmp_path / "out", preds, zip_name="submission.zip")
    rows = validate_submission(zip_path, root)
    assert len(rows) == 11 and rows["MNLI-m.tsv"] == 5 and rows["MNLI-mm.tsv"] == 6
    with pytest.raises(Exception, match="ambiguous"):
        write_submission(tmp_path / "bad", {"mnli": preds["MNLI-m"]})


def test_submission_gathers_every_run(tmp_path):
    """Each run writes its own tasks; the zip always holds every task's latest file."""
    glue = shared_path("data", "glue")
    board = tmp_path / "board"
    write_submission(board, random_predictions(glue, ["RTE"]))        # first run: RTE
    zip_path = write_submission(board, random_predictions(glue, ["WNLI"]))   # second: WNLI
    with zipfile.ZipFile(zip_path) as zf:
        assert sorted(zf.namelist()) == ["RTE.tsv", "WNLI.tsv"]
    # A rerun of a task overwrites its file: the zip has the latest predictions.
    latest = random_predictions(glue, ["RTE"], seed=7)
    write_submission(board, latest)
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read("RTE.tsv").decode() == (board / "RTE.tsv").read_text()

    # The step: a missing file is named, one line, and nothing is written.
    before = zip_path.read_bytes()
    with pytest.raises(SubmissionError) as err:
        leaderboard.make_submission(board, glue)
    message = str(err.value)
    assert "\n" not in message and "missing CoLA.tsv, SST-2.tsv" in message
    assert "AX.tsv" in message and "RTE.tsv" not in message.split("missing")[1]
    assert zip_path.read_bytes() == before
    status = leaderboard.make_submission(board, glue, allow_partial=True)
    assert status.rows == {"RTE.tsv": 3000, "WNLI.tsv": 146} and status.unchecked == []
    assert len(status.missing) == 9
    assert validate_submission(status.zip_path, glue, require_all=False) == status.rows


def test_submission_checks_and_unchecked(tmp_path):
    glue = shared_path("data", "glue")
    board = tmp_path / "board"
    write_submission(board, random_predictions(glue, ["RTE", "CoLA"]))
    # Without RTE's test set the file is zipped but reported unchecked.
    partial_glue = tmp_path / "glue"
    partial_glue.mkdir()
    (partial_glue / "CoLA").symlink_to(glue / "CoLA", target_is_directory=True)
    status = leaderboard.make_submission(board, partial_glue, allow_partial=True)
    assert status.unchecked == ["RTE.tsv"] and set(status.rows) == {"CoLA.tsv", "RTE.tsv"}
    # A wrong row count is an error, and the zip is left as it was.
    (board / "glue_submission.zip").unlink()
    corrupt(board / "CoLA.tsv", lambda ls: ls[:-1])
    with pytest.raises(SubmissionError, match=r"CoLA.tsv: 1 test ids missing"):
        leaderboard.make_submission(board, glue, allow_partial=True)
    assert not (board / "glue_submission.zip").exists()
    with pytest.raises(SubmissionError, match="no submission files found"):
        leaderboard.make_submission(tmp_path / "glue", glue, allow_partial=True)
    with pytest.raises(DataError, match="submission directory not found"):
        leaderboard.make_submission(tmp_path / "nowhere", glue, allow_partial=True)


def test_complete_submission_from_directory(tmp_path):
    root = complete_glue_dir(tmp_path)
    board = tmp_path / "board"
    for stem, prediction in random_predictions(root, list(SUBMISSION_FILES), seed=2).items():
        write_submission(board, {stem: prediction})                  # one run per file
    status = leaderboard.make_submission(board, root)
    assert status.missing == [] and len(status.rows) == 11
    with zipfile.ZipFile(status.zip_path) as zf:
        assert zf.namelist() == [f"{stem}.tsv" for stem in SUBMISSION_FILES]
    assert validate_submission(status.zip_path, root) == status.rows


def test_wnli_majority_class():
    glue = shared_path("data", "glue")
    ids, labels = leaderboard.majority_class_predictions(glue, "wnli")
    train = [e.label for e in read_examples(glue, "wnli", "train")]
    majority = max(set(train), key=train.count)
    assert labels == [majority] * 146 and len(ids) == 146
    assert ids == [e.guid for e in read_examples(glue, "wnli", "test")]


def corrupt(path, edit):
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")


@pytest.mark.parametrize("stem,edit,problem", [
    ("RTE", lambda ls: ls[:1] + [ls[1].replace("entailment", "maybe")] + ls[2:],
     r"RTE.tsv:2: prediction '(maybe|not_maybe)' not in \{entailment, not_entailment\}"),
    ("CoLA", lambda ls: ls[:-1], r"CoLA.tsv: 1 test ids missing, e.g. \['1062'\]"),
    ("SST-2", lambda ls: ls + [ls[1]], r"SST-2.tsv:1823: duplicate index '0'"),
    ("WNLI", lambda ls: ["id\tlabel"] + ls[1:], r"WNLI.tsv:1: header must be"),
    ("MRPC", lambda ls: ls[:1] + ["99999\t1"] + ls[2:], r"MRPC.tsv: 1 ids not in the test file"),
    ("STS-B", lambda ls: ls[:1] + ["0\t5.5"] + ls[2:], r"STS-B.tsv:2: prediction '5.5' is not a number in \[0, 5\]"),
    ("AX", lambda ls: ls[:1] + ["0 entailment"] + ls[2:], r"AX.tsv:2: expected 2 tab-separated columns"),
])
def test_corrupted_file_fails_validation(tmp_path, stem, edit, problem):
    glue = shared_path("data", "glue")
    write_submission(tmp_path, random_predictions(glue, [stem]))
    validate_submission(tmp_path, glue, require_all=False)      # valid before the edit
    corrupt(tmp_path / f"{stem}.tsv", edit)
    with pytest.raises(SubmissionError) as err:
        validate_submission(tmp_path, glue, require_all=False)
    assert any(re.search(problem, p) for p in err.value.problems), err.value.problems


def test_unknown_file_name_and_nested_zip(tmp_path):
    glue = shared_path("data", "glue")
    write_submission(tmp_path / "sub", random_predictions(glue, ["WNLI"]))
    (tmp_path / "sub" / "SST2.tsv").write_text("index\tprediction\n", encoding="utf-8")
    with pytest.raises(SubmissionError, match="SST2.tsv: not a GLUE submission file name"):
        validate_submission(tmp_path / "sub", glue, require_all=False)
    nested = tmp_path / "nested.zip"
    with zipfile.ZipFile(nested, "w") as zf:      # the server wants the files at the top level
        zf.write(tmp_path / "sub" / "WNLI.tsv", arcname="glue/WNLI.tsv")
    with pytest.raises(SubmissionError, match="glue/WNLI.tsv: not a GLUE submission file name"):
        validate_submission(nested, glue, require_all=False)


def test_dev_predictions_and_trial_summary(tmp_path):
    glue = shared_path("data", "glue")
    dev = read_examples(glue, "mrpc", "dev")
    ids, labels = [e.guid for e in dev], [e.label for e in dev]
    rng = np.random.default_rng(3)
    all_metrics = []
    for trial in range(1, 6):
        preds = rng.integers(0, 2, len(dev))
        all_metrics.append(write_dev_predictions(tmp_path, "MRPC", ids, preds, labels, trial=trial))
    results = tmp_path / "results"
    header, rows = read_rows(results / "mrpc_dev_predictions_trial5.tsv")
    assert header == "index\tprediction\tlabel" and len(rows) == 408
    assert rows[0] == ["0", str(preds[0]), "1"]
    record = json.loads((results / "mrpc_dev_metrics_trial5.json").read_text())
    assert record["metrics"] == all_metrics[-1] and record["num_examples"] == 408
    assert record["trial"] == 5

    summary = write_trials_summary(tmp_path, "mrpc")       # gathers the five metric files
    accuracies = [m["accuracy"] for m in all_metrics]
    assert summary["accuracy"]["n"] == 5
    assert summary["accuracy"]["median"] == pytest.approx(statistics.median(accuracies))
    assert summary["accuracy"]["mean"] == pytest.approx(statistics.mean(accuracies))
    assert summary["accuracy"]["std"] == pytest.approx(statistics.stdev(accuracies))
    assert summary["f1"]["max"] == pytest.approx(max(m["f1"] for m in all_metrics))
    assert json.loads((results / "mrpc_dev_summary.json").read_text())["summary"] == summary
    assert format_summary("mrpc", summary).startswith(
        f"mrpc accuracy {statistics.median(accuracies):.2f} (median of 5; mean ")


def test_dev_predictions_single_trial_names_and_sts(tmp_path):
    labels = [0.0, 2.5, 5.0, 4.0]
    metrics = write_dev_predictions(tmp_path, "sts-b", ["0", "1", "2", "3"],
                                    [0.5, 2.0, 5.5, 3.0], labels)
    assert (tmp_path / "results" / "sts_dev_predictions.tsv").exists()
    assert json.loads((tmp_path / "results" / "sts_dev_metrics.json").read_text())[
        "metrics"] == metrics
    rows = read_rows(tmp_path / "results" / "sts_dev_predictions.tsv")[1]
    assert rows[2] == ["2", "5.500000", "5.000"]          # dev predictions are not clipped
    assert metrics["spearman"] == pytest.approx(100.0)
    # MNLI matched / mismatched results stay apart.
    write_dev_predictions(tmp_path, "mnli-mm", ["0"], ["neutral"], ["neutral"])
    write_dev_predictions(tmp_path, "mnli-m", ["0"], ["neutral"], ["entailment"])
    assert write_trials_summary(tmp_path, "mnli-mm")["accuracy"]["median"] == 100.0
    assert write_trials_summary(tmp_path, "mnli-m")["accuracy"]["median"] == 0.0


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "CoLA.tsv"
    leaderboard.write_submission_file(path, "cola", ["0", "1"], [1, 0])
    before = path.read_text()
    assert before == "index\tprediction\n0\t1\n1\t0\n"

    import os

    def crash(src, dst):   # e.g. the job is killed between writing and renaming
        raise OSError("simulated crash")
    # Every write goes through base/fileio.py: a local path is renamed with os.replace (a
    # bucket path with tf.io.gfile.rename).
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        leaderboard.write_submission_file(path, "cola", ["0", "1"], [0, 0])
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["CoLA.tsv"]   # temp file cleaned up
