"""analysis/model_table.py (paper Tables 1 and 7): every configs/ row, numbers from model/flops.py,
the paper's figures beside ours, a labelled plot, one-line errors."""
import json

import pytest

from analysis import model_table
from analysis.paper import TABLE1_PARAMS_M
from base.plots import png_labels
from model import flops
from model.config import CONFIGS_DIR, ConvBertConfig
from tests.conftest import shapes_only


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("model_table")
    assert model_table.main(["--output_dir", str(out), "--seq_len", "128"]) == 0
    return out, json.loads((out / "model_table.json").read_text()), (out / "model_table.md").read_text()


def test_every_paper_row_is_in_the_table_with_model_flops_numbers(written):
    _, result, text = written
    import pathlib
    shipped = sorted(p.stem for p in pathlib.Path(CONFIGS_DIR).glob("*.json"))
    rows = {r["name"]: r for r in result["rows"]}
    assert sorted(rows) == shipped
    assert any(n.startswith("table1_") for n in rows) and any(n.startswith("fig5_") for n in rows)
    for name in shipped:
        if name.startswith(("table1_", "table2_", "fig5_")):
            assert f"| `{name}` |" in text
        cfg = ConvBertConfig.from_name(name)
        row = rows[name]
        assert row["params"] == flops.encoder_parameters(cfg)
        assert row["inference_flops"] == 128 * flops.forward_flops_per_token(cfg, 128)
        assert row["pretrain_flops"] > row["inference_flops"] > 0
    # a Table 1 row: the paper's figure beside ours, ✓ / ✗ at whole millions
    assert rows["table1_convbert_base"]["paper_params_m"] == TABLE1_PARAMS_M["table1_convbert_base"] == 106
    assert rows["table1_convbert_base"]["params_match"] is True
    assert rows["table1_electra_small"]["params_match"] is False  # 13.48M vs the paper's 14M
    assert "| `table1_convbert_base` |" in text and "| 105,680,520 | 106M | ✓ |" in text
    # the BERT rows train with the masked-LM objective, the others with RTD (generator included)
    assert rows["table1_bert_small"]["recipe"]["objective"] == "mlm"
    assert rows["table1_bert_small"]["pretrain_flops"] < rows["table1_electra_small"]["pretrain_flops"]
    cfg = ConvBertConfig.from_name("table1_convbert_small")
    assert rows["table1_convbert_small"]["pretrain_flops"] == flops.pretrain_flops(
        cfg, 128, 1_000_000, 128, 0.25)["total"]


def test_table7_is_the_flops_calculators_recipes_with_the_paper_beside(written):
    _, result, text = written
    by_recipe = {r["recipe"]: r for r in result["table7"]}
    assert list(by_recipe) == list(flops.RECIPES)
    for name, row in by_recipe.items():
        summary = flops.summarize(name)
        assert row["params"] == summary.parameters
        assert row["pretrain_flops"] == summary.pretrain_flops
    assert by_recipe["convbert-base"]["configs_row"] == "table1_convbert_base"
    assert by_recipe["electra-small"]["configs_row"] == "table1_electra_small"
    assert by_recipe["convbert-base"]["pretrain_match"] is True  # 1.89e19 -> 1.9e19
    assert "| 1.9e19 | ✓ |" in text


def test_parameter_counts_equal_the_built_keras_models(written):
    """Two small rows built for real (the test of every row is tests/model/test_paper_configs.py)."""
    from model import ConvBertModel
    _, result, _ = written
    rows = {r["name"]: r for r in result["rows"]}
    for name in ("table1_convbert_small_bnk", "table2_small_dynamic"):
        built = shapes_only(lambda: ConvBertModel(ConvBertConfig.from_name(name)))
        assert built.count_params() == rows[name]["params"]


def test_plot_has_a_labelled_panel_per_size(written):
    out, _, _ = written
    labels = png_labels(str(out / "model_table.png"))
    assert [a["title"] for a in labels] == ["small recipe", "medium-small recipe", "base recipe"]
    for axes in labels:
        assert "FLOPs" in axes["xlabel"] and "millions" in axes["ylabel"]
        assert "Table 1: ablation, by size" in axes["legend"]
    assert any(t.startswith("Fig. 5") for t in labels[0]["legend"])


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    assert model_table.main(["--output_dir", str(tmp_path / "x"), "--seq_len", "0"]) == 1
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert model_table.main(["--output_dir", str(a_file)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "--seq_len" in err[0] and str(a_file) in err[1]
    assert not (tmp_path / "x").exists()
