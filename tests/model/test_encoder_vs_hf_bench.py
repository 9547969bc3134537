"""benchmarks/encoder_vs_hf.py (docs/PERFORMANCE.md P1, issue 51) on a tiny model, one round: the
JSON rows that benchmarks/refresh.py reads, the threads and environment each side ran with, and the
agreement printed for shared weights. No timing assertions (the machine is shared).

The TensorFlow run of the suite checks the interleaved way with every TF call in bf16; the JAX run
checks both ways with the Keras-on-JAX call in fp32 (each a few child processes)."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, keras_backend

ROW_FIELDS = {"shape", "call", "way", "precision", "ours_ms", "hf_ms", "ratio", "threads",
              "loadavg_before", "loadavg_after", "date"}


def run_bench(tmp_path, *flags):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "benchmarks/encoder_vs_hf.py", "--size", "tiny",
                           "--shapes", "2x16", "--rounds", "1", "--warmup", "1",
                           "--json_out", str(out), *flags], cwd=REPO_ROOT,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for row in result["rows"]:
        assert set(row) == ROW_FIELDS
        assert row["shape"] == "2x16" and row["ours_ms"] > 0 and row["hf_ms"] > 0
        assert len(row["loadavg_before"]) == 3 and len(row["loadavg_after"]) == 3
        assert set(row["threads"]) == {"ours", "hf"} and "torch:" in row["threads"]["hf"]
    assert [(o["shape"], o["call"], o["way"]) for o in result["others_cpu"]] == [
        (r["shape"], r["call"], r["way"]) for r in result["rows"]]
    assert len(result["counts"]) == len(result["rows"])
    assert "load average (1, 5, 15 min) before" in proc.stdout
    assert "load average (1, 5, 15 min) after" in proc.stdout
    return result, proc.stdout


@pytest.mark.skipif(keras_backend() != "tensorflow", reason="the TF calls: the TensorFlow run")
def test_interleaved_tf_calls_in_bf16(tmp_path):
    result, stdout = run_bench(tmp_path, "--way", "interleaved", "--precision", "bf16",
                               "--calls", "tf_function,predict_on_batch,saved_model")
    rows = result["rows"]
    assert [(r["call"], r["way"], r["precision"]) for r in rows] == [
        ("tf_function", "interleaved", "bf16"), ("predict_on_batch", "interleaved", "bf16"),
        ("saved_model", "interleaved", "bf16")]
    assert all(r["threads"]["ours"] == "tf: intra-op 2, inter-op 1" for r in rows)
    assert result["bf16_policy"] == "mixed_bfloat16"
    agree = {a["what"]: a for a in result["agreement"]}
    assert agree["ours fp32 (tensorflow) vs HF fp32"]["max_abs"] < 1e-4   # the same weights
    for what in ("HF bf16 (autocast) vs HF fp32", "ours tf_function bf16 vs ours fp32",
                 "ours saved_model bf16 vs ours fp32", "ours predict_on_batch bf16 vs HF bf16"):
        assert 0 < agree[what]["rel"] < 0.05, (what, agree[what])
    # no OMP_WAIT_POLICY unless asked for
    assert all("OMP_WAIT_POLICY" not in c["env"] for c in result["children"])
    assert "saved_model      interleaved bf16" in stdout


@pytest.mark.skipif(keras_backend() != "jax", reason="the Keras-on-JAX call: the JAX run")
def test_both_ways_keras_on_jax(tmp_path):
    result, _ = run_bench(tmp_path, "--way", "both", "--calls", "jax")
    rows = result["rows"]
    assert [(r["call"], r["way"]) for r in rows] == [("jax", "interleaved"), ("jax", "processes")]
    assert rows[1]["ratio"] == rows[1]["ours_ms"] / rows[1]["hf_ms"]
    assert all(r["threads"]["ours"].startswith("jax: XLA CPU default") for r in rows)
    agree = {a["what"]: a for a in result["agreement"]}
    assert agree["ours jax fp32 vs HF fp32"]["max_abs"] < 1e-4
    alone = [c for c in result["children"] if c["way"] == "processes"]
    assert [c["call"] for c in alone] == ["hf", "jax"]
    # the separate processes run at the libraries' defaults: nothing added to the environment
    start = result["env_at_start"]
    for child in alone:
        for key in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY"):
            assert child["env"].get(key) == start.get(key), (child, key)
