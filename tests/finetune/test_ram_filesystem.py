"""Fine-tuning on a filesystem TensorFlow knows but Python does not: `ram://` (issue 21).

TensorFlow's in-memory filesystem stands in for a `gs://` bucket: data, vocab and model_dir all
live there, so every read and write of the run has to go through tf.io.gfile. `ram://` exists only
inside this process, so the driver runs in-process (its own flag registry), never as a
subprocess. A tiny model, 40-line GLUE slices and a few SQuAD paragraphs keep it well under a
minute on 2 CPU cores; nothing touches the network.
"""
import io
import json
import os
import zipfile

import pytest

from tests.conftest import REPO_ROOT, shared_path
from tests.finetune.test_run_finetuning import TINY_HPARAMS

GLUE = "ram://glue"
MODEL_DIR = "ram://ft"
LINES = 40   # header + 39 rows of each GLUE file
HPARAMS = dict(TINY_HPARAMS, max_eval_examples=24, predict_batch_size=32, doc_stride=16,
               max_query_length=12, beam_size=5, qa_hidden_size=32, n_best_size=5)


def _local_leftovers():
    """What a local file API would have made of a ram:// path ('ram:/glue/...')."""
    return [p for p in (os.path.join(os.getcwd(), "ram:"), REPO_ROOT / "ram:")
            if os.path.exists(p)]


def _remove_all(root):
    """Delete every file under a ram:// root (its rmtree and walk do not see nested dirs)."""
    import tensorflow as tf
    for depth in range(1, 6):
        for path in tf.io.gfile.glob(root + "/*" * depth):
            if not tf.io.gfile.isdir(path):
                tf.io.gfile.remove(path)


@pytest.fixture(scope="module")
def ram_data():
    import tensorflow as tf
    glue = shared_path("data", "glue")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    squad = shared_path("data", "squad", "dev-v1.1.json")
    gfile = tf.io.gfile
    for root in (GLUE, MODEL_DIR):
        _remove_all(root)
    for task in ("SST-2", "RTE"):
        for split in ("train", "dev", "test"):
            lines = (glue / task / f"{split}.tsv").read_bytes().split(b"\n")[:LINES]
            with gfile.GFile(f"{GLUE}/{task}/{split}.tsv", "wb") as f:
                f.write(b"\n".join(lines) + b"\n")
    with gfile.GFile(f"{GLUE}/vocab.txt", "wb") as f:
        f.write(vocab.read_bytes())
    data = json.loads(squad.read_text(encoding="utf-8"))
    for name, articles in (("train", data["data"][:2]), ("dev", data["data"][2:4])):
        articles = [dict(a, paragraphs=a["paragraphs"][:3]) for a in articles]
        with gfile.GFile(f"{GLUE}/squad/{name}-v1.1.json", "w") as f:
            f.write(json.dumps(dict(data, data=articles)))
    yield
    for root in (GLUE, MODEL_DIR):
        _remove_all(root)


def _run_driver(args):
    import run_finetuning
    try:
        run_finetuning.parse_flags(["run_finetuning.py", *map(str, args)])
        return run_finetuning.run()
    finally:
        run_finetuning.FLAGS.unparse_flags()


