"""reproduce/seeds.py: reproductions that differ in --seed, side by side and pooled (on tiny
hand-written run directories in TensorFlow's in-memory filesystem)."""
import json
import uuid

import pytest
import tensorflow as tf

from base.plots import png_labels
from reproduce import seeds

# rte: convbert trials per run; random init scores 50 in every trial of every run.
TRIALS = {0: {"convbert": [54.0, 56.0, 55.0], "random": [50.0, 50.0, 50.0]},
          1: {"convbert": [48.0, 49.0, 47.0], "random": [50.0, 50.0, 50.0]}}


def _write(path, obj):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(obj))


def _make_run(root, seed, scale="tiny", helps=None):
    run = f"{root}/seed{seed}"
    tf.io.gfile.makedirs(f"{run}/pretrain/convbert")
    _write(f"{run}/pretrain/convbert/hparams.json", {"seed": seed})
    curve = [{"step": s, "gen_accuracy": 0.05 + 0.01 * s / 100 + seed / 100,
              "disc_auc": 0.6 + s / 10000} for s in (100, 200)]
    for model, scores in TRIALS[seed].items():
        results = f"{run}/finetune/{model}/results"
        tf.io.gfile.makedirs(results)
        for i, score in enumerate(scores, 1):
            _write(f"{results}/rte_dev_metrics_trial{i}.json", {"metrics": {"accuracy": score}})
    _write(f"{run}/results.json", {
        "scale": scale, "tasks": ["rte"], "models": ["convbert", "random"], "glue": {},
        "pretraining": {"convbert": {"heldout": curve}},
        "pretraining_helps": {"convbert": {"rte": helps if helps is not None else seed == 0}}})
    return run


@pytest.fixture
def root():
    path = f"ram://seeds-{uuid.uuid4().hex}"
    yield path
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)


def test_per_run_rows_and_pooled_trials(root):
    runs = [seeds.load_run(_make_run(root, s)) for s in (0, 1)]
    data = seeds.combine(runs)
    assert [r["seed"] for r in data["runs"]] == [0, 1]
    assert data["runs"][0]["wins"] == {"convbert": 1} and data["runs"][1]["wins"] == {"convbert": 0}
    assert data["runs"][1]["heldout_final"]["convbert"]["gen_accuracy"] == pytest.approx(0.08)
    pooled = data["glue"]["convbert"]["rte"]["summary"]["accuracy"]
    all_trials = TRIALS[0]["convbert"] + TRIALS[1]["convbert"]
    assert pooled["n"] == 6 and pooled["mean"] == pytest.approx(sum(all_trials) / 6)
    assert pooled["median"] == pytest.approx(51.5)
    # Seed 0 alone wins RTE (55 vs 50, std 1); pooled, the pre-training seed's spread (std 3.9)
    # swallows the 1.5-point lead.
    assert data["pretraining_helps"] == {"convbert": {"rte": False}}
    assert data["num_trials"] == 6
    text = seeds.markdown(data)
    assert "| 51.5 (51.5 ± 3.9) | 51.5 |" in text and "1 of 1 (rte)" in text
    assert "ConvBERT: 0 of 1 tasks" in text


def test_cli_writes_the_report_and_plots(root, capsys):
    dirs = [_make_run(root, s) for s in (0, 1)]
    assert seeds.main(dirs + [f"--output_dir={root}/out"]) == 0
    for name in ("seeds.json", "seeds.md", "seeds_heldout.png", "seeds_glue.png"):
        assert tf.io.gfile.exists(f"{root}/out/{name}")
    labels = png_labels(f"{root}/out/seeds_heldout.png")
    assert "ROC AUC (non-padding tokens)" in json.dumps(labels)
    assert "seeds:" in capsys.readouterr().out


def test_mismatched_or_missing_runs_are_one_line_errors(root, capsys):
    a = _make_run(root, 0)
    tf.io.gfile.makedirs(f"{root}/other")
    b = _make_run(f"{root}/other", 1, scale="tiny_3ep")
    assert seeds.main([a, b, f"--output_dir={root}/out"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scale 'tiny_3ep' differs" in err and "results.json" in err
    assert seeds.main([a, a, f"--output_dir={root}/out"]) == 1
    assert "share a pre-training seed" in capsys.readouterr().err
    assert seeds.main([a, f"{root}/nowhere", f"--output_dir={root}/out"]) == 1
    assert f"{root}/nowhere/results.json: not found" in capsys.readouterr().err
    assert seeds.main([a, f"--output_dir={root}/out"]) == 1
    assert "at least two" in capsys.readouterr().err
    assert not tf.io.gfile.exists(f"{root}/out")
