"""KerasHub presets of ConvBERT: written from any checkpoint the toolkit reads, and read back.

    write_preset("convbert_small/", "presets/convbert_small")     # official TF1, HF or toolkit
    fmt, config, tensors = read_preset("presets/convbert_small")  # as convert_checkpoint.py

A preset is KerasHub's layout: `config.json` + `model.weights.h5` (the backbone),
`tokenizer.json` + `assets/tokenizer/vocabulary.txt` (or `vocabulary.spm`), `preprocessor.json`,
`metadata.json` (KerasHub's, plus where the weights came from under "convbert"), and for a
checkpoint with a head, `task.json` + `task.weights.h5`: a masked-LM head (a generator, Hugging
Face's ConvBertForMaskedLM) gives a `ConvBertMaskedLM`, one GLUE classification head of a toolkit
fine-tuning run (`task_specific/<task>/dense`) a `ConvBertTextClassifier`.

Reading needs neither KerasHub nor TensorFlow: model/checkpoints.py `read_keras_hub_preset`,
which fine-tuning's --init_checkpoint uses. Everything is checked before anything is written,
and the preset is written into a temporary directory beside the output and renamed into place:
a failure leaves nothing behind.
"""
import json
import os
import re
import shutil
import tempfile

import numpy as np

from base import fileio
from data.errors import VocabError
from data.vocab import load_sentencepiece, load_vocab
from keras_hub_convbert.backbone import ConvBertBackbone
from keras_hub_convbert.masked_lm import ConvBertMaskedLM, ConvBertMaskedLMPreprocessor
from keras_hub_convbert.text_classifier import (DEFAULT_SEQUENCE_LENGTH, ConvBertTextClassifier,
                                                ConvBertTextClassifierPreprocessor)
from keras_hub_convbert.tokenizer import ConvBertSentencePieceTokenizer, ConvBertTokenizer
from model import ConvBertModel
from model.checkpoints import (KERAS_HUB_SHARDED_WEIGHTS, KERAS_HUB_WEIGHTS, CheckpointError,
                               assign_weights, is_keras_hub_preset, read_keras_hub_config,
                               read_keras_hub_preset, resolve_checkpoint)
from model.config import ConfigError

TOKENIZER_FILE, METADATA_FILE = "tokenizer.json", "metadata.json"
TOKENIZER_ASSETS = os.path.join("assets", "tokenizer")
VOCAB_ASSETS = ("vocabulary.txt", "vocabulary.spm")
# Where a checkpoint's vocabulary lies (the toolkit's names): beside it, in a pre-training
# model_dir's discriminator/, or one directory up.
VOCAB_NAMES = ("vocab.txt", "bert-uncased-vocab.txt")
SP_MODEL_NAME = "sentencepiece.model"
_CLASSIFIER = re.compile(r"^task_specific/([^/]+)/dense/kernel$")


# ------------------------------------------------------------------------------------- reading
def is_preset(path) -> bool:
    """A directory whose config.json is a serialized Keras object (KerasHub's preset layout)."""
    return is_keras_hub_preset(path)


def check_preset(path):
    """CheckpointError (one line) unless `path` is a complete ConvBERT preset: its backbone is a
    ConvBertBackbone, and config, weights and tokenizer (config and vocabulary asset) are there."""
    path = os.fspath(path)
    config = read_keras_hub_config(path)
    missing = []
    if not any(fileio.isfile(os.path.join(path, f))
               for f in (KERAS_HUB_WEIGHTS, KERAS_HUB_SHARDED_WEIGHTS)):
        missing.append(KERAS_HUB_WEIGHTS)
    if not fileio.isfile(os.path.join(path, TOKENIZER_FILE)):
        missing.append(TOKENIZER_FILE)
    elif not any(fileio.isfile(os.path.join(path, TOKENIZER_ASSETS, f)) for f in VOCAB_ASSETS):
        missing.append(os.path.join(TOKENIZER_ASSETS, VOCAB_ASSETS[0]))
    if missing:
        raise CheckpointError(f"{path}: KerasHub preset is missing {', '.join(missing)}")
    return config


