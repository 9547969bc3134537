"""The (width, depth) grid (elastic/grid.py): every cell of a tiny DynaBERT-W run (2 layers, one
training step per seed, width phase only, to keep the file fast; test_train.py runs width + depth
and shares its fine-tuned teacher and generated data with this file) and of the plain fine-tuned
teacher evaluated on the generated dev set (40 examples) over two seeds, Markdown + JSON + PNG."""
import json

import pytest

from tests.elastic.test_train import ELASTIC_HPARAMS, elastic_args, shared_teacher

WIDTHS, DEPTHS = (1.0, 0.25), (1.0, 0.5)


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    from elastic.run import main
    root = tmp_path_factory.mktemp("grid")
    glue_dir, vocab, teacher_dir = shared_teacher(tmp_path_factory)
    out = root / "run"
    args = elastic_args(glue_dir, vocab, teacher_dir, out, seeds="0,1", width_list="1,0.25",
                        phases="width")   # the grid evaluates the last finished phase
    hparams = dict(ELASTIC_HPARAMS, max_train_steps=1)
    args[args.index("--hparams") + 1] = json.dumps(hparams)
    assert main(args) == 0
    return root, glue_dir, vocab, out


def test_every_cell_with_costs_and_seeds(grid_run):
    from base.plots import png_labels
    from elastic.extract import subnetwork_cost
    from elastic.slicing import Subnet
    from model import ConvBertConfig
    root, glue_dir, vocab, out = grid_run
    grid = json.loads((out / "grid" / "grid.json").read_text())
    assert grid["metric"] == "accuracy" and grid["settings"]["seeds"] == [0, 1]
    cells = {(c["width"], c["depth"]): c for c in grid["cells"]}
    assert set(cells) == {(w, d) for w in WIDTHS for d in DEPTHS}
    assert grid["settings"]["models"]["dynabert"][0].endswith("width/model")
    config = ConvBertConfig.from_json(str(out / "seed_0" / "width" / "model" /
                                          "convbert_config.json"))
    for (w, d), cell in cells.items():
        cost = subnetwork_cost(config, Subnet.for_width(config, w, d), 24)
        assert cell["parameters"] == cost["parameters"] > 0
        assert cell["flops_per_token"] == cost["flops_per_token"]
        for kind in ("dynabert", "plain"):
            values = [m["accuracy"] for m in cell[kind]["per_seed"]]
            assert len(values) == 2 and all(0 <= v <= 100 for v in values)
            summary = cell[kind]["summary"]["accuracy"]
            assert abs(summary["mean"] - sum(values) / 2) < 1e-9 and summary["n"] == 2
    assert cells[(1.0, 1.0)]["parameters"] > cells[(0.25, 0.5)]["parameters"]
    assert cells[(0.25, 1.0)]["sa_heads"] == 1   # 0.25 of 2 heads: never 0
    table = (out / "grid" / "grid.md").read_text()
    assert table.count("\n| 0.25 |") == 2 and "| width \\ depth | 1 | 0.5 |" in table
    labels = png_labels(str(out / "grid" / "grid.png"))
    assert labels[0]["xlabel"] == "encoder parameters (millions)"
    assert labels[0]["ylabel"] == "dev accuracy (%)" and labels[0]["title"]
    assert len(labels[0]["legend"]) == 2


def test_grid_command_rewrites_from_run_dir(grid_run, tmp_path, capsys):
    from elastic.grid import main
    root, glue_dir, vocab, out = grid_run
    args = ["--task_name", "mrpc", "--run_dir", str(out), "--data_dir", str(glue_dir),
            "--vocab_file", str(vocab), "--output_dir", str(tmp_path / "g"),
            "--width_list", "1,0.25", "--depth_list", "0.5", "--max_seq_length", "24"]
    assert main(args) == 0
    grid = json.loads((tmp_path / "g" / "grid.json").read_text())
    assert [(c["width"], c["depth"]) for c in grid["cells"]] == [(1.0, 0.5), (0.25, 0.5)]
    # same cells, same numbers as the run's own grid
    full = {(c["width"], c["depth"]): c for c in
            json.loads((out / "grid" / "grid.json").read_text())["cells"]}
    for cell in grid["cells"]:
        assert cell["dynabert"]["per_seed"] == full[(cell["width"], cell["depth"])][
            "dynabert"]["per_seed"]
    capsys.readouterr()
    assert main(args[:2] + ["--run_dir", str(tmp_path / "missing")] + args[4:]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "missing" in err and "\n" not in err
