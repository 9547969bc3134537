"""analysis/attention.py: the diagonal concentration C on hand-made maps, and the command end to
end on two tiny random checkpoints (a ConvBERT and a BERT-architecture model)."""
import json

import numpy as np
import pytest

from analysis import attention
from base.plots import png_labels
from tests.conftest import shared_path

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
WORDS = ["the", "company", "said", "it", "will", "sell", "shares", "of", "its", "stock", "in",
         "a", "deal", "worth", "million", "dollars", "he", "was", ".", ","]
TINY = dict(vocab_size=30522, hidden_size=32, embedding_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)


def uniform_map(size):
    return np.full((size, size), 1.0 / size)


# ----------------------------------------------------------------------------- the metric
def test_identity_map_is_infinite():
    assert attention.diagonal_concentration(np.eye(5)[None], [5], window=4) == np.inf
    assert attention.diagonal_concentration(np.eye(5)[None], [5], window=0) == np.inf


def test_uniform_map_counts_band_pairs():
    # T = 10, w = 4: in-band pairs 10 + 2 * (9 + 8 + 7 + 6) = 70, out of band 100 - 70 = 30.
    assert attention.band_mask(10, 4).sum() == 70
    c = attention.diagonal_concentration(uniform_map(10)[None], [10], window=4)
    assert c == pytest.approx(70 / 30)


def test_banded_map():
    # Each row: 0.6 on the diagonal, 0.4 three positions away (cyclically): |i - j| = 3 always.
    m = np.zeros((6, 6))
    for i in range(6):
        m[i, i] = 0.6
        m[i, (i + 3) % 6] = 0.4
    assert attention.diagonal_concentration(m[None], [6], window=1) == pytest.approx(3.6 / 2.4)
    assert attention.diagonal_concentration(m[None], [6], window=2) == pytest.approx(1.5)
    assert attention.diagonal_concentration(m[None], [6], window=3) == np.inf


def test_padding_positions_do_not_count():
    # Length 6 in a 10-long map: real rows uniform over the 6 real keys, junk everywhere else.
    m = np.full((10, 10), 5.0)
    m[:6, :6] = 1 / 6
    # T = 6, w = 1: 6 + 2 * 5 = 16 pairs in band, 20 out.
    c = attention.diagonal_concentration(m[None], [6], window=1)
    assert c == pytest.approx(16 / 20)


def test_pooling_sums_before_dividing():
    # w = 1. A: uniform T = 10 -> 10 + 2*9 = 28 of 100 pairs in band: in 2.8, out 7.2.
    # B: uniform over length 4 (padded to 10) -> 4 + 2*3 = 10 of 16 pairs: in 2.5, out 1.5.
    a = uniform_map(10)
    b = np.zeros((10, 10))
    b[:4, :4] = 1 / 4
    maps, lengths = np.stack([a, b]), [10, 4]
    inside, outside = attention.band_sums(maps, attention.positions_kept(lengths, 10), window=1)
    np.testing.assert_allclose(inside, [2.8, 2.5])
    np.testing.assert_allclose(outside, [7.2, 1.5])
    pooled = attention.diagonal_concentration(maps, lengths, window=1)
    assert pooled == pytest.approx((2.8 + 2.5) / (7.2 + 1.5))
    assert pooled != pytest.approx((2.8 / 7.2 + 2.5 / 1.5) / 2)   # not the mean of ratios


def test_summarize_per_layer_and_head():
    # 2 examples, 2 layers, 2 heads.
    inside = np.array([[[1, 2], [3, 0]], [[1, 0], [1, 4]]], float)
    outside = np.array([[[1, 1], [1, 0]], [[1, 2], [3, 0]]], float)
    s = attention.summarize(inside, outside)
    assert s["C_pooled"] == pytest.approx(12 / 9)
    assert s["C_per_layer"] == pytest.approx([4 / 5, 8 / 4])
    assert s["C_per_head"][0] == pytest.approx([2 / 2, 2 / 3])
    assert s["C_per_head"][1][0] == pytest.approx(4 / 4) and s["C_per_head"][1][1] == np.inf
    assert s["C_mean_of_examples"] == pytest.approx((6 / 3 + 6 / 6) / 2)
    assert s["band_mass_fraction"] == pytest.approx(12 / 21)


