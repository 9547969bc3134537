#!/usr/bin/env python3
"""Fine-tune a ConvBERT KerasHub preset on a GLUE task with Keras' `fit`, on the backend
KERAS_BACKEND names (docs/KERAS_HUB.md):

    python scripts/keras_hub_glue.py --preset=presets/convbert_small --task=SST-2 \\
        --data_dir=../shared/data/glue --output=runs/keras_hub_sst2_tf.json
    KERAS_BACKEND=jax python scripts/keras_hub_glue.py ... --output=runs/keras_hub_sst2_jax.json

Only KerasHub's generic API is used: `keras_hub.models.TextClassifier.from_preset(preset,
num_classes=...)`, then `fit` / `evaluate` on raw strings (sentence pairs as a tuple), the
preprocessor's tokenization running in tf.data. Writes a JSON summary: the backend, the examples
used, the loss after each epoch, dev loss and accuracy, seconds.
"""
import argparse
import csv
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# task -> (text columns, label column, labels in order); the GLUE TSVs as released.
TASKS = {"SST-2": (("sentence",), "label", ("0", "1")),
         "CoLA": ((3,), 1, ("0", "1")),
         "RTE": (("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
         "MRPC": (("#1 String", "#2 String"), "Quality", ("0", "1"))}


def read_tsv(path, task, limit):
    columns, label_column, labels = TASKS[task]
    columns = list(columns)
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if isinstance(label_column, str):
        header, rows = rows[0], rows[1:]
        columns = [header.index(c) for c in columns]
        label_column = header.index(label_column)
    rows = [r for r in rows if len(r) > max(columns + [label_column])][:limit or None]
    texts = tuple([r[c] for r in rows] for c in columns)
    return texts, [labels.index(r[label_column]) for r in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True)
    parser.add_argument("--task", default="SST-2", choices=sorted(TASKS))
    parser.add_argument("--data_dir", required=True, help="GLUE root (<data_dir>/<task>/*.tsv)")
    parser.add_argument("--train_examples", type=int, default=0, help="0: all")
    parser.add_argument("--dev_examples", type=int, default=0, help="0: all")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--sequence_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="JSON summary to write")
    args = parser.parse_args()

    import keras
    import keras_hub
    import tensorflow as tf

    import keras_hub_convbert  # noqa: F401  (registers ConvBERT with KerasHub)

    keras.utils.set_random_seed(args.seed)
    train_x, train_y = read_tsv(os.path.join(args.data_dir, args.task, "train.tsv"), args.task,
                                args.train_examples)
    dev_x, dev_y = read_tsv(os.path.join(args.data_dir, args.task, "dev.tsv"), args.task,
                            args.dev_examples)

    def dataset(texts, labels, shuffle):
        features = texts[0] if len(texts) == 1 else tuple(texts)
        ds = tf.data.Dataset.from_tensor_slices((features, labels))
        if shuffle:
            ds = ds.shuffle(len(labels), seed=args.seed)
        return ds.batch(args.batch_size)

    classifier = keras_hub.models.TextClassifier.from_preset(
        args.preset, num_classes=len(TASKS[args.task][2]))
    classifier.preprocessor.sequence_length = args.sequence_length
    classifier.compile(optimizer=keras.optimizers.AdamW(args.learning_rate, weight_decay=0.01),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["sparse_categorical_accuracy"])
    start = time.time()
    before = classifier.evaluate(dataset(dev_x, dev_y, False), verbose=0, return_dict=True)
    history = classifier.fit(dataset(train_x, train_y, True), epochs=args.epochs, verbose=2)
    after = classifier.evaluate(dataset(dev_x, dev_y, False), verbose=0, return_dict=True)
    summary = {
        "backend": keras.backend.backend(), "preset": args.preset, "task": args.task,
        "classifier": type(classifier).__name__, "train_examples": len(train_y),
        "dev_examples": len(dev_y), "epochs": args.epochs, "batch_size": args.batch_size,
        "sequence_length": args.sequence_length, "learning_rate": args.learning_rate,
        "train_loss": [round(float(v), 4) for v in history.history["loss"]],
        "train_accuracy": [round(float(v), 4)
                           for v in history.history["sparse_categorical_accuracy"]],
        "dev_before": {k: round(float(v), 4) for k, v in before.items()},
        "dev_after": {k: round(float(v), 4) for k, v in after.items()},
        "majority_class": round(max(dev_y.count(0), dev_y.count(1)) / len(dev_y), 4),
        "seconds": round(time.time() - start, 1)}
    print(json.dumps(summary, indent=1))
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
