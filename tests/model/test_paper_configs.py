"""configs/: every row of the ConvBERT paper as a config (issue 21, item 6).

* every paper-row config loads with the repo's loader, builds a discriminator encoder whose
  parameter count is the exact number configs/README.md records, and rounds to the paper's
  figure (rows where the official architecture does not reach it are expected failures, strict:
  a config that starts to match must update the README);
* every file in configs/ is listed in configs/README.md;
* `--model_size` takes a configs/ name or a .json path in both drivers (pretrain/hparams.py,
  finetune/hparams.py + encoder_source.py), and a bad one is a one-line error.
"""
import json
import os
import re
import uuid

import numpy as np
import pytest

from analysis.paper import TABLE1_PARAMS_M
from model import ConvBertConfig, ConvBertModel
from model.config import CONFIGS_DIR
from model.flops import encoder_parameters
from tests.conftest import shapes_only

README = os.path.join(CONFIGS_DIR, "README.md")

_NOT_REACHED = ("the official architecture does not reach the paper's figure at its rounding "
                "(configs/README.md, 'Where the counts differ from the paper')")

# (config name, paper's figure in millions or None, our exact encoder parameter count)
TABLE1 = [(name, TABLE1_PARAMS_M[name], exact) for name, exact in [
    ("table1_bert_small", 13_483_008),
    ("table1_electra_small", 13_483_008),
    ("table1_convbert_small_bnk", 11_905_536),
    ("table1_convbert_small", 13_143_768),
    ("table1_electra_medium_small", 25_315_968),
    ("table1_convbert_medium_small_bnk", 21_770_112),
    ("table1_convbert_medium_small_bnk_gl", 14_692_224),
    ("table1_convbert_medium_small_bnk_gl_larger", 17_026_608),
    ("table1_convbert_medium_small", 17_475_888),
    ("table1_bert_base", 108_891_648),
    ("table1_electra_base", 108_891_648),
    ("table1_convbert_base_bnk", 94_722_048),
    ("table1_convbert_base", 105_680_520),
]]
# Rows whose figure matches at the paper's rounding (the rest are expected failures).
MATCHED = {"table1_convbert_small_bnk", "table1_convbert_medium_small_bnk_gl_larger",
           "table1_convbert_medium_small", "table1_convbert_base"}