def test_heads_and_layers_pool_like_the_averaged_map():
    rng = np.random.default_rng(0)
    maps = rng.random((3, 2, 4, 12, 12))
    maps /= maps.sum(-1, keepdims=True)     # rows sum to 1, as softmax rows do
    lengths = [12, 12, 12]
    pooled = attention.diagonal_concentration(maps, lengths, window=2)
    averaged = attention.diagonal_concentration(maps.mean(axis=(1, 2)), lengths, window=2)
    assert pooled == pytest.approx(averaged)


def test_exclude_special_drops_rows_and_columns():
    ids = np.array([[101, 7, 8, 102, 9, 102, 0, 0]])
    keep = attention.positions_kept([6], 8, ids, special_ids=(101, 102))
    assert keep.tolist() == [[False, True, True, False, True, False, False, False]]
    # Uniform over 6 real keys; kept positions 1, 2, 4: with w = 1 pairs (1,1),(1,2),(2,1),(2,2),
    # (4,4) are in band, (1,4),(4,1),(2,4),(4,2) out -> 5 / 4.
    m = np.zeros((1, 8, 8))
    m[0, :6, :6] = 1 / 6
    assert attention.diagonal_concentration(m, [6], 1, keep=keep) == pytest.approx(5 / 4)


# ----------------------------------------------------------------------------- end to end
def uniform_attention_c(lengths, window):
    """Pooled C of maps uniform over each example's real keys (what a random init gives)."""
    inside = outside = 0.0
    for n in lengths:
        pairs = int(attention.band_mask(int(n), window).sum())
        inside, outside = inside + pairs / n, outside + (n * n - pairs) / n
    return inside / outside


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """A ConvBERT as a pre-training model_dir (discriminator/ export) and a BERT-architecture
    model (conv_type none, head_ratio 1) as a native export, both with random weights."""
    import keras
    from model import ConvBertConfig, ConvBertModel
    root = tmp_path_factory.mktemp("attention_ckpts")
    keras.utils.set_random_seed(0)
    ConvBertModel(ConvBertConfig(**TINY, head_ratio=2)).save_pretrained(
        root / "convbert_run" / "discriminator")
    ConvBertModel(ConvBertConfig(**TINY, conv_type="none", head_ratio=1)).save_pretrained(
        root / "bert")
    vocab = root / "tokenizer" / "vocab.txt"   # not beside the checkpoints: no_vocab case
    vocab.parent.mkdir()
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return {"convbert": root / "convbert_run", "bert": root / "bert", "vocab": vocab}


