"""analysis/ablation.py end to end at the `smoke` scale: the kernel study (K 3 and 9) and then
Table 2 (three variants) on one output directory, on a slice of a Gutenberg book and 40-example
MRPC / RTE copies (real data from ../shared, skipped without it); plus the tiny-scale mapping of
every configs/ row and the one-line errors.

SLOW: the module fixture pre-trains four smoke models and fine-tunes them (2 seeds, 2 tasks), each
stage a subprocess: about 2 to 2.5 minutes on 2 shared CPU cores in all (the other tests here
take a second or less).
"""
import json
import statistics

import pytest

from analysis import ablation
from base.plots import png_labels
from tests.conftest import shared_path
from tests.test_reproduction import _head

TASKS = ("mrpc", "rte")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    book = shared_path("data", "corpus", "gutenberg-en", "a-study-in-scarlet-pg244.txt")
    glue = shared_path("data", "glue")
    root = tmp_path_factory.mktemp("ablation")
    _head(book, root / "corpus" / "book.txt", 1500)
    for task in ("MRPC", "RTE"):
        _head(glue / task / "train.tsv", root / "glue" / task / "train.tsv", 41)  # header + 40
        _head(glue / task / "dev.tsv", root / "glue" / task / "dev.tsv", 31)
    out = root / "out"
    common = ["--scale", "smoke", "--corpus_dirs", str(root / "corpus"), "--glue_dir",
              str(root / "glue"), "--vocab_file", str(vocab), "--output_dir", str(out),
              "--num_shards", "4", "--build_processes", "1"]
    assert ablation.main(["--study", "kernel", "--kernels", "9,3", *common]) == 0
    assert ablation.main(["--study", "table2", "--no_heldout", *common]) == 0
    return out


def _average_of_medians(variant):
    return statistics.mean(variant["glue"][t]["summary"]["accuracy"]["median"] for t in TASKS)


