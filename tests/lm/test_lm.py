"""The causal language model end to end (issue 18): a tiny config trains 20 steps on a small text,
its loss falls, a rerun resumes from the checkpoint, the perplexity equals exp(mean CE) computed
here on the same blocks, generation is deterministic when greedy; the driver's CLI and errors;
the shipped mixed / Transformer configs have matched parameter counts."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

WORDS = ("the cat dog sat ran on under a mat rug big small red blue and then it was "
         "home park").split()
# One layer: training, resume, perplexity and generation do not depend on the count, and
# tracing the steps grows with it (causality over several layers: tests/model/test_causal.py).
TINY = {"vocab_size": 64, "hidden_size": 32, "embedding_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 4, "head_ratio": 2, "intermediate_size": 64,
        "conv_kernel_size": 3, "max_position_embeddings": 64, "type_vocab_size": 1,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "causal": True}
SEQ_LEN = 16


def _text(seed, lines):
    """WikiText-like lines from a tiny grammar (learnable in a few steps)."""
    rng = np.random.default_rng(seed)
    out = [" = Heading = ", ""]
    for _ in range(lines):
        adj, noun = rng.choice(["big", "small", "red", "blue"]), rng.choice(["cat", "dog"])
        place = rng.choice(["mat", "rug", "park"])
        out.append(f" the {adj} {noun} sat on the {place} and then it ran home . ")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    (root / "texts").mkdir()
    (root / "texts" / "train.txt").write_text(_text(0, 120))
    (root / "texts" / "eval.txt").write_text(_text(1, 15))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "=", ".", "heading"] + WORDS
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (root / "tiny.json").write_text(json.dumps(TINY))
    return root


def _hp(corpus, steps):
    from lm.task import make_hparams
    return make_hparams({"model_config": str(corpus / "tiny.json"), "seq_len": SEQ_LEN,
                         "train_batch_size": 8, "learning_rate": 3e-3, "num_warmup_steps": 2,
                         "log_every_n_steps": 5, "save_checkpoints_steps": 10, "seed": 3},
                        {"num_train_steps": steps})


@pytest.fixture(scope="module")
def trained(corpus):
    """20 steps, then a rerun to 30 that resumes from the step-20 checkpoint."""
    from data.tokenization import load_tokenizer
    from lm import task as lm_task
    from lm.data import token_stream
    tokenizer = load_tokenizer(str(corpus / "vocab.txt"))
    stream = token_stream([str(corpus / "texts" / "train.txt")], tokenizer)
    eval_stream = token_stream([str(corpus / "texts" / "eval.txt")], tokenizer)
    model_dir = str(corpus / "run")
    runs = []
    for steps in (20, 30):
        hp = _hp(corpus, steps)
        task, core = lm_task.make_core(hp, lm_task.model_config(hp, tokenizer.vocab_size), stream,
                                       log=lambda m: None, heldout_stream=eval_stream)
        runs.append(lm_task.train(task, core, model_dir, log=lambda m: None))
    return {"runs": runs, "task": task, "tokenizer": tokenizer, "eval_stream": eval_stream,
            "model_dir": model_dir}


def test_stream_has_line_ends_and_blocks_tile_it(corpus):
    from data.tokenization import load_tokenizer
    from lm.data import eval_windows, token_stream, training_blocks
    tokenizer = load_tokenizer(str(corpus / "vocab.txt"))
    stream = token_stream([str(corpus / "texts")], tokenizer)     # a directory: both files
    assert (stream == tokenizer.sep_id).sum() >= 120
    blocks = training_blocks(stream, SEQ_LEN)
    assert blocks.shape[1] == SEQ_LEN + 1
    np.testing.assert_array_equal(blocks[1, 0], blocks[0, -1])      # consecutive, one overlap
    for stride in (SEQ_LEN, 5):
        inputs, targets, weights = eval_windows(stream, SEQ_LEN, stride)
        assert weights.sum() == len(stream) - 1                     # each target scored once
        scored = weights > 0
        assert np.all(weights[scored] == 1)


def test_training_loss_decreases_and_resume_continues(trained):
    first, resumed = trained["runs"]
    assert first["global_step"] == 20 and first["resumed_from_step"] == 0
    assert first["final"]["loss"] < first["first"]["loss"] - 0.5
    assert math.isclose(first["final"]["ppl"], math.exp(first["final"]["loss"]), rel_tol=1e-6)
    assert resumed["resumed_from_step"] == 20 and resumed["global_step"] == 30
    assert resumed["steps_this_run"] == 10
    assert resumed["final"]["loss"] < first["first"]["loss"]
    model_dir = trained["model_dir"]
    for name in ("hparams.json", "model_config.json", "lm_summary.json", "lm/model.safetensors"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    assert os.listdir(os.path.join(model_dir, "train"))          # TensorBoard events


def _independent_ppl(model, stream, seq_len):
    """exp(mean CE) over non-overlapping blocks stream[i·L : i·L + L + 1], written out here."""
    total, count = 0.0, 0
    for begin in range(0, len(stream) - 1, seq_len):
        block = stream[begin:begin + seq_len + 1]
        logits = np.asarray(model({"input_ids": block[None, :-1]}, training=False))[0]
        logits = logits.astype(np.float64)
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        total -= log_probs[np.arange(len(block) - 1), block[1:]].sum()
        count += len(block) - 1
    assert count == len(stream) - 1
    return math.exp(total / count)


def test_perplexity_is_exp_of_mean_cross_entropy(trained):
    from lm.task import evaluate
    model, stream = trained["task"].model, trained["eval_stream"]
    scores = evaluate(model, stream, SEQ_LEN, batch_size=4)
    assert math.isfinite(scores["ppl"]) and scores["tokens"] == len(stream) - 1
    assert math.isclose(scores["ppl"], _independent_ppl(model, stream, SEQ_LEN), rel_tol=1e-4)
    assert scores["ppl"] < len(trained["tokenizer"].vocab) / 2      # learned something
    sliding = evaluate(model, stream, SEQ_LEN, stride=4, batch_size=8)
    assert sliding["tokens"] == scores["tokens"] and math.isfinite(sliding["ppl"])


def test_heldout_curve_has_every_save_once(trained):
    """Saves at 10 and 20, then the resumed run's save at 30: one curve, the last point equal to
    the final model's perplexity."""
    from lm.task import CURVE_FILE, evaluate
    with open(os.path.join(trained["model_dir"], CURVE_FILE)) as f:
        curve = json.load(f)
    assert [point["step"] for point in curve] == [10, 20, 30]
    assert all(point["tokens"] == len(trained["eval_stream"]) - 1 for point in curve)
    assert curve[-1]["ppl"] < curve[0]["ppl"]
    final = evaluate(trained["task"].model, trained["eval_stream"], SEQ_LEN)
    assert math.isclose(curve[-1]["ppl"], final["ppl"], rel_tol=1e-5)


