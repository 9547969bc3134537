"""Where a fine-tuning run's encoder comes from: a checkpoint of any format, or random weights.

    source = EncoderSource(init_checkpoint, hp)   # reads the checkpoint once
    encoder = source.build()                      # a fresh ConvBertModel with its weights

Also the checks that belong to the checkpoint: the sequence length it was pre-trained with
(`check_sequence_length`) and the vocabulary found beside it (`find_vocab_file`, or the
SentencePiece model a pre-training run wrote: `find_sp_model`).
"""
from __future__ import annotations

import json

from base import fileio
from finetune.console import UsageError, warn
from model.checkpoints import is_keras_hub_preset

PRETRAIN_SEQ_KEYS = ("trained_max_seq_length", "max_seq_length")
PRETRAIN_RECORD_FILES = ("hparams.json", "pretrain_config.json")


def read_checkpoint(path, checkpoints):
    """(format, config, {official name: array}) of any checkpoint `model.checkpoints` reads, a
    KerasHub preset included (read with h5py: neither KerasHub nor TensorFlow is imported)."""
    if is_keras_hub_preset(path):
        from model import ConvBertModel
        return checkpoints.read_keras_hub_preset(path, ConvBertModel)
    return checkpoints.resolve_checkpoint(path)


class EncoderSource:
    """Where encoder weights come from: a checkpoint (read once) or random init."""

    def __init__(self, init_checkpoint, hp):
        """Native, Hugging Face and official TF1 checkpoints are read without TensorFlow
        (safetensors; model/tensor_bundle.py), so the JAX path takes every format."""
        from finetune.hparams import encoder_config
        from model import checkpoints
        self.path = init_checkpoint
        overrides = dict(hp.model_hparam_overrides)
        if init_checkpoint:
            self.format, saved, self.tensors = read_checkpoint(init_checkpoint, checkpoints)
            self.config = saved.replace(**overrides) if overrides else saved
            self.config.validate()
        else:  # model_size: a size, a configs/ row or a ConvBertConfig .json file
            self.format, self.tensors = None, None
            self.config = encoder_config(hp.model_size, overrides)

    def build(self):
        """A fresh ConvBertModel with the checkpoint's weights (or random ones)."""
        from model import ConvBertModel
        from model import checkpoints
        model = ConvBertModel(self.config)
        if self.tensors is not None:
            checkpoints.assign_weights(model.weight_map(), self.tensors, where=self.path)
        return model

    def initial_weights(self, model):
        """{official name: array} to reset `model` to before each trial: the checkpoint, or the
        random initialisation `model` got (every trial then starts from the same encoder)."""
        if self.tensors is not None:
            return self.tensors
        from keras import ops
        return {name: ops.convert_to_numpy(v) for name, v in model.weight_map().items()}

    def resolved_dir(self):
        """The directory the weights were read from (a model_dir resolves to discriminator/)."""
        path = self.path
        if not path:
            return None
        if fileio.isdir(path):
            for sub in ("discriminator", "export/discriminator"):
                if (not fileio.exists(fileio.join(path, "convbert_config.json"))
                        and fileio.exists(fileio.join(path, sub, "convbert_config.json"))):
                    return fileio.join(path, sub)
            return path
        return fileio.dirname(path)

    def trained_max_seq_length(self):
        """(max_seq_length, file) recorded by a pre-training run: a top-level JSON key in the
        checkpoint dir or its parents, e.g. the `<model_dir>/hparams.json` that
        pretrain/task.py writes ({"max_seq_length": 128, ...}); None if unknown."""
        directory = self.resolved_dir()
        if directory is None:
            return None
        candidates = []
        parent = fileio.absolute_parent(directory)
        for d in dict.fromkeys((fileio.norm(directory), parent, fileio.absolute_parent(parent))):
            # pretrain/task.py writes <model_dir>/hparams.json (with max_seq_length).
            known = [fileio.join(d, name) for name in PRETRAIN_RECORD_FILES]
            candidates += [p for p in known if fileio.isfile(p)]
            candidates += [p for p in fileio.list_files(d, "*.json")
                           if p not in known and not fileio.basename(p).startswith(".")]
        for path in candidates:
            if fileio.basename(path) in ("config.json",):
                continue  # HF model config: max_position_embeddings, not the trained length
            try:
                data = json.loads(fileio.read_text(path))
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict):
                continue
            for key in PRETRAIN_SEQ_KEYS:
                value = data.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value, path
        return None


def check_sequence_length(source: EncoderSource, max_seq_length: int, task: str):
    cfg = source.config
    if max_seq_length > cfg.max_position_embeddings:
        raise UsageError(f"{task}: max_seq_length {max_seq_length} exceeds the model's "
                         f"{cfg.max_position_embeddings} position embeddings")
    if source.tensors is None:
        return
    recorded = source.trained_max_seq_length()
    if recorded is not None:
        trained, where = recorded
        if max_seq_length > trained:
            warn(f"{task}: max_seq_length {max_seq_length} but the checkpoint was pre-trained "
                 f"with sequences of at most {trained} tokens ({where}): position embeddings "
                 f"{trained}..{max_seq_length - 1} were never trained (random init); expect "
                 f"worse results than a checkpoint pre-trained at {max_seq_length}")
    elif max_seq_length > 128:
        warn(f"{task}: max_seq_length {max_seq_length} > 128: ConvBERT/ELECTRA pre-train at 128 "
             f"tokens, so position embeddings beyond 128 may never have been trained in "
             f"{source.path} (it records no pre-training max_seq_length)")


# vocabulary.txt / vocabulary.spm: a KerasHub preset's tokenizer asset (assets/tokenizer/).
VOCAB_NAMES = ("vocab.txt", "bert-uncased-vocab.txt", "vocabulary.txt")
# What run_pretraining.py writes into its model_dir when it pre-trained with --sp_model
# (pretrain/task.py write_vocabulary).
SP_MODEL_NAME = "sentencepiece.model"
PRESET_SP_MODEL_NAME = "vocabulary.spm"


def _beside(init_checkpoint):
    """The directories a vocabulary of `init_checkpoint` may lie in: its own (a pre-training
    model_dir), its discriminator/ export, and the one above (for a checkpoint inside it)."""
    base = init_checkpoint if fileio.isdir(init_checkpoint) else fileio.dirname(init_checkpoint)
    return (base, fileio.join(base, "discriminator"), fileio.join(base, "assets", "tokenizer"),
            fileio.absolute_parent(base))


def find_vocab_file(vocab_flag, init_checkpoint):
    if vocab_flag:
        if not fileio.isfile(vocab_flag):
            raise UsageError(f"{vocab_flag}: vocab file not found")
        return vocab_flag
    if init_checkpoint:
        for d in _beside(init_checkpoint):
            for name in VOCAB_NAMES:
                path = fileio.join(d, name)
                if fileio.isfile(path):
                    return path
    raise UsageError("--vocab_file is required (the BERT uncased vocab.txt); none was found "
                     "next to --init_checkpoint")


def find_sp_model(init_checkpoint):
    """The SentencePiece model a pre-training run wrote beside `init_checkpoint`
    (sentencepiece.model); None when there is none, or when find_vocab_file finds a WordPiece
    vocab at least as near (the nearest directory of `_beside` wins; in one, the vocab)."""
    if not init_checkpoint:
        return None
    for d in _beside(init_checkpoint):
        if any(fileio.isfile(fileio.join(d, name)) for name in VOCAB_NAMES):
            return None
        for name in (SP_MODEL_NAME, PRESET_SP_MODEL_NAME):
            path = fileio.join(d, name)
            if fileio.isfile(path):
                return path
    return None

