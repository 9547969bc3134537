"""SentencePiece end to end, each step the command a user types: corpus -> build_vocab.py
(SentencePiece model) -> build_pretraining_dataset.py --sp_model -> 2 steps of run_pretraining.py
--sp_model -> run_finetuning.py from that checkpoint (no --sp_model: pre-training left the model
in its model_dir) on a slice of RTE (GLUE) and of SQuAD 1.1. Real data from ../shared (skipped cleanly without it); about two minutes on 2 cores.
"""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, shared_path

SEQ = 32
PRETRAIN = {"train_batch_size": 4, "max_seq_length": SEQ, "num_warmup_steps": 1,
            "learning_rate": 1e-3, "shuffle_buffer": 16, "save_checkpoints_steps": 2,
            "model_hparam_overrides": {"hidden_size": 32, "embedding_size": 32,
                                       "num_hidden_layers": 1, "num_attention_heads": 2,
                                       "intermediate_size": 64, "num_groups": 1}}
FINETUNE = {"train_batch_size": 8, "eval_batch_size": 32, "predict_batch_size": 32,
            "max_train_examples": 32, "max_eval_examples": 24, "doc_stride": 16,
            "max_query_length": 12, "beam_size": 5, "qa_hidden_size": 32, "n_best_size": 5,
            "log_every_steps": 1}


def run(script, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / script), *map(str, args)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{script}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("sp_e2e")
    corpus = root / "corpus"
    corpus.mkdir()
    for name in ("a-study-in-scarlet-pg244.txt", "pride-and-prejudice-pg1342.txt"):
        path = shared_path("data", "corpus", "gutenberg-en", name)
        with open(path, encoding="utf-8") as f:
            (corpus / name).write_text("".join(f.readlines()[:1500]), encoding="utf-8")
    # A small GLUE dir (RTE) and SQuAD 1.1 split by article, as the user would lay them out.
    glue = root / "data"
    (glue / "RTE").mkdir(parents=True)
    for split in ("train", "dev"):
        with open(shared_path("data", "glue", "RTE", f"{split}.tsv"), encoding="utf-8") as f:
            (glue / "RTE" / f"{split}.tsv").write_text("".join(f.readlines()[:60]),
                                                       encoding="utf-8")
    squad = json.loads(shared_path("data", "squad", "dev-v1.1.json").read_text())
    (glue / "squad").mkdir()
    (glue / "squad" / "train-v1.1.json").write_text(json.dumps(dict(squad, data=squad["data"][:1])))
    (glue / "squad" / "dev-v1.1.json").write_text(json.dumps(dict(squad, data=squad["data"][1:2])))

    sp_model = root / "vocab" / "sp.model"
    vocab = run("build_vocab.py", f"--corpus_dir={corpus}", "--vocab_type=sentencepiece",
                "--vocab_size=800", f"--output={sp_model}")
    shards = root / "shards"
    build = run("build_pretraining_dataset.py", f"--corpus_dir={corpus}", f"--sp_model={sp_model}",
                f"--output_dir={shards}", f"--max_seq_length={SEQ}", "--num_shards=2",
                "--noprogress")
    pretrain_dir = root / "pretrain"
    pretrain = run("run_pretraining.py", f"--pretrain_tfrecords={shards}/pretrain_data.tfrecord*",
                   f"--sp_model={sp_model}", f"--model_dir={pretrain_dir}", "--model_size=small",
                   "--num_train_steps=2", f"--hparams={json.dumps(PRETRAIN)}")
    finetune_dir = root / "finetune"
    # No --sp_model: the one pre-training wrote into its model_dir is found there.
    finetune = run("run_finetuning.py", "--task_names", "rte,squadv1", "--data_dir", glue,
                   "--init_checkpoint", pretrain_dir, "--model_dir",
                   finetune_dir, "--max_seq_length", SEQ, "--max_train_steps", 2,
                   "--hparams", json.dumps(FINETUNE))
    return dict(root=root, sp_model=sp_model, pretrain_dir=pretrain_dir,
                finetune_dir=finetune_dir, logs=dict(vocab=vocab, build=build, pretrain=pretrain,
                                                     finetune=finetune))


def test_vocab_command_writes_a_model_with_bert_specials(chain):
    from data.tokenization import SentencePieceTokenizer
    assert "wrote" in chain["logs"]["vocab"].stdout and "read 2/2 files" in chain["logs"][
        "vocab"].stdout
    tokenizer = SentencePieceTokenizer(chain["sp_model"])
    assert tokenizer.vocab_size == 800
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert (chain["sp_model"].parent / "sp.vocab").is_file()
    assert not list(chain["sp_model"].parent.glob("*.incomplete"))


def test_pretraining_uses_the_models_ids(chain):
    hp = json.loads((chain["pretrain_dir"] / "hparams.json").read_text())
    assert hp["vocab_size"] == 800
    summary = json.loads((chain["pretrain_dir"] / "pretraining_summary.json").read_text())
    assert summary["global_step"] == 2
    assert "800" not in chain["logs"]["pretrain"].stderr   # no vocab-size mismatch warning


def test_finetuning_glue_and_squad_with_sentencepiece(chain):
    out = chain["finetune_dir"]
    record = json.loads((out / "finetune_hparams.json").read_text())
    # the SentencePiece model pre-training copied beside its checkpoint, found without a flag
    beside = chain["pretrain_dir"] / "sentencepiece.model"
    assert beside.read_bytes() == chain["sp_model"].read_bytes()
    assert record["sp_model"] == str(beside) and record["vocab_file"] is None
    assert record["model_config"]["vocab_size"] == 800
    rte = json.loads((out / "results" / "rte_dev_metrics.json").read_text())
    assert rte["num_examples"] == 24 and 0.0 <= rte["metrics"]["accuracy"] <= 100.0
    squad = json.loads((out / "results" / "squadv1_metrics.json").read_text())
    assert {"exact_match", "f1"} <= set(squad["metrics"])
    predictions = json.loads((out / "results" / "squadv1_predictions.json").read_text())
    assert predictions and all(text == text.strip() for text in predictions.values())


def test_both_vocab_flags_is_one_line(chain, tmp_path):
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    for script in ("run_pretraining.py", "run_finetuning.py"):
        args = [f"--sp_model={chain['sp_model']}", f"--vocab_file={vocab}",
                f"--model_dir={tmp_path / script}"]
        if script == "run_finetuning.py":
            args += ["--task_names=rte", f"--data_dir={chain['root'] / 'data'}"]
        else:
            args += [f"--pretrain_tfrecords={chain['root'] / 'shards'}/pretrain_data.tfrecord*"]
        proc = subprocess.run([sys.executable, str(REPO_ROOT / script), *args], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1
        assert "--vocab_file or --sp_model, not both" in proc.stderr.strip().splitlines()[-1]
        assert not (tmp_path / script).exists()