def test_generation_length_determinism_and_causality(trained):
    from lm.task import detokenize, generate
    model, tokenizer = trained["task"].model, trained["tokenizer"]
    prompt = [int(i) for i in tokenizer.tokenize(["the big cat sat on"])[0]]
    greedy = generate(model, prompt, 7, SEQ_LEN)
    assert len(greedy) == 7 and greedy == generate(model, prompt, 7, SEQ_LEN)
    # The first greedy token is the argmax of an unpadded forward pass over the prompt alone.
    logits = np.asarray(model({"input_ids": np.array([prompt], np.int32)}, training=False))
    assert greedy[0] == int(np.argmax(logits[0, -1]))
    sampled = generate(model, prompt, 25, SEQ_LEN, temperature=1.0, top_k=5, seed=1)
    assert len(sampled) == 25 and sampled == generate(model, prompt, 25, SEQ_LEN,
                                                      temperature=1.0, top_k=5, seed=1)
    assert isinstance(detokenize(tokenizer, greedy), str)


def _run_lm(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "KERAS_BACKEND": "tensorflow"}
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_lm.py"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_driver_evaluates_generates_and_reports_errors(trained, corpus):
    model_dir = trained["model_dir"]
    done = _run_lm(f"--model_dir={model_dir}", f"--vocab_file={corpus / 'vocab.txt'}",
                   f"--eval_files={corpus / 'texts' / 'eval.txt'}", "--generate=the red dog",
                   "--num_generate_tokens=5")
    assert done.returncode == 0, done.stderr
    assert "eval: ppl" in done.stdout and "generated (greedy)" in done.stdout
    with open(os.path.join(model_dir, "lm_eval.json")) as f:
        scores = json.load(f)
    assert scores["step"] == 30 and math.isfinite(scores["ppl"])
    missing = _run_lm(f"--model_dir={model_dir}", f"--vocab_file={corpus / 'vocab.txt'}",
                      f"--eval_files={corpus / 'nope.txt'}")
    errors = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert missing.returncode == 1 and len(errors) == 1 and "nope.txt" in errors[0]
    assert "Traceback" not in missing.stderr and "lm_eval" not in missing.stdout