def test_finetune_and_submission_on_ram_filesystem(ram_data, capsys):
    import tensorflow as tf
    gfile = tf.io.gfile
    assert not _local_leftovers()
    code = _run_driver(["--data_dir", GLUE, "--vocab_file", f"{GLUE}/vocab.txt",
                        "--model_dir", MODEL_DIR, "--task_names", "sst,rte,squadv1",
                        "--do_predict", "--hparams", json.dumps(HPARAMS),
                        "--max_seq_length", 32, "--max_train_steps", 2])
    assert code == 0
    out = capsys.readouterr().out
    results = f"{MODEL_DIR}/results"
    for task in ("sst", "rte"):
        rows = gfile.GFile(f"{results}/{task}_dev_predictions.tsv").read().splitlines()
        assert rows[0] == "index\tprediction\tlabel" and len(rows) == 1 + 24
        record = json.loads(gfile.GFile(f"{results}/{task}_dev_metrics.json").read())
        assert record["num_examples"] == 24 and "accuracy" in record["metrics"]
        events = gfile.glob(f"{MODEL_DIR}/tensorboard/{task}/events.out.tfevents*")
        assert events, f"no TensorBoard events for {task}"
    for stem in ("SST-2", "RTE"):
        rows = gfile.GFile(f"{results}/leaderboard/{stem}.tsv").read().splitlines()
        assert rows[0] == "index\tprediction" and len(rows) == LINES   # every test id
    zip_bytes = gfile.GFile(f"{results}/leaderboard/glue_submission.zip", "rb").read()
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        assert zf.namelist() == ["SST-2.tsv", "RTE.tsv"]
        assert zf.read("RTE.tsv") == gfile.GFile(f"{results}/leaderboard/RTE.tsv", "rb").read()
    assert f"GLUE submission {results}/leaderboard/glue_submission.zip" in out
    predictions = json.loads(gfile.GFile(f"{results}/squadv1_predictions.json").read())
    assert predictions and all(isinstance(v, str) for v in predictions.values())
    assert gfile.exists(f"{results}/squadv1_nbest_predictions.json")
    metrics = json.loads(gfile.GFile(f"{results}/squadv1_metrics.json").read())
    assert {"exact_match", "f1"} <= set(metrics["metrics"])
    assert metrics["predict_file"] == f"{GLUE}/squad/dev-v1.1.json"
    assert gfile.glob(f"{MODEL_DIR}/tensorboard/squadv1/events.out.tfevents*")
    saved = json.loads(gfile.GFile(f"{MODEL_DIR}/finetune_hparams.json").read())
    assert saved["tasks"] == ["sst", "rte", "squadv1"]
    assert saved["vocab_file"] == f"{GLUE}/vocab.txt"
    # Atomic writes leave no temporary files behind.
    names = gfile.listdir(results) + gfile.listdir(f"{results}/leaderboard")
    assert not [n for n in names if n.startswith(".") or ".tmp" in n], names
    assert not _local_leftovers()

    # The --glue_submission step reads the leaderboard dir and the test sets from ram:// too.
    gfile.remove(f"{results}/leaderboard/glue_submission.zip")
    assert _run_driver(["--glue_submission", "--model_dir", MODEL_DIR, "--data_dir", GLUE,
                        "--allow_partial"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"GLUE submission {results}/leaderboard/glue_submission.zip: ")
    assert f"SST-2.tsv ({LINES - 1} rows), RTE.tsv ({LINES - 1} rows)" in line
    assert "not checked" not in line     # both checked against the ram:// test sets
    assert gfile.exists(f"{results}/leaderboard/glue_submission.zip")
    assert not _local_leftovers()


def test_init_checkpoint_in_a_bucket(ram_data, capsys):
    """--init_checkpoint on ram:// (a pre-training model_dir with its discriminator/ export):
    the encoder is read through base/fileio.py like every other file."""
    import keras
    import tensorflow as tf
    from model import ConvBertConfig, ConvBertModel
    from tests.finetune.test_run_finetuning import TINY_MODEL
    keras.utils.set_random_seed(0)
    ConvBertModel(ConvBertConfig.from_size("small", **TINY_MODEL)).save_pretrained(
        "ram://ckpt/discriminator")
    hparams = {k: v for k, v in HPARAMS.items() if k != "model_hparam_overrides"}
    assert _run_driver(["--data_dir", GLUE, "--vocab_file", f"{GLUE}/vocab.txt", "--model_dir",
                        "ram://ft_init", "--task_names", "rte", "--init_checkpoint", "ram://ckpt",
                        "--hparams", json.dumps(hparams), "--max_seq_length", "32",
                        "--max_train_steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "encoder: keras checkpoint ram://ckpt (1 layer, hidden 32)" in out
    assert tf.io.gfile.exists("ram://ft_init/results/rte_dev_metrics.json")
    assert not _local_leftovers()
