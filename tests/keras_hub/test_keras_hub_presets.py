"""KerasHub presets from the command line and the toolkit's runs (issue 57), on TensorFlow:
`convert_checkpoint.py --format=keras_hub` from a pre-training model_dir and from a fine-tuning
run's saved model (its GLUE head becomes the preset's classifier), a preset back to another
format, fine-tuning's `--init_checkpoint` reading a preset, and the tokenizers giving the ids of
the toolkit's own (WordPiece and SentencePiece). The backbone's numerics on both backends:
tests/model/test_keras_hub_backbone.py."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras  # noqa: E402

import keras_hub_convbert  # noqa: E402,F401
from keras_hub_convbert.presets import check_preset, read_preset, write_preset  # noqa: E402
from model import ConvBertConfig, ConvBertModel  # noqa: E402
from model.checkpoints import CheckpointError  # noqa: E402
from model.config import ConfigError  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a film was fine good great dull bad awful plot acting loved hated it and not "
         "very boring fun , . ! ##s ##ed ##ing cafe 中 文").split()
CONFIG = ConvBertConfig(vocab_size=64, hidden_size=32, embedding_size=16, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
TEXTS = ["The film was GREAT!", "a café, fine acting.", "loved it... not boring",
         "中文 and Films", "   ", "hated\tthe  plot's acting"]


def run_convert(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "convert_checkpoint.py"),
                           *map(str, args)], env=env, capture_output=True, text=True, timeout=300)


def write_vocab(path):
    path.write_text("\n".join(SPECIAL + WORDS) + "\n")
    return path


def test_cli_converts_a_pretraining_run_and_a_preset_back(tmp_path):
    """A pre-training model_dir (discriminator/ export, vocab.txt beside) -> preset -> native:
    the same weights bit for bit, the vocabulary found without a flag."""
    keras.utils.set_random_seed(0)
    model = ConvBertModel(CONFIG)
    model.save_pretrained(tmp_path / "run" / "discriminator")
    write_vocab(tmp_path / "run" / "vocab.txt")
    done = run_convert("--input", tmp_path / "run", "--output", tmp_path / "preset",
                       "--format", "keras_hub", "--sequence_length", 32)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "keras_hub preset" in done.stdout
    names = {p.relative_to(tmp_path / "preset").as_posix()
             for p in (tmp_path / "preset").rglob("*") if p.is_file()}
    assert names == {"config.json", "model.weights.h5", "metadata.json", "preprocessor.json",
                     "tokenizer.json", "assets/tokenizer/vocabulary.txt"}
    metadata = json.loads((tmp_path / "preset" / "metadata.json").read_text())
    assert metadata["keras_hub_version"] == keras_hub.__version__
    assert metadata["convbert"]["source_format"] == "keras"
    assert set(metadata["tasks"]) >= {"MaskedLM", "TextClassifier"}
    done = run_convert("--input", tmp_path / "preset", "--output", tmp_path / "native",
                       "--format", "keras")
    assert done.returncode == 0, done.stderr[-2000:]
    again = ConvBertModel.from_pretrained(tmp_path / "native")
    for name, variable in model.weight_map().items():
        np.testing.assert_array_equal(np.asarray(variable), np.asarray(again.weight_map()[name]))


def test_a_finetuning_run_gives_its_classifier(tmp_path):
    """A fine-tuning run's saved model (encoder + task_specific/<task>/dense) -> a preset whose
    task is that classifier: the toolkit's logits (encoder + ClassificationHead, no dropout)."""
    from finetune.classification_head import ClassificationHead
    from finetune.glue_task import save_finetuned_model
    keras.utils.set_random_seed(1)
    encoder = ConvBertModel(CONFIG)
    head = ClassificationHead(3)
    head.build((None, None, CONFIG.hidden_size))
    save_finetuned_model(encoder, head, "mnli", tmp_path / "ft")
    write_preset(tmp_path / "ft", tmp_path / "preset", vocab_file=write_vocab(tmp_path / "v.txt"),
                 sequence_length=24)
    classifier = keras_hub.models.TextClassifier.from_preset(str(tmp_path / "preset"))
    assert type(classifier).__name__ == "ConvBertTextClassifier" and classifier.num_classes == 3
    # The task is rebuilt from task.json before its vocabulary is loaded: a vocabulary asset
    # bigger than the embedding table is still refused, naming the preset.
    swapped = tmp_path / "swapped"
    shutil.copytree(tmp_path / "preset", swapped)
    (swapped / "assets" / "tokenizer" / "vocabulary.txt").write_text(
        "\n".join(SPECIAL + [f"w{i}" for i in range(100)]) + "\n")
    with pytest.raises(ValueError, match="105 tokens but the backbone has only 64"):
        keras_hub.models.TextClassifier.from_preset(str(swapped))
    x = classifier.preprocessor(TEXTS[:3])
    ids = {"input_ids": np.asarray(x["token_ids"]), "input_mask": np.asarray(x["padding_mask"]),
           "segment_ids": np.asarray(x["segment_ids"])}
    expected = np.asarray(head(encoder(ids)))
    got = classifier.predict(TEXTS[:3], verbose=0)
    assert np.max(np.abs(got - expected)) <= 1e-5