TABLE2 = [
    ("table2_small_conventional", None, 12_693_720),
    ("table2_small_dynamic", None, 12_721_368),
    ("table2_small_span_based", None, 13_143_768),
]
FIG5 = [(f"fig5_small_kernel{k}", None, 13_094_424 + (k - 1) // 2 * 12_336) for k in range(1, 28, 2)]
CONV_ONLY = [("ablation_small_conv_only", None, 13_621_680)]
PAPER_ROWS = TABLE1 + TABLE2 + FIG5 + CONV_ONLY
# Older names kept because other tests load them (configs/README.md, last table).
OLDER = [("electra_small", 13_483_008), ("convbert_medium_small", 17_475_888),
         ("convbert_base", 105_680_520), ("ablation_small_bnk", 11_905_536),
         ("ablation_small_bnk_gl", 8_759_808), ("ablation_small_bnk_gl_larger", 17_525_136)]
# The causal language models of issue 18 (run_lm.py), not paper rows.
OLDER += [("lm_small_mixed", 13_143_640), ("lm_small_transformer", 13_138_144)]

# One row of each kind (architecture switches, not sizes): the rows every run runs on tiny inputs.
ONE_OF_EACH_KIND = ["table1_electra_small", "table1_convbert_small_bnk",
                    "table1_convbert_medium_small_bnk_gl_larger", "table2_small_conventional",
                    "table2_small_dynamic", "fig5_small_kernel1", "fig5_small_kernel27",
                    "ablation_small_conv_only"]


def built_count(name):
    """Parameters of the discriminator encoder built from configs/<name>.json (its variables'
    shapes: tests/conftest.py shapes_only)."""
    return shapes_only(lambda: ConvBertModel(ConvBertConfig.from_name(name))).count_params()


def _forward(config):
    ids = np.array([[2, 7, 11, 5, 9, 3, 0, 0]], dtype="int32")
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
              "segment_ids": np.zeros_like(ids)}
    return np.asarray(ConvBertModel(config)(inputs))


def _readme_rows():
    """{file name: the README table line that lists it}."""
    rows = {}
    with open(README, encoding="utf-8") as f:
        for line in f:
            for name in re.findall(r"`([\w.-]+\.json)`", line):
                if line.startswith("|"):
                    rows.setdefault(name, line)
    return rows


# ------------------------------------------------------------------------------- configs/ itself
def test_every_config_file_is_listed_in_the_readme():
    shipped = sorted(f for f in os.listdir(CONFIGS_DIR) if f.endswith(".json"))
    listed = _readme_rows()
    assert [f for f in shipped if f not in listed] == []
    assert [f for f in listed if f not in shipped] == []
    expected = {name + ".json" for name, _, _ in PAPER_ROWS} | {n + ".json" for n, _ in OLDER}
    assert set(shipped) == expected  # exactly the paper's rows and the older names the tests use


def test_readme_records_our_exact_count_and_the_paper_figure():
    listed = _readme_rows()
    for name, paper, exact in PAPER_ROWS + [(n, None, c) for n, c in OLDER]:
        line = listed[name + ".json"]
        assert f"{exact:,}" in line, (name, line)
        if paper is not None and name.startswith("table1_"):
            assert f"| {paper}M |" in line and ("✓" in line) == (name in MATCHED), (name, line)


@pytest.mark.parametrize("name,paper,exact", PAPER_ROWS + [(n, None, c) for n, c in OLDER],
                         ids=[r[0] for r in PAPER_ROWS] + [n for n, _ in OLDER])
def test_config_builds_with_the_recorded_parameter_count(name, paper, exact):
    config = ConvBertConfig.from_name(name)
    assert encoder_parameters(config) == exact
    assert built_count(name) == exact


@pytest.mark.parametrize("name,paper,exact", [
    r if r[0] in MATCHED else pytest.param(*r, marks=pytest.mark.xfail(strict=True,
                                                                        reason=_NOT_REACHED))
    for r in TABLE1], ids=[r[0] for r in TABLE1])
def test_table1_parameter_count_matches_the_paper_at_its_rounding(name, paper, exact):
    # the count the row's config gives (equal to the built model's: the test above)
    assert round(encoder_parameters(ConvBertConfig.from_name(name)) / 1e6) == paper


def test_rows_are_what_their_names_say():
    c = {name: ConvBertConfig.from_name(name) for name, _, _ in PAPER_ROWS}
    for name in ("table1_bert_small", "table1_electra_small", "table1_electra_medium_small",
                 "table1_bert_base", "table1_electra_base"):  # attention only: BERT / ELECTRA
        assert (c[name].head_ratio, c[name].conv_type, c[name].num_groups) == (1, "none", 1)
        assert c[name].use_self_attention and c[name].num_conv_heads == 0
    assert c["table1_bert_small"] == c["table1_electra_small"]
    assert c["table1_bert_base"] == c["table1_electra_base"]
    for size, prefix in (("small", "table1_convbert_small"),
                         ("medium-small", "table1_convbert_medium_small"),
                         ("base", "table1_convbert_base")):
        assert c[prefix] == ConvBertConfig.from_size(size)  # the released models
        assert c[prefix + "_bnk"].conv_type == "none" and c[prefix + "_bnk"].head_ratio == 2
        assert c[prefix + "_bnk"].num_groups == 1
    assert c["table1_electra_medium_small"].replace(head_ratio=2, conv_type="sdconv", num_groups=2) \
        == ConvBertConfig.from_size("medium-small")
    gl = c["table1_convbert_medium_small_bnk_gl"]
    assert gl == c["table1_convbert_medium_small_bnk"].replace(num_groups=2)
    larger = c["table1_convbert_medium_small_bnk_gl_larger"]
    assert (larger.hidden_size, larger.num_attention_heads, larger.head_size,
            larger.intermediate_size) == (432, 432 // 48, 48, 4 * 432)  # official H // 48, 4H
    assert larger.replace(hidden_size=384, num_attention_heads=8, intermediate_size=1536) == gl
    small = ConvBertConfig.from_size("small")
    assert [c[n].conv_type for n, _, _ in TABLE2] == ["lightweight", "dynamic", "sdconv"]
    assert all(c[n].replace(conv_type="sdconv") == small for n, _, _ in TABLE2)
    assert [c[n].conv_kernel_size for n, _, _ in FIG5] == list(range(1, 28, 2))
    assert all(c[n].replace(conv_kernel_size=9) == small for n, _, _ in FIG5)
    conv_only = c["ablation_small_conv_only"]
    assert not conv_only.use_self_attention and conv_only.num_conv_heads == 4


@pytest.mark.parametrize("name", ONE_OF_EACH_KIND)
def test_variants_run_on_tiny_inputs(name):
    """One short forward per kind of row (2 layers, 8 tokens): every variant is runnable."""
    config = ConvBertConfig.from_name(name).replace(num_hidden_layers=2, vocab_size=64)
    out = _forward(config)
    assert out.shape == (1, 8, config.hidden_size) and np.isfinite(out).all()


# --------------------------------------------------------------------- --model_size: pre-training
def test_make_hparams_takes_a_configs_row():
    from pretrain.hparams import make_hparams, model_config
    hp = make_hparams("table1_convbert_medium_small_bnk_gl")
    assert hp.model_size == hp.model_name == "table1_convbert_medium_small_bnk_gl"
    assert (hp.linear_groups, hp.head_ratio, hp.conv_type, hp.embedding_size,
            hp.conv_kernel_size) == (2, 2, "none", 128, 9)
    assert (hp.learning_rate, hp.train_batch_size, hp.generator_hidden_size) == (5e-4, 128, 0.25)
    config = model_config(hp, 30522)
    assert config == ConvBertConfig.from_name("table1_convbert_medium_small_bnk_gl")
    assert (config.hidden_size, config.num_attention_heads, config.num_groups,
            config.conv_type) == (384, 8, 2, "none")
    # the row's values win over its size's (ELECTRA-medium-small: no groups, no bottleneck)
    hp = make_hparams("table1_electra_medium_small")
    assert (hp.linear_groups, hp.head_ratio, hp.conv_type, hp.learning_rate) == (1, 1, "none", 5e-4)
    # --hparams / flags still win over the row
    hp = make_hparams("table1_convbert_small", {"conv_kernel_size": 5}, {"learning_rate": 1e-4})
    assert model_config(hp, 30522) == ConvBertConfig.from_name("fig5_small_kernel5")
    assert hp.learning_rate == 1e-4


@pytest.mark.parametrize("name", [n for n, _, _ in PAPER_ROWS])
def test_every_row_builds_its_own_config_in_pre_training(name):
    from pretrain.hparams import make_hparams, model_config, recipe_size
    hp = make_hparams(name)
    config = ConvBertConfig.from_name(name)
    assert model_config(hp, config.vocab_size) == config
    assert recipe_size(config) == {256: "small", 384: "medium-small", 432: "medium-small",
                                   768: "base"}[config.hidden_size]
    assert hp.electra_objective == (not name.startswith("table1_bert_"))  # BERT rows: MLM


def test_make_hparams_takes_a_config_file_and_name_variants(tmp_path):
    from pretrain.hparams import make_hparams, model_config, resolve_model_size
    config = ConvBertConfig.from_name("table2_small_dynamic").replace(num_hidden_layers=3)
    path = str(tmp_path / "my_model.json")
    config.to_json(path)
    hp = make_hparams(overrides={"model_size": path})
    assert hp.model_size == path and hp.model_name == "my_model"
    assert model_config(hp, 30522) == config and hp.learning_rate == 3e-4  # small's recipe
    shipped = os.path.join(CONFIGS_DIR, "table1_bert_base.json")
    hp = make_hparams(shipped)
    assert hp.model_name == "table1_bert_base" and not hp.electra_objective
    assert model_config(hp, 30522) == ConvBertConfig.from_name("table1_bert_base")
    for spec in ("table1-electra-small", "table1_electra_small.json", " table1_electra_small "):
        assert resolve_model_size(spec)[0] == "table1_electra_small"
    assert resolve_model_size("Medium_Small") == ("medium-small", None)


def test_make_hparams_takes_a_config_file_on_a_bucket_path():
    tf = pytest.importorskip("tensorflow")
    from pretrain.hparams import make_hparams, model_config
    root = f"ram://paper_configs_{uuid.uuid4().hex[:8]}"
    try:
        config = ConvBertConfig.from_name("table1_convbert_small_bnk")
        config.to_json(f"{root}/cfg.json")
        hp = make_hparams(f"{root}/cfg.json")
        assert model_config(hp, 30522) == config and hp.model_name == "cfg"
    finally:
        if tf.io.gfile.exists(root):
            tf.io.gfile.rmtree(root)


def test_bad_model_size_is_a_one_line_error(tmp_path):
    from pretrain.hparams import HParamsError, make_hparams
    with pytest.raises(HParamsError) as e:
        make_hparams("table1_convbert_huge")
    text = str(e.value)
    assert "\n" not in text and "table1_convbert_huge" in text
    assert "medium-small" in text and "table1_convbert_medium_small_bnk_gl" in text
    assert "fig5_small_kernel27" in text
    missing = str(tmp_path / "nowhere" / "model.json")
    with pytest.raises(HParamsError) as e:
        make_hparams(missing)
    assert "\n" not in str(e.value) and missing in str(e.value) and "no such file" in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hidden_size": 256, "num_attention_heads": 3}))
    with pytest.raises(HParamsError) as e:
        make_hparams(str(bad))
    assert "\n" not in str(e.value) and "bad.json" in str(e.value) and "divisible" in str(e.value)
    bad.write_text('{"hidden_size": ')
    with pytest.raises(HParamsError, match="invalid JSON"):
        make_hparams(str(bad))


def test_run_pretraining_resolves_a_row_name(tmp_path_factory, tmp_path):
    """The driver's own flag handling (`resolve`, no training) on the default corpus's shards."""
    from data.default_corpus import default_vocab_file
    import run_pretraining
    from tests.pretrain.test_run_pretraining import tiny_shards_dir
    data = tiny_shards_dir(tmp_path_factory)
    flags_ = run_pretraining.FLAGS
    try:
        flags_.unparse_flags()
        flags_(["prog", f"--pretrain_tfrecords={data / 'pretrain_data.tfrecord*'}",
                f"--vocab_file={default_vocab_file()}", f"--model_dir={tmp_path / 'm'}",
                "--model_size=table1_convbert_medium_small_bnk_gl", "--max_seq_length=32"])
        hp, model_dir, files, _ = run_pretraining.resolve(flags_)
    finally:
        flags_.unparse_flags()
    assert hp.model_size == hp.model_name == "table1_convbert_medium_small_bnk_gl" and files
    assert (hp.linear_groups, hp.conv_type, hp.max_seq_length) == (2, "none", 32)


# ----------------------------------------------------------------------- --model_size: fine-tuning
def test_finetuning_takes_a_configs_row_or_a_file(tmp_path):
    from finetune.encoder_source import EncoderSource
    from finetune.hparams import HParamsError, load_hparams
    hp = load_hparams('{"model_size": "table1_convbert_base_bnk"}')
    assert hp.model_size == "table1_convbert_base_bnk"
    assert hp.for_task("sst").learning_rate == 1e-4  # base's fine-tuning learning rate
    assert EncoderSource(None, hp).config == ConvBertConfig.from_name("table1_convbert_base_bnk")
    hp = load_hparams(None, model_size="table2_small_dynamic")  # the --model_size flag
    assert hp.for_task("rte").learning_rate == 3e-4
    hp.model_hparam_overrides = {"num_hidden_layers": 2}
    assert EncoderSource(None, hp).config == ConvBertConfig.from_name(
        "table2_small_dynamic").replace(num_hidden_layers=2)
    path = tmp_path / "cfg.json"
    ConvBertConfig.from_name("table1_electra_medium_small").to_json(str(path))
    hp = load_hparams(json.dumps({"model_size": str(path)}))
    assert EncoderSource(None, hp).config.hidden_size == 384
    assert hp.for_task("cola").learning_rate == 3e-4
    assert load_hparams('{"model_size": "medium_small"}').model_size == "medium-small"
    with pytest.raises(HParamsError) as e:
        load_hparams('{"model_size": "tiny"}')  # a pre-training-only size
    assert "\n" not in str(e.value) and "model_size" in str(e.value)
    assert "table2_small_span_based" in str(e.value)
    with pytest.raises(HParamsError, match="no such file"):
        load_hparams(None, model_size=str(tmp_path / "missing.json"))
