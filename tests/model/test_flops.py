"""FLOPs / parameter calculator against the papers (ConvBERT Tables 3, 4, 7; ELECTRA Table 1)."""
import numpy as np
import pytest

from model import flops
from model.config import ConvBertConfig
from tests.conftest import shapes_only


@pytest.mark.parametrize("name", ["convbert-small", "convbert-base", "electra-small", "electra-base"])
def test_pretraining_flops_match_the_papers_within_rounding(name):
    s = flops.summarize(name)
    # The papers print two significant digits, e.g. 1.3e18 stands for [1.25e18, 1.35e18).
    assert abs(s.pretrain_flops / s.paper - 1) < 0.04, (name, s.pretrain_flops, s.paper)


def test_rounded_to_two_digits():
    got = {n: float(f"{flops.summarize(n).pretrain_flops:.1e}") for n in flops.RECIPES}
    assert got["convbert-small"] == 1.3e18
    assert got["convbert-base"] == 1.9e19
    assert got["electra-small"] == 1.4e18
    assert got["electra-base"] == 6.4e19


def test_parameter_counts_match_hugging_face():
    # Exact encoder counts of transformers' ConvBertModel / ElectraModel (tied weights once).
    assert flops.encoder_parameters(ConvBertConfig.from_size("small")) == 13_143_768
    assert flops.encoder_parameters(ConvBertConfig.from_size("medium-small")) == 17_475_888
    assert flops.encoder_parameters(ConvBertConfig.from_size("base")) == 105_680_520
    assert flops.encoder_parameters(flops.electra_config("small")) == 13_483_008
    assert flops.encoder_parameters(flops.electra_config("base")) == 108_891_648


def test_parameter_count_matches_the_keras_model():
    from model import ConvBertModel
    for cfg in (ConvBertConfig(vocab_size=100, hidden_size=48, embedding_size=16, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=96, num_groups=2,
                               max_position_embeddings=32),
                ConvBertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, conv_type="dynamic",
                               num_attention_heads=2, intermediate_size=64, max_position_embeddings=32),
                ConvBertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                               conv_type="lightweight", num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)):
        model = shapes_only(lambda: ConvBertModel(cfg))
        assert flops.encoder_parameters(cfg) == sum(int(np.prod(v.shape)) for v in model.weights)


def test_attention_flops_ratio_of_the_issue():
    base = ConvBertConfig.from_size("base")
    bert = base.replace(head_ratio=1, conv_type="none")
    ratio = {s: sum(flops.attention_flops(base, s).values()) / sum(flops.attention_flops(bert, s).values())
             for s in (128, 512)}
    assert ratio[128] == pytest.approx(0.86, abs=0.005)
    assert ratio[512] == pytest.approx(0.79, abs=0.005)


def _flops_cli():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "flops.py"
    spec = importlib.util.spec_from_file_location("flops_cli", path)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    return cli


def test_cli_prints_the_recipes(capsys):
    cli = _flops_cli()
    cli.main([])
    out = capsys.readouterr().out
    assert "convbert-base" in out and "1.894e+19" in out
    cli.main(["--size", "small", "--steps", "1e6", "--batch", "128", "--seq", "128", "--gen", "0.25"])
    assert "13,143,768" in capsys.readouterr().out


def test_cli_counts_a_reproduction_recipe_with_its_own_hparams(capsys):
    from pretrain.hparams import TINY_MODEL
    cli = _flops_cli()
    cli.main(["--recipe", "tiny"])
    out = capsys.readouterr().out
    # The tiny recipe: TINY_MODEL, 3,000 steps of 32 x 128, a 1/4-wide generator, BERT's vocab.
    convbert = ConvBertConfig(**TINY_MODEL, vocab_size=30522)
    electra = convbert.replace(conv_type="none", head_ratio=1)
    for name, cfg in (("convbert", convbert), ("electra", electra)):
        expected = flops.pretrain_flops(cfg, 32, 3000, 128, 0.25)["total"]
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert f"{expected:.3e}" in line, (name, line)
    assert convbert != electra
    cli.main(["--recipe", "small"])
    small = capsys.readouterr().out
    assert "1.258e+18" in small and "1.00x" in small


def test_cli_unknown_recipe_is_one_line():
    cli = _flops_cli()
    with pytest.raises(SystemExit) as e:
        cli.main(["--recipe", "huge"])
    assert "unknown --scale 'huge'" in str(e.value) and "\n" not in str(e.value)
