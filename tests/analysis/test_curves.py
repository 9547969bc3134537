"""analysis/curves.py on fake runs written with the toolkit's own scalar writer
(training/summaries.ScalarWriter, as training/loop.py writes them): the JSON series equal what was
written (a resumed run's re-trained step keeps its later value), held-out curves and the
pretraining_summary.json fallback (JAX runs) are read, and every PNG has labels and a legend."""
import json

import numpy as np
import pytest

from analysis import curves
from base.plots import png_labels
from training.summaries import ScalarWriter

METRICS = ("loss", "gen_accuracy", "disc_accuracy", "disc_auc", "learning_rate")


def _records(offset, steps):
    return {s: {"loss": 40.0 - s + offset, "gen_accuracy": 0.01 * s, "disc_accuracy": 0.5 + 0.01 * s,
                "disc_auc": 0.5 + 0.02 * s + offset / 10, "learning_rate": 1e-4 * s,
                "grad_norm": float("nan")} for s in steps}


def _write_run(model_dir, records, rewritten=None):
    """Event files under <model_dir>/train; `rewritten`: a second writer (a resumed run)
    writing these records again later."""
    for batch in (records, rewritten or {}):
        writer = ScalarWriter(str(model_dir / "train"))
        for step, scalars in batch.items():
            writer.write(scalars, step)
        writer.close()


def _float32(x):
    return float(np.float32(x))


def test_two_runs_heldout_resume_and_plots(tmp_path, capsys):
    steps = [2, 4, 6, 8]
    a, b = _records(0.0, steps), _records(1.0, steps)
    _write_run(tmp_path / "a", a, rewritten={6: {**a[6], "loss": 7.5}, 8: {**a[8], "loss": 6.5}})
    _write_run(tmp_path / "b", b)
    heldout = [{"step": 4, "gen_accuracy": 0.125, "disc_auc": 0.75},
               {"step": 8, "gen_accuracy": 0.25, "disc_auc": 0.875}]
    (tmp_path / "b" / "heldout_curve.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in heldout))
    out = tmp_path / "out"
    assert curves.main(["--run", f"a={tmp_path / 'a'}", "--run", f"b={tmp_path / 'b'}",
                        "--output_dir", str(out), "--smooth", "2"]) == 0
    doc = json.loads((out / "curves.json").read_text())
    assert list(doc["runs"]) == ["a", "b"] and doc["smooth"] == 2
    expected_a = {s: dict(r) for s, r in a.items()}
    expected_a[6]["loss"], expected_a[8]["loss"] = 7.5, 6.5     # the resumed writer wins
    for name, expected in (("a", expected_a), ("b", b)):
        run = doc["runs"][name]
        assert run["source"] == "tensorboard" and run["log_dir"].endswith("train")
        assert "grad_norm" not in run["series"]                 # NaN is never written
        for metric in METRICS:
            assert run["series"][metric]["step"] == steps
            assert run["series"][metric]["value"] == pytest.approx(
                [_float32(expected[s][metric]) for s in steps], rel=1e-7)
    assert doc["runs"]["a"]["heldout"] == {}
    assert doc["runs"]["b"]["heldout"]["disc_auc"] == {"step": [4, 8], "value": [0.75, 0.875]}
    for metric in METRICS:
        (labels,) = png_labels(str(out / f"curves_{metric}.png"))
        assert labels["xlabel"] == "optimizer step" and labels["ylabel"] == curves.UNITS[metric]
        assert labels["title"]
        if metric in ("loss", "disc_accuracy", "learning_rate"):
            assert len(labels["legend"]) == 2
    assert png_labels(str(out / "curves_learning_rate.png"))[0]["legend"] == ["a", "b"]
    assert png_labels(str(out / "curves_disc_auc.png"))[0]["legend"] == [
        "a (mean of 2)", "b (mean of 2)", "b, held-out batch"]
    overview = png_labels(str(out / "curves_overview.png"))
    assert [ax["ylabel"] for ax in overview] == [curves.UNITS[m] for m in METRICS]
    table = (out / "curves.md").read_text()
    assert "| a | tensorboard | 2–8 (4 logged) | 6.5 |" in table
    assert "wrote" in capsys.readouterr().out


def test_summary_history_fallback(tmp_path):
    """A run without event files (the JAX trainer writes none): its summary's history."""
    history = [{"step": 5, "loss": 3.0, "disc_auc": 0.5}, {"step": 10, "loss": 2.0, "disc_auc": 0.75}]
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "pretraining_summary.json").write_text(json.dumps({"history": history}))
    out = tmp_path / "out"
    assert curves.main(["--run", f"jax={tmp_path / 'jax'}", "--output_dir", str(out),
                        "--metrics", "loss,disc_auc"]) == 0
    run = json.loads((out / "curves.json").read_text())["runs"]["jax"]
    assert run["source"] == "pretraining_summary.json history"
    assert run["series"]["loss"] == {"step": [5, 10], "value": [3.0, 2.0]}
    assert sorted(p.name for p in out.glob("*.png")) == [
        "curves_disc_auc.png", "curves_loss.png", "curves_overview.png"]


@pytest.mark.parametrize("flags, message", [
    (["--run", "x=MISSING"], "run directory not found"),
    (["--run", "x"], "expected NAME=MODEL_DIR"),
    (["--run", "x=EMPTY"], "no TensorBoard event files"),
    (["--run", "x=RUN", "--metrics", "loss,nope"], "--metrics nope: in none of the runs"),
    (["--run", "x=RUN", "--smooth", "0"], "--smooth must be at least 1"),
])
def test_bad_input_is_one_line(tmp_path, capsys, flags, message):
    (tmp_path / "empty").mkdir()
    _write_run(tmp_path / "run", _records(0.0, [1]))
    paths = {"MISSING": "missing", "EMPTY": "empty", "RUN": "run"}
    flags = [f.split("=")[0] + "=" + str(tmp_path / paths[f.split("=")[1]])
             if "=" in f and f.split("=")[1] in paths else f for f in flags]
    assert curves.main([*flags, "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