def read_preset(path):
    """("keras_hub", ConvBertConfig, {official TF1 name: array}) of a preset's backbone after
    `check_preset`: `model.checkpoints.read_keras_hub_preset` (h5py, no KerasHub), which
    fine-tuning's --init_checkpoint reads a preset with."""
    check_preset(path)
    return read_keras_hub_preset(os.fspath(path), ConvBertModel)


def preset_vocabulary(path):
    """(vocab file, sp model): the preset's tokenizer asset, one of them None."""
    assets = os.path.join(os.fspath(path), TOKENIZER_ASSETS)
    txt, spm = (os.path.join(assets, f) for f in VOCAB_ASSETS)
    return (txt if fileio.isfile(txt) else None), (spm if fileio.isfile(spm) else None)


# ------------------------------------------------------------------------------------- writing
def find_vocabulary(checkpoint):
    """(vocab file, sp model) found beside `checkpoint` (one of them None), or (None, None)."""
    checkpoint = os.fspath(checkpoint)
    base = checkpoint if fileio.isdir(checkpoint) else fileio.dirname(checkpoint)
    if is_preset(base):
        return preset_vocabulary(base)
    for d in (base, fileio.join(base, "discriminator"), fileio.absolute_parent(base)):
        for name in VOCAB_NAMES:
            if fileio.isfile(fileio.join(d, name)):
                return fileio.join(d, name), None
        if fileio.isfile(fileio.join(d, SP_MODEL_NAME)):
            return None, fileio.join(d, SP_MODEL_NAME)
    return None, None


def make_tokenizer(vocab_file=None, sp_model=None, lowercase=True):
    """(tokenizer, vocabulary size) of a WordPiece vocab file or a SentencePiece model; the
    toolkit's checks (special tokens, UTF-8, duplicates) first, as VocabError."""
    if sp_model:
        _, model_bytes, _ = load_sentencepiece(sp_model)
        tokenizer = ConvBertSentencePieceTokenizer(proto=model_bytes, lowercase=lowercase)
    else:
        tokenizer = ConvBertTokenizer(vocabulary=load_vocab(vocab_file), lowercase=lowercase)
    return tokenizer, int(tokenizer.vocabulary_size())


def _head(tensors, cfg):
    """("masked_lm", None) | ("classifier", task) | (None, None): the one head a checkpoint
    holds for its encoder, which the preset's task model gets (an official pre-training
    checkpoint's generator head sits on the generator, of another width: left out)."""
    mlm_kernel = tensors.get("generator_predictions/dense/kernel")
    if mlm_kernel is not None and tuple(np.shape(mlm_kernel)) == (cfg.hidden_size,
                                                                 cfg.embedding_size):
        return "masked_lm", None
    heads = sorted(m.group(1) for m in map(_CLASSIFIER.match, tensors) if m)
    if len(heads) == 1 and np.shape(tensors[f"task_specific/{heads[0]}/dense/kernel"])[-1] >= 2:
        return "classifier", heads[0]
    return None, None


def _output_error(output):
    if fileio.exists(output) and not fileio.isdir(output):
        return f"{output}: exists and is a file, not a preset directory"
    if fileio.isdir(output) and fileio.listdir(output) and not is_preset(output):
        return (f"{output}: exists and is not a KerasHub preset (not replaced); "
                "give a new directory")
    return fileio.output_dir_error(output, "--output")


