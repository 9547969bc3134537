"""Pre-training on a non-local filesystem (issue 21): TensorFlow's in-memory `ram://` stands in
for a gs:// bucket. In one process (ram:// lives in its memory): shards and vocab in ram://, the
driver's main() with --model_dir=ram://..., everything written there and nothing on local disk;
a second run resumes from the ram:// checkpoint; the exported discriminator loads back from ram://
with the checkpoint's weights."""
import json
import os
import uuid

import numpy as np
import pytest

from tests.conftest import keras_backend
from tests.pretrain import test_run_pretraining
from tests.pretrain.test_run_pretraining import driver_cmd, tiny_hparams

tiny_data = test_run_pretraining.tiny_data   # the session fixture: shards shared with that module

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(keras_backend() != "tensorflow",
                                reason="the TensorFlow training core")


def _run_main(argv, capsys):
    """run_pretraining.main on `argv` in this process -> its stdout (fails on an exit)."""
    import run_pretraining
    run_pretraining.FLAGS.unparse_flags()
    try:
        run_pretraining.FLAGS(argv)
        capsys.readouterr()
        try:
            run_pretraining.main([argv[0]])
        except SystemExit as e:
            pytest.fail(f"main exited with {e.code}: {capsys.readouterr().err[-2000:]}")
    finally:
        run_pretraining.FLAGS.unparse_flags()
    return capsys.readouterr().out


def _read_json(path):
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def _local_files(root):
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(root) for f in dirs + files)


@pytest.fixture
def ram_data(tiny_data):
    """(shard glob, vocab) copied into a fresh ram:// directory; removed afterwards."""
    root = f"ram://pretrain_test_{uuid.uuid4().hex[:8]}"
    pattern, vocab = tiny_data
    tf.io.gfile.makedirs(f"{root}/data")
    for shard in tf.io.gfile.glob(pattern):
        tf.io.gfile.copy(shard, f"{root}/data/{os.path.basename(shard)}")
    tf.io.gfile.copy(vocab, f"{root}/data/vocab.txt")
    yield root, (f"{root}/data/pretrain_data.tfrecord*", f"{root}/data/vocab.txt")
    tf.io.gfile.rmtree(root)


def test_pretraining_on_ram_filesystem_writes_resumes_and_exports(ram_data, tmp_path, capsys,
                                                                    monkeypatch):
    root, data = ram_data
    model_dir = f"{root}/model"
    monkeypatch.chdir(tmp_path)   # a local folder named `ram:` would appear here
    flags_ = ["--seed=3", "--log_every_n_steps=1", "--save_checkpoints_steps=2"]
    out = _run_main(driver_cmd(data, model_dir, tiny_hparams(), "--num_train_steps=2",
                               *flags_)[1:], capsys)
    assert "step 2/2" in out and "resumed" not in out, out
    # 2 steps under TINY's 2-step warm-up: said before the first step
    assert "note: all 2 steps of this run lie inside its 2-step learning-rate warm-up" in out

    gfile = tf.io.gfile
    assert _read_json(f"{model_dir}/hparams.json")["seed"] == 3
    # the vocabulary beside the checkpoints, where fine-tuning's --init_checkpoint finds it
    from finetune.encoder_source import find_vocab_file
    assert find_vocab_file(None, model_dir) == f"{model_dir}/vocab.txt"
    assert gfile.GFile(f"{model_dir}/vocab.txt", "rb").read() == \
        gfile.GFile(data[1], "rb").read()
    assert tf.train.latest_checkpoint(f"{model_dir}/checkpoints").endswith("ckpt-2")
    for part in ("discriminator", "generator"):
        assert sorted(gfile.listdir(f"{model_dir}/{part}")) == ["convbert_config.json",
                                                                "model.safetensors"]
    assert gfile.glob(f"{model_dir}/train/events.out.tfevents*")
    assert _read_json(f"{model_dir}/pretraining_summary.json")["global_step"] == 2
    assert not [n for n in gfile.listdir(model_dir) if "tmp" in n or ".old" in n]
    # Nothing on the local disk: no `ram:` folder in the cwd, nothing new anywhere in it.
    assert not os.path.exists("ram:") and _local_files(tmp_path) == []

    out = _run_main(driver_cmd(data, model_dir, tiny_hparams(), "--num_train_steps=4",
                               *flags_)[1:], capsys)
    assert f"resumed from {model_dir}/checkpoints/ckpt-2 at step 2" in out, out
    assert "warm-up" not in out   # steps 3..4 train past it
    summary = _read_json(f"{model_dir}/pretraining_summary.json")
    assert summary["global_step"] == 4 and [h["step"] for h in summary["history"]] == [3, 4]
    assert tf.train.latest_checkpoint(f"{model_dir}/checkpoints").endswith("ckpt-4")
    assert not os.path.exists("ram:") and _local_files(tmp_path) == []

    from model import ConvBertModel
    encoder = ConvBertModel.from_pretrained(f"{model_dir}/discriminator")
    assert encoder.load_report["format"] == "keras" and encoder.config.hidden_size == 64
    assert ConvBertModel.from_pretrained(model_dir).config == encoder.config  # model_dir finds it
    # The export holds the step-4 checkpoint's weights (its names are the object graph's, so the
    # word embeddings are found by shape and value).
    reader = tf.train.load_checkpoint(f"{model_dir}/checkpoints")
    exported = np.asarray(encoder.embeddings.word_embeddings)
    same_shape = [n for n, shape in reader.get_variable_to_shape_map().items()
                  if tuple(shape) == exported.shape and "OPTIMIZER_SLOT" not in n]
    assert [n for n in same_shape if np.array_equal(reader.get_tensor(n), exported)], same_shape
