"""Export a ConvBERT checkpoint as a raw-text serving SavedModel (TF backend).

    python scripts/export_savedmodel.py --checkpoint DIR --vocab_file vocab.txt --out /tmp/serving \
        [--max_seq_length 128] [--cased]
    python scripts/export_savedmodel.py --size small --vocab_file vocab.txt --out /tmp/serving  # random

Then: `import tensorflow_text; m = tf.saved_model.load(OUT);
m.signatures["serving_default"](text=tf.constant(["some text"]))["sequence_output"]`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def main(argv=None):
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="native / Hugging Face / TF1 ConvBERT checkpoint")
    src.add_argument("--size", help="random weights of an official size (smoke tests)")
    ap.add_argument("--vocab_file", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--cased", action="store_true")
    args = ap.parse_args(argv)
    import tensorflow as tf

    from data.tokenization import Tokenizer
    from model import ConvBertConfig, ConvBertModel
    from model.export import export_savedmodel
    if args.checkpoint:
        model = ConvBertModel.from_pretrained(args.checkpoint, conv_implementation="auto")
    else:
        model = ConvBertModel(ConvBertConfig.from_size(args.size), conv_implementation="auto")
    tokenizer = Tokenizer(args.vocab_file, do_lower_case=not args.cased)
    export_savedmodel(model, tokenizer, args.out, args.max_seq_length)
    loaded = tf.saved_model.load(args.out)
    out = loaded.signatures["serving_default"](text=tf.constant(["The export works."]))
    print(f"wrote {args.out}: sequence_output {tuple(out['sequence_output'].shape)}")


if __name__ == "__main__":
    main()
