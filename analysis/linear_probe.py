"""A linear probe of frozen encoders on a GLUE classification task: what the features hold before
any fine-tuning (docs/RESULTS.md §7).

    python -m analysis.linear_probe --checkpoint convbert=runs/repro_v2/pretrain/convbert \\
        --checkpoint random=random:runs/repro_v2/pretrain/convbert \\
        --glue_dir ../shared/data/glue --task sst --vocab_file vocab.txt --output_dir out/probe \\
        [--max_train_examples 4000] [--max_seq_length 64] [--seed 0] [--batch_size 256]

Each `--checkpoint NAME=PATH` is anything run_finetuning.py's `--init_checkpoint` accepts, loaded
by the same `finetune.encoder_source.EncoderSource`; `NAME=random:PATH` is PATH's architecture
with fresh random weights (keras seed `--seed`), the random-init baseline. The task's train split
(its first `--max_train_examples`) and dev split are tokenized as for fine-tuning and run through
the encoder in inference mode. Two feature sets of the last layer: the [CLS] vector (what the
fine-tuning head reads) and the mean over real tokens. Each is standardized with the training
features' mean and std and fed to scikit-learn's LogisticRegression (L2, C = 1, lbfgs), fit on
train and scored (accuracy) on dev. `spread` = mean over dimensions of the features' std across
examples over their mean absolute value: near 0, every example gets nearly the same vector.

Writes `linear_probe.json` and `linear_probe.md` into `--output_dir` (local, gs://, ram://).
Classification tasks only (STS-B is a regression). Bad input: one line `error: ...`, exit 1.
"""
import json
import sys

import numpy as np

from analysis.attention import _Parser, _user_error_types

NAME = "linear_probe"


def parse_args(argv):
    p = _Parser(prog="python -m analysis.linear_probe",
                description="Linear probe of frozen encoders on a GLUE classification task.")
    p.add_argument("--checkpoint", action="append", required=True, metavar="NAME=PATH",
                   help="an encoder (repeat); PATH as for run_finetuning --init_checkpoint, or "
                        "random:PATH for PATH's architecture with random weights")
    p.add_argument("--glue_dir", required=True)
    p.add_argument("--task", default="sst", help="a GLUE classification task (sst)")
    p.add_argument("--vocab_file", required=True, help="WordPiece vocab")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_train_examples", type=int, default=4000)
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="keras seed of random:PATH encoders")
    p.add_argument("--batch_size", type=int, default=256)
    args = p.parse_args(argv)
    from finetune.console import UsageError
    args.checkpoints = []
    for spec in args.checkpoint:
        name, sep, path = (s.strip() for s in spec.partition("="))
        random_init = path.startswith("random:")
        path = path[len("random:"):] if random_init else path
        if not sep or not name or not path:
            raise UsageError(f"--checkpoint {spec!r}: expected NAME=PATH or NAME=random:PATH")
        if name in [n for n, _, _ in args.checkpoints]:
            raise UsageError(f"--checkpoint {spec!r}: name {name!r} given twice")
        args.checkpoints.append((name, path, random_init))
    for flag in ("max_train_examples", "max_seq_length", "batch_size"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} {getattr(args, flag)}: must be > 0")
    return args


def read_task(args):
    """(task, train examples, dev examples), every file checked before a model is built."""
    from finetune.console import UsageError
    from finetune.glue.readers import read_examples
    from finetune.glue.tasks import get_task
    from base import fileio
    task = get_task(args.task)
    if task.is_regression:
        raise UsageError(f"--task {task.name}: a regression task; the probe needs labels")
    for _, path, _ in args.checkpoints:
        if not (fileio.exists(path) or fileio.exists(path + ".index")):
            raise UsageError(f"{path}: checkpoint not found")
    train = read_examples(args.glue_dir, task.name, "train")[:args.max_train_examples]
    dev = read_examples(args.glue_dir, task.name, "dev_matched" if task.name == "mnli" else "dev")
    labels = {e.label for e in train}
    if len(labels) < 2:
        raise UsageError(f"{args.glue_dir}: the {task.name} training examples read have "
                         f"{len(labels)} label(s); a probe needs two or more")
    return task, train, dev


