"""analysis/linear_probe.py: the probe on hand-made features, and the command end to end on tiny
random checkpoints (a pre-training model_dir and its architecture with fresh weights)."""
import json

import numpy as np
import pytest

from analysis import linear_probe
from tests.analysis.test_attention import MRPC_HEADER, WORDS, tiny_checkpoints  # noqa: F401


def test_probe_separates_separable_features_and_measures_spread():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    x = np.stack([y * 4.0 + rng.normal(0, 0.1, 200), rng.normal(0, 1, 200)], axis=1)
    accuracy, spread = linear_probe.probe(x[:150], y[:150], x[150:], y[150:])
    assert accuracy == 100.0 and spread > 0.1
    constant = np.ones((150, 3)) + rng.normal(0, 1e-6, (150, 3))   # every example the same
    accuracy, spread = linear_probe.probe(constant, y[:150], constant[:50], y[150:])
    assert spread < 1e-5 and 0.0 <= accuracy <= 100.0


def write_mrpc(root, train_labels, dev_rows=6):
    rng = np.random.default_rng(1)

    def rows(labels):
        out = []
        for i, label in enumerate(labels):
            a = " ".join(rng.choice(WORDS, size=rng.integers(3, 9)))
            b = " ".join(rng.choice(WORDS, size=rng.integers(3, 12)))
            out.append(f"{label}\t{1000 + i}\t{2000 + i}\t{a}\t{b}\n")
        return MRPC_HEADER + "".join(out)
    (root / "MRPC").mkdir(parents=True)
    (root / "MRPC" / "train.tsv").write_text(rows(train_labels), encoding="utf-8")
    (root / "MRPC" / "dev.tsv").write_text(rows([i % 2 for i in range(dev_rows)]),
                                           encoding="utf-8")
    return root


def run_probe(ckpts, glue_dir, out, *specs, task="mrpc", seed=0):
    args = [a for spec in specs for a in ("--checkpoint", spec)]
    return linear_probe.main(args + ["--glue_dir", str(glue_dir), "--task", task,
                                     "--vocab_file", str(ckpts["vocab"]), "--seed", str(seed),
                                     "--output_dir", str(out), "--max_seq_length", "32"])


def test_end_to_end_tiny_models(tiny_checkpoints, tmp_path, capsys):  # noqa: F811
    glue = write_mrpc(tmp_path / "glue", [i % 2 for i in range(16)])
    out = tmp_path / "probe"
    ckpt = tiny_checkpoints["convbert"]
    assert run_probe(tiny_checkpoints, glue, out, f"convbert={ckpt}",
                     f"fresh=random:{ckpt}", f"bert={tiny_checkpoints['bert']}", seed=7) == 0
    report = json.loads((out / "linear_probe.json").read_text())
    results = {r["name"]: r for r in report["results"]}
    assert list(results) == ["convbert", "fresh", "bert"]
    assert [r["random_init"] for r in results.values()] == [False, True, False]
    assert results["fresh"]["checkpoint"] == str(ckpt)
    for r in results.values():
        for kind in ("cls", "mean"):
            assert 0.0 <= r[f"{kind}_dev_accuracy"] <= 100.0 and r[f"{kind}_spread"] >= 0.0
        assert r["dev_majority_class"] == 50.0   # 3 + 3 dev labels
    assert report["settings"]["num_train"] == 16 and report["settings"]["num_dev"] == 6
    # the random-weight copy (seed 7; the fixture's weights are seed 0's) is another encoder
    assert results["fresh"]["cls_spread"] != results["convbert"]["cls_spread"]
    table = (out / "linear_probe.md").read_text()
    assert "| fresh (random init) |" in table and "| convbert |" in table
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "regression", "spec", "one_label", "twice"])
def test_bad_input_is_one_line(case, tiny_checkpoints, tmp_path, capsys):  # noqa: F811
    glue = write_mrpc(tmp_path / "glue", [1] * 8 if case == "one_label" else [0, 1] * 4)
    ckpt = tiny_checkpoints["convbert"]
    specs = {"missing": [f"a={tmp_path / 'nope'}"], "spec": ["no_equals_sign"],
             "twice": [f"a={ckpt}", f"a=random:{ckpt}"]}.get(case, [f"a={ckpt}"])
    out = tmp_path / "probe"
    assert run_probe(tiny_checkpoints, glue, out, *specs,
                     task="sts" if case == "regression" else "mrpc") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    expected = {"missing": "nope: checkpoint not found", "regression": "regression task",
                "spec": "expected NAME=PATH", "one_label": "1 label(s)",
                "twice": "given twice"}[case]
    assert expected in err
    assert not out.exists()   # nothing half-written