def test_kernel_study_table_and_curve(runs):
    doc = json.loads((runs / "ablation_kernel.json").read_text())
    assert doc["tasks"] == list(TASKS) and doc["num_trials"] == 2 and doc["pretrain_steps"] == 4
    assert [v["kernel"] for v in doc["variants"]] == [3, 9]
    for v in doc["variants"]:
        assert v["model"]["conv_kernel_size"] == v["kernel"] and v["model"]["conv_type"] == "sdconv"
        for task in TASKS:
            accuracy = v["glue"][task]["summary"]["accuracy"]
            assert accuracy["n"] == 2 and 0.0 <= accuracy["median"] <= 100.0
        assert v["average"] == pytest.approx(_average_of_medians(v))
        assert v["pretraining"]["global_step"] == 4
        curve = (runs / "pretrain" / v["run"] / "heldout_curve.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in curve] == [2, 4]
    table = (runs / "ablation_kernel.md").read_text()
    assert "| 3 | H 32" in table and "| 9 | H 32" in table
    (labels,) = png_labels(str(runs / "ablation_kernel.png"))
    assert "kernel size" in labels["xlabel"] and "GLUE" in labels["ylabel"] and labels["title"]
    assert labels["legend"] == ["MRPC (acc)", "RTE (acc)", "GLUE average (of medians)"]


def test_table2_has_every_variant_and_reuses_identical_runs(runs):
    doc = json.loads((runs / "ablation_table2.json").read_text())
    assert [v["label"] for v in doc["variants"]] == [
        "conventional convolution", "dynamic convolution", "span-based dynamic convolution"]
    assert [v["model"]["conv_type"] for v in doc["variants"]] == ["lightweight", "dynamic", "sdconv"]
    for v in doc["variants"]:
        assert set(v["glue"]) == set(TASKS)
        assert v["average"] == pytest.approx(_average_of_medians(v))
    # span-based = Fig. 5's K 9 = ConvBERT-small: one run, made by the kernel study.
    assert doc["variants"][2]["run"] == "table1_convbert_small"
    kernel_runs = {v["run"] for v in json.loads((runs / "ablation_kernel.json").read_text())["variants"]}
    assert "table1_convbert_small" in kernel_runs
    assert sorted(p.name for p in (runs / "pretrain").iterdir()) == [
        "fig5_small_kernel3", "table1_convbert_small", "table2_small_conventional",
        "table2_small_dynamic"]
    hparams = json.loads((runs / "pretrain" / "table2_small_dynamic" / "hparams.json").read_text())
    assert hparams["model_size"] == "table2_small_dynamic"
    assert hparams["model_hparam_overrides"]["conv_type"] == "dynamic"
    assert not (runs / "pretrain" / "table2_small_dynamic" / "heldout_curve.jsonl").exists()
    table = (runs / "ablation_table2.md").read_text()
    for label in ("| conventional convolution |", "| dynamic convolution |",
                  "| span-based dynamic convolution |"):
        assert label in table
    (labels,) = png_labels(str(runs / "ablation_table2.png"))
    assert labels["xlabel"] == "variant" and "GLUE" in labels["ylabel"]
    assert labels["legend"] == ["MRPC (acc)", "RTE (acc)", "GLUE average"]


def test_tiny_mapping_keeps_structure_and_size_relation():
    from model.config import ConvBertConfig
    from pretrain.generator_config import generator_config
    from pretrain.hparams import TINY_MODEL
    from reproduce.recipes import get_recipe
    tiny = get_recipe("tiny")
    variants = [v for s in ablation.STUDIES for v in ablation.study_variants(s, "tiny", [1, 9, 27])]
    runs = ablation.canonical_runs(variants, tiny)
    for name, (run, config, spec) in runs.items():
        row = ablation.load_row(name)
        model = ConvBertConfig(**config)
        model.validate()
        generator_config(model, tiny.pretrain["generator_hidden_size"])
        assert model.num_hidden_layers == TINY_MODEL["num_hidden_layers"]
        for field in ablation.STRUCTURAL_FIELDS:
            assert getattr(model, field) == getattr(row, field), (name, field)
        assert spec.model_size == name
        assert spec.hparams["learning_rate"] == tiny.pretrain["learning_rate"]
        if row.hidden_size == 256:   # the small rows are exactly the tiny model
            assert {k: config[k] for k in TINY_MODEL} == {
                **TINY_MODEL, "num_groups": row.num_groups}
    hidden = {n: runs[n][1]["hidden_size"] for n in runs}
    assert (hidden["table1_convbert_small"] < hidden["table1_convbert_medium_small"]
            < hidden["table1_convbert_medium_small_bnk_gl_larger"] < hidden["table1_convbert_base"])
    assert runs["table2_small_span_based"][0] == runs["fig5_small_kernel9"][0] == "table1_convbert_small"
    assert runs["table1_bert_small"][0] != runs["table1_electra_small"][0]   # MLM vs RTD
    small = get_recipe("small")
    spec = ablation.canonical_runs(ablation.study_variants("table1", "small", []), small)[
        "table1_convbert_medium_small"][2]
    assert spec.hparams == {"num_train_steps": 1000000, "num_warmup_steps": 10000}


@pytest.mark.parametrize("flags, message", [
    (["--study", "kernel", "--kernels", "3,4"], "fig5_small_kernel4.json: no such config"),
    (["--study", "table2", "--variants", "table2_small_nope"], "--variants table2_small_nope"),
    (["--study", "table2", "--corpus_dirs", "MISSING"], "corpus directory not found"),
])
def test_bad_input_is_one_line(tmp_path, capsys, flags, message):
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "glue").mkdir()
    args = ["--scale", "smoke", "--corpus_dirs", str(tmp_path / "corpus"), "--glue_dir",
            str(tmp_path / "glue"), "--vocab_file", str(vocab), "--output_dir",
            str(tmp_path / "out"), *flags]
    args = [str(tmp_path / a) if a == "MISSING" else a for a in args]
    assert ablation.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