def encoder_features(encoder, features, batch_size):
    """{"cls": [N, H], "mean": [N, H]} of the encoder's last layer."""
    from keras import ops
    cls, mean = [], []
    for start in range(0, len(features["input_ids"]), batch_size):
        batch = {k: features[k][start:start + batch_size]
                 for k in ("input_ids", "input_mask", "segment_ids")}
        hidden = ops.convert_to_numpy(encoder(batch, training=False)).astype(np.float64)
        mask = batch["input_mask"][..., None].astype(np.float64)
        cls.append(hidden[:, 0])
        mean.append((hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0))
    return {"cls": np.concatenate(cls), "mean": np.concatenate(mean)}


def probe(train_x, train_y, dev_x, dev_y):
    """(dev accuracy in %, spread) of a logistic regression on standardized features."""
    from sklearn.linear_model import LogisticRegression
    mu, sd = train_x.mean(axis=0), train_x.std(axis=0) + 1e-6
    clf = LogisticRegression(C=1.0, max_iter=2000).fit((train_x - mu) / sd, train_y)
    accuracy = 100.0 * clf.score((dev_x - mu) / sd, dev_y)
    spread = float(train_x.std(axis=0).mean() / (np.abs(train_x).mean() + 1e-12))
    return accuracy, spread


def probe_model(name, path, random_init, task, train, dev, args):
    import keras
    from data.tokenization import load_tokenizer
    from finetune.encoder_source import EncoderSource
    from finetune.features import convert_examples_to_features
    from finetune.hparams import FinetuneHParams
    from model import ConvBertModel
    source = EncoderSource(path, FinetuneHParams())
    if random_init:
        keras.utils.set_random_seed(args.seed)
        encoder = ConvBertModel(source.config)
    else:
        encoder = source.build()
    tokenizer = load_tokenizer(args.vocab_file)
    feats = {split: convert_examples_to_features(examples, task.name, tokenizer,
                                                 args.max_seq_length)
             for split, examples in (("train", train), ("dev", dev))}
    x = {split: encoder_features(encoder, f, args.batch_size) for split, f in feats.items()}
    result = {"name": name, "checkpoint": path, "random_init": random_init}
    for kind in ("cls", "mean"):
        accuracy, spread = probe(x["train"][kind], feats["train"]["label_ids"],
                                 x["dev"][kind], feats["dev"]["label_ids"])
        result[f"{kind}_dev_accuracy"] = round(accuracy, 2)
        result[f"{kind}_spread"] = round(spread, 6)
    majority = np.bincount(feats["dev"]["label_ids"]).max() / len(dev)
    result["dev_majority_class"] = round(100.0 * majority, 2)
    print(f"linear_probe: {name}: [CLS] {result['cls_dev_accuracy']:.2f}, mean "
          f"{result['mean_dev_accuracy']:.2f} (dev majority class {result['dev_majority_class']})",
          flush=True)
    return result


def markdown(results, settings):
    lines = [f"Linear probe on frozen encoders, GLUE {settings['task']}: logistic regression on "
             f"the first {settings['num_train']} train examples, accuracy on {settings['num_dev']} "
             f"dev examples, {settings['max_seq_length']} tokens.", "",
             "| encoder | [CLS] dev acc | mean-pooled dev acc | [CLS] spread | mean spread |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']}{' (random init)' if r['random_init'] else ''} | "
                     f"{r['cls_dev_accuracy']:.2f} | {r['mean_dev_accuracy']:.2f} | "
                     f"{r['cls_spread']:.4f} | {r['mean_spread']:.4f} |")
    lines += ["", f"Dev majority class: {results[0]['dev_majority_class']:.2f}%."]
    return "\n".join(lines) + "\n"


def run(argv):
    from base import fileio
    args = parse_args(argv)
    task, train, dev = read_task(args)
    results = [probe_model(name, path, random_init, task, train, dev, args)
               for name, path, random_init in args.checkpoints]
    settings = {"task": task.name, "num_train": len(train), "num_dev": len(dev),
                "max_seq_length": args.max_seq_length, "seed": args.seed,
                "classifier": "sklearn LogisticRegression(C=1.0, max_iter=2000), standardized"}
    fileio.makedirs(args.output_dir)
    fileio.write_text_atomic(fileio.join(args.output_dir, NAME + ".json"),
                             json.dumps({"settings": settings, "results": results}, indent=2))
    fileio.write_text_atomic(fileio.join(args.output_dir, NAME + ".md"), markdown(results, settings))
    print(f"wrote {args.output_dir}/{NAME}.md, {NAME}.json")
    return 0


def main(argv=None):
    """Exit status: 0, or 1 with one line `error: ...` for a bad flag or input."""
    from base.command import run_command
    return run_command(run, argv, _user_error_types)


if __name__ == "__main__":
    sys.exit(main())