def test_finetuning_reads_a_preset_as_init_checkpoint(tmp_path):
    from finetune.encoder_source import EncoderSource, find_sp_model, find_vocab_file
    from finetune.hparams import FinetuneHParams
    keras.utils.set_random_seed(2)
    model = ConvBertModel(CONFIG)
    model.save_pretrained(tmp_path / "ckpt")
    write_preset(tmp_path / "ckpt", tmp_path / "preset", vocab_file=write_vocab(tmp_path / "v.txt"))
    source = EncoderSource(str(tmp_path / "preset"), FinetuneHParams())
    assert source.format == "keras_hub" and source.config == CONFIG
    for name, variable in model.weight_map().items():
        np.testing.assert_array_equal(source.tensors[name], np.asarray(variable))
    vocab = find_vocab_file(None, str(tmp_path / "preset"))
    assert vocab.endswith(os.path.join("assets", "tokenizer", "vocabulary.txt"))
    assert find_sp_model(str(tmp_path / "preset")) is None
    fmt, config, tensors = read_preset(tmp_path / "preset")
    assert (fmt, config) == ("keras_hub", CONFIG)


# The TensorFlow-free JAX path (a GPU machine with JAX and no TensorFlow): fine-tuning reads a
# preset with json and h5py; importing TensorFlow or KerasHub (which imports it) would fail.
READ_ON_JAX = r"""
import sys
sys.modules["tensorflow"] = None          # the JAX path must not need it
sys.modules["keras_hub"] = None           # nor KerasHub
import keras
import numpy as np
from finetune.encoder_source import EncoderSource
from finetune.hparams import FinetuneHParams
assert keras.backend.backend() == "jax"
source = EncoderSource(sys.argv[1], FinetuneHParams())
encoder = source.build()
np.savez(sys.argv[2], **{name: keras.ops.convert_to_numpy(v)
                         for name, v in encoder.weight_map().items()})
print(source.format)
"""


def test_a_preset_is_read_on_jax_without_tensorflow_or_keras_hub(tmp_path):
    pytest.importorskip("jax")
    keras.utils.set_random_seed(4)
    model = ConvBertModel(CONFIG)
    model.save_pretrained(tmp_path / "ckpt")
    write_preset(tmp_path / "ckpt", tmp_path / "preset", vocab_file=write_vocab(tmp_path / "v.txt"))
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO_ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", READ_ON_JAX, str(tmp_path / "preset"),
                           str(tmp_path / "encoder.npz")],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["keras_hub"]
    built = np.load(tmp_path / "encoder.npz")
    expected = model.weight_map()
    assert sorted(built.files) == sorted(expected)
    for name, variable in expected.items():     # the encoder the JAX run fine-tunes
        np.testing.assert_array_equal(built[name], np.asarray(variable), name)


def test_wordpiece_ids_are_the_toolkits(tmp_path):
    from data.tokenization import Tokenizer
    from keras_hub_convbert import ConvBertTokenizer
    vocab = write_vocab(tmp_path / "vocab.txt")
    for lower in (True, False):
        ours = Tokenizer(vocab, do_lower_case=lower)
        hub = ConvBertTokenizer(vocabulary=str(vocab), lowercase=lower)
        rows = hub(TEXTS)      # ragged: Python lists once out of tf.data (KerasHub's convention)
        got = [np.asarray(row).tolist() for row in getattr(rows, "to_list", lambda: rows)()]
        assert got == ours.tokenize(TEXTS), lower


