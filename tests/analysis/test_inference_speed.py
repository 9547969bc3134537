"""analysis/inference_speed.py (paper Table 9) on a tiny block: table layout, FLOPs, plot, errors.
No timing assertions (the machine is shared)."""
import json

from analysis import inference_speed
from base.plots import png_labels


def test_tiny_table_has_both_blocks_every_shape_and_a_labelled_plot(tmp_path, capsys):
    out = tmp_path / "speed"
    assert inference_speed.main(["--output_dir", str(out), "--hidden", "64", "--heads", "4",
                                 "--shapes", "1x16,2x32", "--rounds", "1"]) == 0
    result = json.loads((out / "inference_speed.json").read_text())
    assert [(r["batch"], r["seq_len"]) for r in result["shapes"]] == [(1, 16), (2, 32)]
    for row in result["shapes"]:
        assert row["self_ms_per_sample"] > 0 and row["mixed_ms_per_sample"] > 0
    for seq_len in ("16", "32"):
        gflops = result["gflops_per_sample"][seq_len]
        for key in ("with_output", "without_output"):
            assert 0 < gflops["mixed"][key] < gflops["self"][key]
        assert gflops["self"]["without_output"] < gflops["self"]["with_output"]
    assert len(result["load_before"]) == 3 and result["counts"] == (result["load_before"][0] <= 1.0)
    table = (out / "inference_speed.md").read_text()
    for row in ("| self-attention block (ours) |", "| mixed-attention block (ours) |",
                "| self-attention block (paper) | 26.5 |", "| mixed-attention block (paper) | 19.3 |"):
        assert row in table
    for shape in ("ms/sample 1×16", "ms/sample 2×32", "GFLOPs/sample s=16", "GFLOPs/sample s=32"):
        assert shape in table
    assert "load average (1, 5, 15 min) before" in capsys.readouterr().out
    (labels,) = png_labels(str(out / "inference_speed.png"))
    assert labels["ylabel"] == "time per sample (ms)" and "sequence length" in labels["xlabel"]
    assert labels["legend"] == ["self-attention block", "mixed-attention block"] and labels["title"]


def test_base_flops_at_512_match_model_flops():
    """The counted numbers the Markdown compares with the paper's (model/flops.py, base)."""
    gflops = inference_speed.block_gflops(768, 12, 512)
    assert round(gflops["self"]["with_output"], 3) == 3.258
    assert round(gflops["mixed"]["with_output"], 3) == 2.570
    assert round(gflops["mixed"]["without_output"] / gflops["self"]["without_output"], 3) == 0.740


def test_bad_flags_are_one_line_errors_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    assert inference_speed.main(["--output_dir", str(out), "--shapes", "1x16,oops"]) == 1
    assert inference_speed.main(["--output_dir", str(out), "--rounds", "0"]) == 1
    assert inference_speed.main(["--output_dir", str(out), "--size", "huge"]) == 1
    assert inference_speed.main(["--output_dir", str(out), "--backend_mode", "jax"]) == 1
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert inference_speed.main(["--output_dir", str(a_file), "--shapes", "1x16"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and all(line.startswith("error: ") for line in err)
    assert "oops" in err[0] and "huge" in err[2] and "KERAS_BACKEND=jax" in err[3]
    assert str(a_file) in err[4]
    assert not out.exists()