def write_preset(checkpoint, output, config=None, vocab_file=None, sp_model=None,
                 lowercase=True, sequence_length=None):
    """Write the KerasHub preset of `checkpoint` (native, Hugging Face, TF1, a pre-training
    model_dir, a fine-tuning run's saved model or a preset) to `output`; the preprocessors pad to
    `sequence_length` (None: 128, or the model's position count when smaller). Returns a summary.
    Raises CheckpointError / VocabError / ConfigError / ValueError before writing anything."""
    checkpoint, output = os.fspath(checkpoint), os.fspath(output)
    vocab_file = os.fspath(vocab_file) if vocab_file else None
    sp_model = os.fspath(sp_model) if sp_model else None
    if fileio.is_url(output):
        raise CheckpointError(f"{output}: KerasHub writes presets to a local directory")
    problem = _output_error(output)
    if problem:
        raise CheckpointError(problem)
    if is_preset(checkpoint):
        fmt, cfg, tensors = read_preset(checkpoint)
        cfg = config or cfg
    else:
        fmt, cfg, tensors = resolve_checkpoint(checkpoint, config)
    if not (vocab_file or sp_model):
        vocab_file, sp_model = find_vocabulary(checkpoint)
        if not (vocab_file or sp_model):
            raise VocabError(f"{checkpoint}: no vocabulary beside the checkpoint "
                             f"({', '.join(VOCAB_NAMES + (SP_MODEL_NAME,))}); give --vocab_file "
                             "or --sp_model")
    if sequence_length is None:
        sequence_length = min(DEFAULT_SEQUENCE_LENGTH, cfg.max_position_embeddings)
    if not 2 < sequence_length <= cfg.max_position_embeddings:
        raise ConfigError(f"sequence_length {sequence_length}: the model has "
                          f"{cfg.max_position_embeddings} position embeddings (and [CLS] [SEP] "
                          "need 2)")
    tokenizer, vocab_size = make_tokenizer(vocab_file, sp_model, lowercase)
    if vocab_size > cfg.vocab_size:
        raise VocabError(f"{sp_model or vocab_file}: {vocab_size} tokens but the model has only "
                         f"{cfg.vocab_size} word embeddings (another model's vocabulary?)")
    backbone = ConvBertBackbone.from_convbert_config(cfg)
    head, task = _head(tensors, cfg)
    if head == "masked_lm":
        preprocessor = ConvBertMaskedLMPreprocessor(tokenizer, sequence_length=sequence_length)
        model = ConvBertMaskedLM(backbone, preprocessor=preprocessor)
        report = assign_weights(model.weight_map(), tensors, where=checkpoint)
    else:
        preprocessor = ConvBertTextClassifierPreprocessor(tokenizer,
                                                          sequence_length=sequence_length)
        report = assign_weights(backbone.weight_map(), tensors, where=checkpoint)
        model = None
        if head == "classifier":
            kernel = np.asarray(tensors[f"task_specific/{task}/dense/kernel"])
            model = ConvBertTextClassifier(backbone, num_classes=int(kernel.shape[-1]),
                                           preprocessor=preprocessor)
            model.output_dense.kernel.assign(kernel)
            model.output_dense.bias.assign(np.asarray(tensors[f"task_specific/{task}/dense/bias"]))
    parent = fileio.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(output.rstrip('/'))}.tmp-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)    # mkdtemp's 0700 would become the preset's mode
    try:
        if model is not None:
            model.save_to_preset(tmp)
        else:
            backbone.save_to_preset(tmp)
            preprocessor.save_to_preset(tmp)
        metadata_path = os.path.join(tmp, METADATA_FILE)
        with open(metadata_path, encoding="utf-8") as f:
            metadata = json.load(f)
        metadata["convbert"] = {
            "source": checkpoint, "source_format": fmt, "config": cfg.to_dict(),
            "vocabulary": sp_model or vocab_file, "lowercase": bool(lowercase),
            "sequence_length": int(sequence_length),
            "task": type(model).__name__ if model is not None else None}
        with open(metadata_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(metadata, indent=4) + "\n")
        fileio.replace_dir(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"format": fmt, "config": cfg, "task": type(model).__name__ if model else None,
            "vocab_size": vocab_size, "weights": len(backbone.weight_map()),
            "ignored": report["unexpected"]}
