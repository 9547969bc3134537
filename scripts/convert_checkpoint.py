#!/usr/bin/env python3
"""Convert a ConvBERT checkpoint between formats: native ("keras"), Hugging Face ("hf"), TF1 ("tf1")
and KerasHub presets ("keras_hub").

    python scripts/convert_checkpoint.py --input path/to/convbert_small_tf1 --output out/hf --format hf
    python scripts/convert_checkpoint.py --input hf_dir --output out/tf1 --format tf1
    python scripts/convert_checkpoint.py --input tf1_dir --output out --format keras --config medium-small
    python scripts/convert_checkpoint.py --input hf_dir --output presets/small --format keras_hub

The input may be a native directory, a Hugging Face directory (config.json + model.safetensors,
bare or with heads), an official TF1 checkpoint (directory or prefix; the size is inferred from the
shapes unless --config is given), a pre-training model_dir, a fine-tuning run's saved model or a
KerasHub preset. A masked-LM head found in the input is converted too. Every weight is matched by
name; a mismatch is an error and nothing is written.

--format=keras_hub writes KerasHub's preset layout (keras_hub_convbert/presets.py; needs the
`keras_hub` extra): the backbone, the tokenizer (--vocab_file / --sp_model, else the vocabulary
found beside the input), the preprocessor (--sequence_length), KerasHub's metadata and, for an
input with a masked-LM head or one GLUE classification head, the task model.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from base.command import quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

flags.DEFINE_string("input", None, "Checkpoint to read (any supported format).")
flags.DEFINE_string("output", None, "Directory to write.")
flags.DEFINE_enum("format", "hf", ["keras", "hf", "tf1", "keras_hub"],
                  "Output format (keras_hub: a KerasHub preset directory).")
flags.DEFINE_string("config", None, "Model size (small, medium-small, base), a configs/ name, or a "
                    "ConvBertConfig JSON file, for checkpoints whose shapes do not settle the size.")
flags.DEFINE_string("vocab_file", None, "keras_hub: the WordPiece vocabulary (default: the one "
                    "beside --input: vocab.txt, a pre-training model_dir's, a preset's).")
flags.DEFINE_string("sp_model", None, "keras_hub: a SentencePiece model instead of a vocab file.")
flags.DEFINE_bool("do_lower_case", True, "keras_hub: the tokenizer lower-cases (and strips "
                  "accents, WordPiece), as the released uncased models.")
flags.DEFINE_integer("sequence_length", None, "keras_hub: the preprocessor's padded length, the "
                     "length the model was pre-trained at (default 128, or the model's position "
                     "count when smaller).")
flags.mark_flags_as_required(["input", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from model import ConvBertConfig, ConvBertMaskedLM, ConvBertModel
    from model.checkpoints import CheckpointError, resolve_checkpoint
    from model.config import ConfigError
    from data.errors import VocabError
    if FLAGS.format == "keras_hub":
        return write_keras_hub_preset()
    try:
        config = ConvBertConfig.from_any(FLAGS.config) if FLAGS.config else None
        from model.checkpoints import is_keras_hub_preset
        if is_keras_hub_preset(FLAGS.input):
            return convert_keras_hub_preset(config)   # a KerasHub preset as the input
        fmt, config, tensors = resolve_checkpoint(FLAGS.input, config)
        has_mlm_head = any(name.startswith("generator_predictions/") for name in tensors)
        model_cls = ConvBertMaskedLM if has_mlm_head else ConvBertModel
        model = model_cls.from_pretrained(FLAGS.input, config=config)
        written = model.save_pretrained(FLAGS.output, format=FLAGS.format)
    except (CheckpointError, ConfigError, VocabError, OSError) as e:
        fail(e)
    print(f"{FLAGS.input} ({fmt}) -> {written} ({FLAGS.format}); {len(model.weight_map())} weights"
          f"{' incl. the masked-LM head' if has_mlm_head else ''}")




def fail(error):
    print(f"error: {' '.join(str(error).split()) or type(error).__name__}", file=sys.stderr,
          flush=True)
    sys.exit(1)


def _keras_hub_errors():
    from data.errors import VocabError
    from model.checkpoints import CheckpointError
    from model.config import ConfigError
    return CheckpointError, ConfigError, VocabError, OSError


def write_keras_hub_preset():
    """--format=keras_hub: the preset of --input (keras_hub_convbert/presets.py)."""
    from model import ConvBertConfig
    errors = _keras_hub_errors()
    try:
        from keras_hub_convbert.presets import write_preset
    except ImportError as e:
        fail(f"--format=keras_hub needs KerasHub ({e}): pip install -e '.[keras_hub]'")
    try:
        config = ConvBertConfig.from_any(FLAGS.config) if FLAGS.config else None
        summary = write_preset(FLAGS.input, FLAGS.output, config=config,
                               vocab_file=FLAGS.vocab_file, sp_model=FLAGS.sp_model,
                               lowercase=FLAGS.do_lower_case,
                               sequence_length=FLAGS.sequence_length)
    except errors as e:
        fail(e)
    task = f", task {summary['task']}" if summary["task"] else ""
    print(f"{FLAGS.input} ({summary['format']}) -> {FLAGS.output} (keras_hub preset); "
          f"{summary['weights']} encoder weights, vocabulary of {summary['vocab_size']}{task}")


def convert_keras_hub_preset(config):
    """A KerasHub preset as --input, written as --format (keras, hf, tf1): its backbone, read
    without KerasHub (model/checkpoints.py `read_keras_hub_preset`)."""
    from model import ConvBertModel
    from model.checkpoints import assign_weights, read_keras_hub_preset
    errors = _keras_hub_errors()
    try:
        fmt, saved, tensors = read_keras_hub_preset(FLAGS.input, ConvBertModel)
        model = ConvBertModel(config or saved)
        assign_weights(model.weight_map(), tensors, where=FLAGS.input)
        written = model.save_pretrained(FLAGS.output, format=FLAGS.format)
    except errors as e:
        fail(e)
    print(f"{FLAGS.input} ({fmt}) -> {written} ({FLAGS.format}); {len(model.weight_map())} weights")


if __name__ == "__main__":
    app.run(main)