@pytest.fixture
def tiny_glue(tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for i in range(6):
        a = " ".join(rng.choice(WORDS, size=rng.integers(3, 9)))
        b = " ".join(rng.choice(WORDS, size=rng.integers(3, 12)))
        rows.append(f"{i % 2}\t{1000 + i}\t{2000 + i}\t{a}\t{b}\n")
    (tmp_path / "glue" / "MRPC").mkdir(parents=True)
    (tmp_path / "glue" / "MRPC" / "dev.tsv").write_text(MRPC_HEADER + "".join(rows),
                                                        encoding="utf-8")
    return tmp_path / "glue"


def run_main(ckpts, glue_dir, out, vocab, *extra):
    return attention.main(["--checkpoint", f"bert={ckpts['bert']}",
                           "--checkpoint", f"convbert={ckpts['convbert']}",
                           "--glue_dir", str(glue_dir), "--task", "mrpc",
                           *(["--vocab_file", str(vocab)] if vocab else []),
                           "--output_dir", str(out), "--max_seq_length", "32", *extra])


def check_outputs(out, examples, num_examples, window=4):
    data = json.loads((out / "attention.json").read_text())
    assert data["settings"]["num_examples"] == num_examples
    assert data["settings"]["window"] == window
    models = {m["name"]: m for m in data["models"]}
    assert set(models) == {"bert", "convbert"}
    assert models["convbert"]["config"]["num_self_attention_heads"] == 2   # 4 heads, ratio 2
    assert models["bert"]["config"]["num_self_attention_heads"] == 4
    for name, m in models.items():
        assert len(m["C_per_layer"]) == 2
        assert np.array(m["C_per_head"]).shape == (2, m["config"]["num_self_attention_heads"])
        assert m["num_examples"] == num_examples
        assert 0 < m["C_pooled"] < np.inf
        assert min(m["C_per_layer"]) <= m["C_pooled"] <= max(m["C_per_layer"])
    md = (out / "attention.md").read_text()
    assert "| bert |" in md and "| convbert |" in md
    for png in [f"attention_maps_example{k}.png" for k in examples] + [
            "attention_concentration_per_layer.png"]:
        panels = [a for a in png_labels(out / png) if a["title"]]
        assert panels and all(a["xlabel"] and a["ylabel"] for a in panels), png
    maps = png_labels(out / f"attention_maps_example{examples[0]}.png")
    assert [a["xlabel"] for a in maps if a["title"]] == ["key position"] * 2
    curve = png_labels(out / "attention_concentration_per_layer.png")[0]
    assert len(curve["legend"]) == 2
    return models


def test_end_to_end_tiny_models(tiny_checkpoints, tiny_glue, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main(tiny_checkpoints, tiny_glue, out, tiny_checkpoints["vocab"],
                    "--examples", "0,2") == 0
    models = check_outputs(out, [0, 2], 6)
    # Random init (initializer_range 0.02): near-uniform attention over the real keys, so C is
    # close to the uniform map's C of these lengths.
    from data.tokenization import load_tokenizer
    from finetune.features import convert_examples_to_features
    from finetune.glue.readers import read_examples
    features = convert_examples_to_features(read_examples(tiny_glue, "mrpc", "dev"), "mrpc",
                                            load_tokenizer(str(tiny_checkpoints["vocab"])), 32)
    expected = uniform_attention_c(features["input_mask"].sum(axis=1), 4)
    for m in models.values():
        assert m["C_pooled"] == pytest.approx(expected, rel=0.03)
    assert "paper" in (out / "attention.md").read_text()   # labelled reference rows (MRPC, w=4)

    # --exclude_special: the setting is recorded and C changes.
    out2 = tmp_path / "out_special"
    assert run_main(tiny_checkpoints, tiny_glue, out2, tiny_checkpoints["vocab"],
                    "--exclude_special", "--window", "2") == 0
    data = json.loads((out2 / "attention.json").read_text())
    assert data["settings"]["exclude_special"] is True
    assert data["models"][0]["C_pooled"] != pytest.approx(models["bert"]["C_pooled"])


def test_real_mrpc_first_examples(tiny_checkpoints, tmp_path):
    glue_dir = shared_path("data", "glue")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    out = tmp_path / "out"
    assert run_main(tiny_checkpoints, glue_dir, out, vocab, "--max_examples", "16") == 0
    models = check_outputs(out, [0], 16)
    assert all(0.3 < m["C_pooled"] < 3 for m in models.values())


@pytest.mark.parametrize("case", ["missing_checkpoint", "bad_syntax", "missing_dev", "bad_example",
                                  "no_vocab"])
def test_bad_input_is_one_line(case, tiny_checkpoints, tiny_glue, tmp_path, capsys):
    ckpts = dict(tiny_checkpoints)
    glue_dir = tiny_glue
    extra, vocab = [], tiny_checkpoints["vocab"]
    if case == "no_vocab":
        vocab = None   # none beside the checkpoints either
    elif case == "missing_checkpoint":
        ckpts["bert"] = tmp_path / "nowhere"
    elif case == "missing_dev":
        glue_dir = tmp_path / "empty_glue"
        glue_dir.mkdir()
    elif case == "bad_example":
        extra = ["--examples", "99"]
    out = tmp_path / "out"
    if case == "bad_syntax":
        code = attention.main(["--checkpoint", "no_equals_sign", "--glue_dir", str(glue_dir),
                               "--output_dir", str(out)])
    else:
        code = run_main(ckpts, glue_dir, out, vocab, *extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("error: "), err
    expected = {"missing_checkpoint": "nowhere", "bad_syntax": "NAME=PATH",
                "missing_dev": "MRPC", "bad_example": "99", "no_vocab": "--vocab_file"}[case]
    assert expected in err[0]
    assert not out.exists()
