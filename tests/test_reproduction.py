"""run_reproduction.py end to end at the `smoke` scale: two corpus directories -> shards ->
ConvBERT and ELECTRA pre-training -> held-out curves -> the PyTorch reference -> GLUE fine-tuning
of both and of a random init (2 seeds, two tasks), and of both models' step-2 checkpoints
(--finetune_at_steps) -> the report. Then a rerun skips every stage.

Real data from ../shared (a slice of WikiText-2 and of one Gutenberg book, the BERT vocab, two of
the five GLUE tasks: a pair scored by F1 and the regression; fine-tuning is most of the run's time,
and each task's reader and metric has its own tests); skipped cleanly without it. About a minute
on 2 CPU cores.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, shared_path
from tests.test_bad_inputs import stderr_lines

TASKS = ("mrpc", "sts")


def run_cli(args, command=("run_reproduction.py",), timeout=1200):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *command, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def run_export(args):
    return run_cli(args, command=("-m", "pretrain.export_step"), timeout=600)


def _head(source, target, num_lines):
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, encoding="utf-8") as f:
        lines = [next(f) for _ in range(num_lines)]
    target.write_text("".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory):
    glue = shared_path("data", "glue")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    wiki = shared_path("data", "corpus", "wikitext-2-raw", "wiki.valid.raw")
    book = shared_path("data", "corpus", "gutenberg-en", "a-study-in-scarlet-pg244.txt")
    root = tmp_path_factory.mktemp("repro")
    _head(book, root / "corpus_a" / "book.txt", 1500)
    _head(wiki, root / "corpus_b" / "wiki.txt", 400)
    out = root / "out"
    args = ["--scale=smoke", f"--corpus_dirs={root / 'corpus_a'},{root / 'corpus_b'}",
            f"--glue_dir={glue}", f"--vocab_file={vocab}", f"--output_dir={out}",
            "--num_shards=4", "--build_processes=1", "--reference", "--finetune_at_steps=2",
            f"--tasks={','.join(TASKS)}"]
    first = run_cli(args)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    return out, args, first


def test_table_is_complete(reproduction):
    out, _, _ = reproduction
    data = json.loads((out / "results.json").read_text())
    assert data["tasks"] == list(TASKS)
    for model in ("convbert", "electra", "random"):
        for task in TASKS:
            summary = data["glue"][model][task]["summary"]
            metric = summary[data["glue"][model][task]["metric"]]
            assert metric["n"] == 2 and metric["min"] <= metric["median"] <= metric["max"]
    table = (out / "results.md").read_text()
    glue_rows = [r for r in table.splitlines()   # | model | 5 tasks | Avg |, not the by-step rows
                 if r.count("±") == len(TASKS) and r.count("|") == len(TASKS) + 3]
    assert [r.split("|")[1].strip() for r in glue_rows] == [
        "ConvBERT", "ELECTRA (BERT architecture)", "ConvBERT, random init"]
    assert set(data["pretraining_helps"]) == {"convbert", "electra"}


def test_pretraining_and_heldout_curves(reproduction):
    out, _, _ = reproduction
    data = json.loads((out / "results.json").read_text())
    for model in ("convbert", "electra"):
        p = data["pretraining"][model]
        assert p["global_step"] == 4
        assert [h["step"] for h in p["heldout"]] == [2, 4]
        assert all(0.0 <= h["disc_auc"] <= 1.0 for h in p["heldout"] if h["disc_auc"] == h["disc_auc"])
    hparams = json.loads((out / "pretrain" / "electra" / "hparams.json").read_text())
    assert hparams["model_hparam_overrides"] == {**hparams["model_hparam_overrides"],
                                                 "conv_type": "none", "head_ratio": 1}
    reference = [json.loads(line) for line in
                 (out / "reference" / "reference_curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in reference] == [2, 4]


def test_glue_by_pretraining_step(reproduction):
    out, _, _ = reproduction
    data = json.loads((out / "results.json").read_text())
    for model in ("convbert", "electra"):
        rows = data["glue_by_step"][model]
        assert [r["step"] for r in rows] == [2, 4]
        assert rows[-1]["glue"] == data["glue"][model]   # the last row is the final model
        assert set(rows[0]["glue"]) == set(TASKS) and set(rows[0]["helps"]) == set(TASKS)
        for entry in rows[0]["glue"].values():
            assert entry["summary"][entry["metric"]]["n"] == 2
        log = (out / "logs" / f"finetune_{model}_step2.log").read_text()
        assert f"--init_checkpoint={out / 'pretrain' / model / 'steps' / '2'}" in log
    table = (out / "results.md").read_text()
    assert sum(1 for r in table.splitlines() if r.startswith("| ConvBERT | 2 |")) == 1


def test_exported_step_is_that_checkpoint(reproduction, tmp_path):
    """The export of the last kept step equals the run's own final export; step 2's differs."""
    from safetensors.numpy import load_file
    out, _, _ = reproduction
    run = out / "pretrain" / "convbert"
    proc = run_export([f"--model_dir={run}", "--step=4", f"--output_dir={tmp_path / 'last'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]

    def weights(directory):
        files = sorted(directory.glob("*.safetensors"))
        assert files, directory
        return {k: v for f in files for k, v in load_file(str(f)).items()}

    final, last = weights(run / "discriminator"), weights(tmp_path / "last" / "discriminator")
    step2 = weights(run / "steps" / "2" / "discriminator")
    assert final.keys() == last.keys() == step2.keys()
    assert all((final[k] == last[k]).all() for k in final)
    assert any((final[k] != step2[k]).any() for k in final)
    assert (tmp_path / "last" / "generator").is_dir()


def test_export_of_a_step_not_kept_is_one_line(reproduction, tmp_path):
    out, _, _ = reproduction
    proc = run_export([f"--model_dir={out / 'pretrain' / 'convbert'}", "--step=3",
                       f"--output_dir={tmp_path / 'x'}"])
    assert proc.returncode == 1
    lines = stderr_lines(proc.stderr)   # TensorFlow's start-up lines left out
    assert len(lines) == 1 and lines[0].endswith("no kept checkpoint of step 3 (kept: 2, 4)")
    assert lines[0].startswith("error: ") and not (tmp_path / "x").exists()


def test_plots_are_pngs(reproduction):
    out, _, _ = reproduction
    for name in ("pretraining_curves.png", "glue_scores.png", "glue_vs_steps.png",
                 "reference/reference_vs_ours.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_heldout_shard_is_not_trained_on(reproduction):
    out, _, _ = reproduction
    log = (out / "logs" / "pretrain_convbert.log").read_text()
    command = next(line for line in log.splitlines() if line.startswith("$ "))
    heldout = json.loads((out / "results.json").read_text())["heldout_shards"]
    assert len(heldout) == 1 and "corpus_a" in heldout[0] and heldout[0] not in command
    assert "corpus_a/pretrain_data.tfrecord-0-of-4" in command and "corpus_b" in command


def test_rerun_skips_every_stage(reproduction):
    out, args, _ = reproduction
    before = (out / "results.json").read_text()
    second = run_cli(args)
    assert second.returncode == 0, second.stderr[-3000:]
    for stage in ("shards", "pretrain_convbert", "pretrain_electra", "heldout_convbert",
                  "heldout_electra", "finetune_convbert", "finetune_electra", "finetune_random",
                  "export_convbert_step2", "finetune_electra_step2"):
        assert f"[{stage}]" in second.stdout
    assert "run_pretraining.py" not in second.stdout and "run_finetuning.py" not in second.stdout
    assert "pretrain.export_step" not in second.stdout
    assert json.loads((out / "results.json").read_text())["glue"] == json.loads(before)["glue"]


def test_bad_input_is_one_line(tmp_path):
    glue = shared_path("data", "glue")
    proc = run_cli([f"--corpus_dirs={tmp_path / 'missing'}", f"--glue_dir={glue}",
                    f"--output_dir={tmp_path / 'out'}", "--scale=nope"])
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: unknown --scale 'nope'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_longer_pretraining_keeps_the_recipe():
    from reproduce.recipes import RecipeError, get_recipe
    tiny = get_recipe("tiny")
    longer = tiny.with_pretrain_steps(4000)
    assert longer.pretrain["num_train_steps"] == 4000
    # 20 kept checkpoints still span the run: one every 200 steps.
    assert longer.pretrain["save_checkpoints_steps"] == 200
    for key in ("learning_rate", "num_warmup_steps", "train_batch_size"):
        assert longer.pretrain[key] == tiny.pretrain[key]
    assert longer.finetune == tiny.finetune and tiny.pretrain["num_train_steps"] == 3000
    assert tiny.with_pretrain_steps(500).pretrain["save_checkpoints_steps"] == 150
    assert get_recipe("tiny_1k").with_pretrain_steps(500).pretrain["save_checkpoints_steps"] == 100
    with pytest.raises(RecipeError, match="--pretrain_steps"):
        tiny.with_pretrain_steps(0)


def test_tiny_fine_tunes_with_the_official_epochs():
    """`tiny` leaves the epochs to the per-task defaults of the official configure_finetuning.py
    (RTE and STS-B 10, the rest 3); `tiny_3ep` is the same recipe shortened to 3 everywhere."""
    from finetune.hparams import FinetuneHParams
    from reproduce.recipes import get_recipe
    tiny, short = get_recipe("tiny"), get_recipe("tiny_3ep")
    assert tiny.pretrain == short.pretrain
    epochs = {task: FinetuneHParams(**tiny.finetune).for_task(task).num_train_epochs
              for task in ("cola", "sst", "mrpc", "sts", "rte")}
    assert epochs == {"cola": 3.0, "sst": 3.0, "mrpc": 3.0, "sts": 10.0, "rte": 10.0}
    assert {k: v for k, v in short.finetune.items() if k != "num_train_epochs"} == tiny.finetune
    assert FinetuneHParams(**short.finetune).for_task("rte").num_train_epochs == 3.0


def test_bad_pretrain_steps_is_one_line(tmp_path):
    glue = shared_path("data", "glue")
    proc = run_cli([f"--glue_dir={glue}", f"--output_dir={tmp_path / 'out'}",
                    "--pretrain_steps=-3"])
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: --pretrain_steps must be positive, got -3"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("steps, message", [
    ("3", "--finetune_at_steps: no checkpoint is saved at step 3 (one every 2 steps)"),
    ("4", "--finetune_at_steps: 4 is not between 0 and the last pre-training step 4 "
          "(which is fine-tuned anyway)"),
    ("2,x", "--finetune_at_steps must be comma-separated integers, got '2,x'"),
])
def test_bad_finetune_at_steps_is_one_line(tmp_path, steps, message):
    glue = shared_path("data", "glue")
    proc = run_cli([f"--corpus_dirs={tmp_path}", f"--glue_dir={glue}", "--scale=smoke",
                    f"--output_dir={tmp_path / 'out'}", f"--finetune_at_steps={steps}"])
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "out").exists()