def test_shipped_lm_configs_have_matched_parameter_counts():
    from lm.model import count_parameters
    from model.config import ConvBertConfig
    mixed = ConvBertConfig.from_name("lm_small_mixed")
    transformer = ConvBertConfig.from_name("lm_small_transformer")
    assert mixed.causal and transformer.causal
    assert (mixed.conv_type, mixed.num_self_attention_heads, mixed.num_conv_heads) == ("sdconv", 2, 2)
    assert (transformer.conv_type, transformer.num_self_attention_heads) == ("none", 4)
    counts = count_parameters(mixed), count_parameters(transformer)
    assert counts == (13_207_314, 13_201_818)
    assert abs(counts[0] - counts[1]) / counts[0] < 0.05


def test_compare_trains_both_models_and_writes_table_and_curves(corpus, capsys):
    """lm.compare end to end: a tiny mixed LM and a tiny Transformer LM on the same blocks, the
    table, JSON and PNG; a rerun skips the finished runs and rewrites the same numbers."""
    from base.plots import png_labels
    from lm import compare
    transformer = {**TINY, "conv_type": "none", "head_ratio": 1}
    (corpus / "tiny_transformer.json").write_text(json.dumps(transformer))
    out = corpus / "compare"
    argv = [f"--train_files={corpus / 'texts' / 'train.txt'}",
            f"--eval_files={corpus / 'texts' / 'eval.txt'}",
            f"--vocab_file={corpus / 'vocab.txt'}", f"--output_dir={out}",
            f"--models={corpus / 'tiny.json'},{corpus / 'tiny_transformer.json'}", "--seeds=2",
            "--hparams=" + json.dumps({"seq_len": SEQ_LEN, "train_batch_size": 8,
                                       "num_train_steps": 12, "num_warmup_steps": 2,
                                       "learning_rate": 3e-3, "log_every_n_steps": 4,
                                       "save_checkpoints_steps": 6})]
    doc = compare.run(argv, log=lambda m: None)
    assert list(doc["results"]) == [str(corpus / "tiny.json"), str(corpus / "tiny_transformer.json")]
    for entry in doc["results"].values():
        (run,) = entry["runs"]
        assert run["steps"] == 12 and run["heldout"]["step"] == [6, 12]
        assert math.isclose(run["heldout"]["value"][-1], run["ppl"], rel_tol=1e-5)
        assert len(run["train"]["step"]) == 3 and math.isfinite(run["ppl"])
        assert entry["ppl_mean"] == run["ppl"]
    params = [e["runs"][0]["params"] for e in doc["results"].values()]
    assert params[0] != params[1]                     # two different models were trained
    table = (out / "lm_compare.md").read_text()
    assert table.count("| ") > 10 and "rebuttal" in table
    labels = png_labels(str(out / "lm_compare_curves.png"))
    assert "optimizer step" in json.dumps(labels) and "perplexity" in json.dumps(labels)
    logs = []
    again = compare.run(argv, log=logs.append)
    assert sum("skipped" in m for m in logs) == 2
    assert [e["ppl_mean"] for e in again["results"].values()] == \
        [e["ppl_mean"] for e in doc["results"].values()]
    with pytest.raises(SystemExit):
        compare.main(argv[:3] + [f"--output_dir={out}", "--hparams={bad"])
    assert capsys.readouterr().err.strip().startswith("error: --hparams is not JSON")
