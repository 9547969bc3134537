#!/usr/bin/env python3
"""Convert a ConvBERT checkpoint between formats: native ("keras"), Hugging Face ("hf"), TF1 ("tf1").

    python scripts/convert_checkpoint.py --input path/to/convbert_small_tf1 --output out/hf --format hf
    python scripts/convert_checkpoint.py --input hf_dir --output out/tf1 --format tf1
    python scripts/convert_checkpoint.py --input tf1_dir --output out --format keras --config medium-small

The input may be a native directory, a Hugging Face directory (config.json + model.safetensors,
bare or with heads), an official TF1 checkpoint (directory or prefix; the size is inferred from the
shapes unless --config is given) or a pre-training model_dir. A masked-LM head found in the input is
converted too. Every weight is matched by name; a mismatch is an error and nothing is written.
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
flags.DEFINE_enum("format", "hf", ["keras", "hf", "tf1"], "Output format.")
flags.DEFINE_string("config", None, "Model size (small, medium-small, base), a configs/ name, or a "
                    "ConvBertConfig JSON file, for checkpoints whose shapes do not settle the size.")
flags.mark_flags_as_required(["input", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from model import ConvBertConfig, ConvBertMaskedLM, ConvBertModel
    from model.checkpoints import CheckpointError, resolve_checkpoint
    from model.config import ConfigError
    try:
        config = ConvBertConfig.from_any(FLAGS.config) if FLAGS.config else None
        fmt, config, tensors = resolve_checkpoint(FLAGS.input, config)
        has_mlm_head = any(name.startswith("generator_predictions/") for name in tensors)
        model_cls = ConvBertMaskedLM if has_mlm_head else ConvBertModel
        model = model_cls.from_pretrained(FLAGS.input, config=config)
        written = model.save_pretrained(FLAGS.output, format=FLAGS.format)
    except (CheckpointError, ConfigError, OSError) as e:
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr,
              flush=True)
        sys.exit(1)
    print(f"{FLAGS.input} ({fmt}) -> {written} ({FLAGS.format}); {len(model.weight_map())} weights"
          f"{' incl. the masked-LM head' if has_mlm_head else ''}")


if __name__ == "__main__":
    app.run(main)