def test_sentencepiece_ids_are_the_toolkits(tmp_path):
    from data.tokenization import SentencePieceTokenizer
    from data.vocab import learn_sentencepiece_model
    from keras_hub_convbert.presets import make_tokenizer
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 4
    sp_model = learn_sentencepiece_model(corpus, tmp_path / "sp", vocab_size=60)
    ours = SentencePieceTokenizer(sp_model)
    hub, size = make_tokenizer(sp_model=sp_model)
    assert size == ours.vocab_size
    assert (hub.cls_token_id, hub.sep_token_id, hub.pad_token_id, hub.mask_token_id) == \
        (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id)
    texts = [t for t in TEXTS if t.strip()]
    got = [list(map(int, row)) for row in hub(texts)]
    assert got == ours.tokenize(texts)
    # A SentencePiece pre-training run (sentencepiece.model in its model_dir) -> its preset's
    # tokenizer, found by fine-tuning too.
    from finetune.encoder_source import find_sp_model
    ConvBertModel(CONFIG).save_pretrained(tmp_path / "run" / "discriminator")
    (tmp_path / "run" / "sentencepiece.model").write_bytes(open(sp_model, "rb").read())
    write_preset(tmp_path / "run", tmp_path / "preset")
    loaded = keras_hub.models.TextClassifierPreprocessor.from_preset(str(tmp_path / "preset"))
    assert type(loaded.tokenizer).__name__ == "ConvBertSentencePieceTokenizer"
    assert [list(map(int, row)) for row in loaded.tokenizer(texts)] == got
    assert find_sp_model(str(tmp_path / "preset")).endswith("vocabulary.spm")


def test_bad_presets_are_one_line(tmp_path):
    keras.utils.set_random_seed(3)
    ConvBertModel(CONFIG).save_pretrained(tmp_path / "ckpt")
    vocab = write_vocab(tmp_path / "v.txt")
    write_preset(tmp_path / "ckpt", tmp_path / "preset", vocab_file=vocab)
    # A vocabulary bigger than the embedding table: refused before anything is written.
    big = tmp_path / "big.txt"
    big.write_text("\n".join(SPECIAL + [f"w{i}" for i in range(100)]) + "\n")
    with pytest.raises(Exception, match="105 tokens but the model has only 64"):
        write_preset(tmp_path / "ckpt", tmp_path / "out", vocab_file=big)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="sequence_length 128: the model has 64 position"):
        write_preset(tmp_path / "ckpt", tmp_path / "out", vocab_file=vocab, sequence_length=128)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    # A file missing, another architecture.
    (tmp_path / "preset" / "model.weights.h5").rename(tmp_path / "weights.h5")
    with pytest.raises(CheckpointError, match="preset is missing model.weights.h5"):
        check_preset(tmp_path / "preset")
    (tmp_path / "weights.h5").rename(tmp_path / "preset" / "model.weights.h5")
    config = json.loads((tmp_path / "preset" / "config.json").read_text())
    config["registered_name"] = "keras_hub>BertBackbone"
    (tmp_path / "preset" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="keras_hub>BertBackbone, not a ConvBERT"):
        read_preset(tmp_path / "preset")
    # Fine-tuning's reader (no KerasHub): the same lines, naming the file.
    from finetune.encoder_source import read_checkpoint
    from model import checkpoints
    preset = str(tmp_path / "preset")
    with pytest.raises(CheckpointError, match="config.json: a KerasHub preset of keras_hub>Bert"):
        read_checkpoint(preset, checkpoints)
    config["registered_name"] = "convbert_keras_hub>ConvBertBackbone"
    (tmp_path / "preset" / "config.json").write_text(json.dumps(config))
    (tmp_path / "preset" / "model.weights.h5").rename(tmp_path / "weights.h5")
    with pytest.raises(CheckpointError, match=f"^{re.escape(preset)}: KerasHub preset is missing "
                                                         "model.weights.h5$"):
        read_checkpoint(preset, checkpoints)
    (tmp_path / "weights.h5").rename(tmp_path / "preset" / "model.weights.h5")
    config["config"]["num_layers"] = 1          # weights of 2 layers
    (tmp_path / "preset" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model.weights.h5: the weights do not match .*"
                                              "config.json .*layer convbert/layer_1/"):
        read_checkpoint(preset, checkpoints)
    (tmp_path / "preset" / "config.json").unlink()
    with pytest.raises(CheckpointError, match=f"^{re.escape(preset)}: KerasHub preset is missing "
                                                         "config.json$"):
        read_checkpoint(preset, checkpoints)
