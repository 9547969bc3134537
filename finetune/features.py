"""GLUE examples -> fixed-length classification features, in ELECTRA's input format.

Each example becomes `[CLS] a [SEP] b [SEP]` (or `[CLS] a [SEP]` for single sentences), with
segment id 0 up to the first [SEP] and 1 after it. A pair is truncated longest-first to
max_seq_length - 3 tokens (a single sentence to max_seq_length - 2), then *always* padded to
max_seq_length: ConvBERT's span-based convolution sees the padding positions, so outputs (and
parity with the reference implementations) depend on the fixed length.

Tokenization goes through the toolkit tokenizer (`data.tokenization.Tokenizer`): any object with
`.tokenize(list_of_texts) -> list[list[int]]` and `.cls_id`, `.sep_id`, `.pad_id` works.

`python -m finetune.features --task_names ... --output_dir DIR` writes these features (and
SQuAD's windows, finetune/qa/squad_data.py) to files once (finetune/feature_files.py reads them back without TensorFlow); see `CLI_USAGE` below.
"""
from __future__ import annotations

import numpy as np

from base import fileio

from finetune.glue.readers import InputExample, add_swapped_pairs
from finetune.glue.tasks import get_task

# Re-exported: MRPC/STS-B train on both sentence orders when ELECTRA's double_unordered is on.
double_unordered = add_swapped_pairs

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "label_ids")


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Pop tokens off the end of the longer sequence until the pair fits (in place).

    Same rule as BERT/ELECTRA's `_truncate_seq_pair`: on a tie, `tokens_b` loses a token.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def pack_example(ids_a, ids_b, max_seq_length: int, cls_id: int, sep_id: int, pad_id: int):
    """(input_ids, input_mask, segment_ids), each a list of exactly max_seq_length ints."""
    ids_a = list(ids_a)
    ids_b = list(ids_b) if ids_b is not None else []   # an empty b packs as a single (ELECTRA)
    if ids_b:
        if max_seq_length < 4:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a pair")
        truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
    else:
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a sentence")
        ids_a = ids_a[:max_seq_length - 2]
    input_ids = [cls_id] + ids_a + [sep_id]
    segment_ids = [0] * len(input_ids)
    if ids_b:
        input_ids += ids_b + [sep_id]
        segment_ids += [1] * (len(ids_b) + 1)
    input_mask = [1] * len(input_ids)
    padding = max_seq_length - len(input_ids)
    return (input_ids + [pad_id] * padding, input_mask + [0] * padding,
            segment_ids + [0] * padding)


def label_id(task_name: str, label):
    """Class index of a label string, the float score for STS-B; 0 for unlabeled (test) rows."""
    task = get_task(task_name)
    if task.is_regression:
        # Raw 0..5 score; ELECTRA's regression head trains on label / max_value (task.max_value).
        return 0.0 if label is None else float(label)
    if label is None:
        return 0
    return task.label_list.index(str(label))


def convert_examples_to_features(examples: list[InputExample], task_name: str, tokenizer,
                                 max_seq_length: int) -> dict[str, np.ndarray]:
    """{"input_ids", "input_mask", "segment_ids": int32 [N, max_seq_length],
    "label_ids": int32 [N] (float32 [N] for STS-B)} -- ready for tf.data.from_tensor_slices."""
    task = get_task(task_name)
    # One batched call per side: the toolkit tokenizer is vectorised over texts.
    ids_a = tokenizer.tokenize([e.text_a for e in examples]) if examples else []
    has_b = [bool(e.text_b) for e in examples]   # ELECTRA: an empty text_b packs as a single
    ids_b_list = tokenizer.tokenize([e.text_b for e, b in zip(examples, has_b) if b]) \
        if any(has_b) else []
    ids_b_iter = iter(ids_b_list)
    n = len(examples)
    arrays = {name: np.zeros((n, max_seq_length), dtype=np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    for i, example in enumerate(examples):
        ids_b = next(ids_b_iter) if has_b[i] else None
        packed = pack_example(ids_a[i], ids_b, max_seq_length,
                              tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
        for name, values in zip(("input_ids", "input_mask", "segment_ids"), packed):
            arrays[name][i] = values
    label_dtype = np.float32 if task.is_regression else np.int32
    arrays["label_ids"] = np.array([label_id(task.name, e.label) for e in examples],
                                   dtype=label_dtype)
    return arrays


# ------------------------------------------------------------------------------ command line
CLI_USAGE = """Tokenize GLUE / SQuAD splits once into feature files (finetune/feature_files.py).

    python -m finetune.features --task_names=cola,sst,mrpc,sts,rte --data_dir=GLUE_DIR \\
        --vocab_file=VOCAB --output_dir=DIR [--do_lower_case=true] [--max_seq_length=128] \\
        [--splits=train,dev] [--max_train_examples=N] [--double_unordered=true]
    python -m finetune.features --task_names=squadv1,squad --data_dir=DATA_DIR \\
        --vocab_file=VOCAB --output_dir=DIR [--max_seq_length=512] [--doc_stride=128] \\
        [--max_query_length=64] [--train_file=...] [--predict_file=...]

SQuAD (squadv1 = 1.1, squad = 2.0) reads <data_dir>/squad/{train,dev}-v<version>.json (or
--train_file / --predict_file) as run_finetuning.py does, and writes the sliding windows with
what post-processing needs (token -> context offsets, max-context flags, the dev JSON for the
examples and gold answers); splits train and dev. --sp_model (a SentencePiece model) replaces
--vocab_file for GLUE and SQuAD alike.

Writes DIR/<task>_<split>.npz per task and split, then DIR/manifest.json (vocab sha256, length,
casing, ...). For MNLI, dev means dev_matched + dev_mismatched and test means test_matched +
test_mismatched + diagnostic (AX, when the download has it): the splits a fine-tuning run reads.
`run_finetuning.py --features_dir=DIR` fine-tunes from them (train and dev; test with
--do_predict), on Keras-on-JAX without TensorFlow too. Defaults are the fine-tuning ones
(finetune/hparams.py), and the train split is read as a fine-tuning run reads it
(finetune/glue/splits.py `load_glue_data`: the first --max_train_examples, then both sentence
orders for MRPC/STS-B with --double_unordered). Every path may be on gs:// or ram://
(base/fileio.py). Bad input (unknown task or split, missing data file or vocab) stops with one
line `error: ...` naming it, exit status 1, before anything is written.
"""

_CLI_FLAGS = None


def _cli_flags():
    """This command's own absl registry (defined on first use: importing this module for
    convert_examples_to_features defines no flags)."""
    global _CLI_FLAGS
    if _CLI_FLAGS is None:
        from absl import flags
        values = flags.FlagValues()
        # None: the fine-tuning default (finetune/hparams.py), filled in by load_hparams.
        for define, name, default, help_text in (
                (flags.DEFINE_string, "task_names", None, "Comma list of GLUE tasks: cola,sst,"
                 "mrpc,sts,qqp,mnli,qnli,rte,wnli (GLUE spellings accepted)."),
                (flags.DEFINE_string, "data_dir", None, "GLUE data dir "
                 "(<data_dir>/<TASK>/{train,dev,test}.tsv)."),
                (flags.DEFINE_string, "vocab_file", None, "WordPiece vocab of the encoder."),
                (flags.DEFINE_string, "sp_model", None, "SentencePiece model of the encoder "
                 "instead of --vocab_file."),
                (flags.DEFINE_integer, "doc_stride", None, "SQuAD: tokens between window starts "
                 "(default: the fine-tuning default, 128)."),
                (flags.DEFINE_integer, "max_query_length", None, "SQuAD: question tokens kept "
                 "(default: the fine-tuning default, 64)."),
                (flags.DEFINE_string, "train_file", None, "SQuAD training JSON (default: "
                 "<data_dir>/squad/train-v<version>.json)."),
                (flags.DEFINE_string, "predict_file", None, "SQuAD evaluation JSON (default: "
                 "<data_dir>/squad/dev-v<version>.json)."),
                (flags.DEFINE_string, "output_dir", None, "Where the .npz files and "
                 "manifest.json go."),
                (flags.DEFINE_bool, "do_lower_case", None, "Lower-case the text (default: the "
                 "fine-tuning default, true)."),
                (flags.DEFINE_integer, "max_seq_length", None, "Tokens per example (default: "
                 "the fine-tuning default, 128)."),
                (flags.DEFINE_string, "splits", "train,dev", "Comma list of splits (train, dev, "
                 "test; MNLI also dev_matched, dev_mismatched, ...)."),
                (flags.DEFINE_integer, "max_train_examples", None, "Only the first N training "
                 "examples (before double_unordered), as in fine-tuning."),
                (flags.DEFINE_bool, "double_unordered", None, "MRPC/STS-B train splits also hold "
                 "every pair in swapped order (default: the fine-tuning default, true)."),
        ):
            define(name, default, help_text, flag_values=values)
        _CLI_FLAGS = values
    return _CLI_FLAGS


def _split_list(text, flag):
    from finetune.console import UsageError
    items = []
    for item in (text or "").split(","):
        item = item.strip()
        if item and item not in items:
            items.append(item)
    if not items:
        raise UsageError(f"--{flag} is empty")
    return items


def run_splits(task, split, data_dir):
    """The splits a fine-tuning run reads for `split`: MNLI's dev is dev_matched +
    dev_mismatched, its test test_matched + test_mismatched (+ diagnostic, AX, when `data_dir`
    has it); any other split as named."""
    from finetune.glue.splits import glue_eval_splits, glue_predict_splits
    if task == "mnli" and split == "dev":
        return [name for _, name in glue_eval_splits(task)]
    if task == "mnli" and split == "test":
        return [name for _, name in glue_predict_splits(task, data_dir)]
    return [split]


def _read_squad_splits(task, splits, hp, data_dir, train_file, predict_file):
    """[(split, examples, dataset text or None)] of a SQuAD task, read as a fine-tuning run reads
    them (finetune/squad_task.py): training questions whose answer cannot be found dropped, the
    first --max_train_examples; every dev question. SquadFormatError naming a bad file."""
    from finetune import squad_task
    from finetune.console import UsageError
    from finetune.qa import squad_data
    unknown = [s for s in splits if s not in ("train", "dev")]
    if unknown:
        raise UsageError(f"--splits {','.join(unknown)}: SQuAD ({task}) has train and dev")
    default_train, default_dev = squad_task.default_files(task, data_dir)
    out = []
    for split in splits:
        if split == "train":
            path = squad_task.require_file(train_file or default_train, "training",
                                           "train_file")
            examples = squad_data.read_squad_examples(path, is_training=True)
            if hp.max_train_examples:
                examples = examples[:hp.max_train_examples]
            out.append((split, path, examples, None))
        else:
            path = squad_task.require_file(predict_file or default_dev, "evaluation",
                                           "predict_file")
            examples = squad_data.read_squad_examples(path, is_training=False)
            out.append((split, path, examples, fileio.read_text(path)))
    return out


def make_feature_files(task_names, splits, data_dir, vocab_file, output_dir, hp, printer=print,
                       sp_model=None, train_file=None, predict_file=None):
    """Tokenizes every (task, split) into `output_dir` and writes its manifest last; returns the
    manifest. `hp`: FinetuneHParams (do_lower_case, max_seq_length, max_train_examples,
    double_unordered; for SQuAD doc_stride, max_query_length). `sp_model` replaces `vocab_file`
    (a SentencePiece model). Every input is checked (and SQuAD's files read) before anything is
    written."""
    from finetune import feature_files
    from finetune.console import UsageError
    from finetune.glue.readers import read_examples, task_file
    from finetune.glue.splits import load_glue_data
    from finetune.hparams import QA_TASKS
    from data.errors import VocabError

    if data_dir and not fileio.isdir(data_dir):
        raise UsageError(f"{data_dir}: --data_dir not found")
    glue_tasks = [t for t in task_names if t not in QA_TASKS]
    if glue_tasks and not data_dir:
        raise UsageError("--data_dir is required for GLUE tasks")
    blocked = fileio.output_dir_error(output_dir, "--output_dir")
    if blocked:
        raise UsageError(blocked)
    jobs = list(dict.fromkeys((task, name) for task in glue_tasks for split in splits
                              for name in run_splits(task, split, data_dir)))
    for task, split in jobs:
        task_file(data_dir, task, split)      # DataError: unknown split, missing dir or file
    vocab = sp_model or vocab_file
    if not fileio.isfile(vocab):
        raise VocabError(f"{'SentencePiece model' if sp_model else 'vocab file'} {vocab}: "
                         f"not found")
    squad_jobs = [(task, *split) for task in task_names if task in QA_TASKS
                  for split in _read_squad_splits(task, splits, hp, data_dir, train_file,
                                                  predict_file)]
    from data.tokenization import load_tokenizer
    tokenizer = load_tokenizer(None if sp_model else vocab_file, sp_model,
                               do_lower_case=hp.do_lower_case)   # VocabError
    sha = feature_files.vocab_sha256(vocab)

    # A manifest from an earlier run would describe files this run replaces.
    old_manifest = feature_files.manifest_path(output_dir)
    if fileio.isfile(old_manifest):
        fileio.remove(old_manifest)
    files, total_bytes, total_examples = {}, 0, 0

    def done(task, split, entry, size, what="examples"):
        nonlocal total_bytes, total_examples
        files[feature_files.file_key(task, split)] = entry
        total_bytes += size
        total_examples += entry["examples"]
        printer(f"{task} {split}: {entry['examples']} {what}, "
                f"{feature_files.format_size(size)} -> {fileio.join(output_dir, entry['file'])}")

    for task, split in jobs:
        if split == "train":   # exactly as a fine-tuning run reads it
            examples = load_glue_data(task, hp, data_dir, do_train=True, do_eval=False,
                                      do_predict=False).train
        else:
            examples = read_examples(data_dir, task, split)
        arrays = convert_examples_to_features(examples, task, tokenizer, hp.max_seq_length)
        done(task, split, *feature_files.write_features_file(
            output_dir, task, split, arrays, [e.guid for e in examples],
            vocab_size=tokenizer.vocab_size))
    for task, split, path, examples, text in squad_jobs:
        from finetune.qa import squad_data   # the windows of finetune/squad_task.py
        windows = squad_data.convert_examples_to_features(
            examples, tokenizer, hp.max_seq_length, hp.doc_stride, hp.max_query_length,
            is_training=split == "train")
        if split == "train" and not len(windows):
            from finetune.qa.squad_eval import SquadFormatError
            raise SquadFormatError(f"{path}: no training windows (every answer fell outside "
                                   f"the tokenized context?)")
        entry, size = feature_files.write_squad_features_file(
            output_dir, task, split, windows, text, vocab_size=tokenizer.vocab_size)
        done(task, split, entry, size, f"windows of {len(examples)} questions")
    manifest = feature_files.make_manifest(
        files, vocab_file=vocab, vocab_sha256=sha, vocab_size=tokenizer.vocab_size,
        do_lower_case=hp.do_lower_case, max_seq_length=hp.max_seq_length,
        double_unordered=hp.double_unordered, max_train_examples=hp.max_train_examples,
        # What shapes SQuAD's windows; a GLUE-only manifest leaves them out.
        doc_stride=hp.doc_stride if squad_jobs else None,
        max_query_length=hp.max_query_length if squad_jobs else None)
    path = feature_files.write_manifest(output_dir, manifest)
    printer(f"total: {len(files)} files, {total_examples} examples, "
            f"{feature_files.format_size(total_bytes)}; manifest {path}")
    return manifest


def _run_cli():
    from finetune.console import UsageError, say
    from finetune.hparams import QA_TASKS, load_hparams, parse_task_names
    FLAGS = _cli_flags()
    for flag in ("task_names", "output_dir"):
        if not getattr(FLAGS, flag):
            raise UsageError(f"--{flag} is required")
    if FLAGS.vocab_file and FLAGS.sp_model:
        raise UsageError("give --vocab_file or --sp_model, not both")
    if not (FLAGS.vocab_file or FLAGS.sp_model):
        raise UsageError("--vocab_file (or --sp_model) is required")
    tasks = parse_task_names(FLAGS.task_names)
    if not FLAGS.data_dir and (any(t not in QA_TASKS for t in tasks) or not (
            FLAGS.train_file or FLAGS.predict_file)):
        raise UsageError("--data_dir is required")
    splits = _split_list(FLAGS.splits, "splits")
    overrides = {name: getattr(FLAGS, name) for name in
                 ("do_lower_case", "max_seq_length", "max_train_examples", "double_unordered",
                  "doc_stride", "max_query_length")}
    hp = load_hparams(None, **overrides)          # the fine-tuning defaults and checks
    # max_seq_length None -> 128 (GLUE) or 512 (SQuAD): the first task's; one per manifest.
    hp = hp.for_task(tasks[0])
    make_feature_files(tasks, splits, FLAGS.data_dir, FLAGS.vocab_file, FLAGS.output_dir, hp,
                       printer=say, sp_model=FLAGS.sp_model, train_file=FLAGS.train_file,
                       predict_file=FLAGS.predict_file)
    return 0


def _user_error_types():
    """Bad-input classes of the modules loaded so far (see run_finetuning._user_error_types)."""
    import sys
    from finetune.console import UsageError
    types = [UsageError]
    for module, name in (("data.errors", "DataError"), ("finetune.hparams", "HParamsError"),
                         ("base.fileio", "FileIOError"),
                         ("finetune.qa.squad_eval", "SquadFormatError")):
        if module in sys.modules:
            types.append(getattr(sys.modules[module], name))
    return tuple(types)


def _parse_cli_flags(argv):
    """argv -> the arguments absl leaves, or an exit status: 0 after --help (printed), 1 for a
    bad flag (one line `error: ...` on stderr)."""
    import sys
    from absl import flags
    FLAGS = _cli_flags()
    if any(arg in ("-h", "--help", "--helpshort", "--helpfull") for arg in argv[1:]):
        print(CLI_USAGE)
        print(FLAGS.get_help())
        return 0
    try:
        remaining = FLAGS(argv)
    except flags.Error as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(argv[:1])   # absl.logging wants its global registry parsed
    return remaining


def main(argv=None):
    """`python -m finetune.features`: exit status 0, or 1 with one line `error: ...` on
    stderr for a bad flag or input (2 for stray arguments)."""
    import sys
    from base.command import quiet_tensorflow, run_command
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    argv = sys.argv if argv is None else list(argv)
    try:
        remaining = _parse_cli_flags(argv)
        if isinstance(remaining, int):
            return remaining
        if len(remaining) > 1:
            print(f"error: unexpected arguments: {' '.join(remaining[1:])}", file=sys.stderr)
            return 2
        return run_command(lambda _args: _run_cli(), remaining[1:], _user_error_types)
    finally:
        _cli_flags().unparse_flags()   # a second main() in this process starts from defaults


if __name__ == "__main__":
    import sys as _sys
    _sys.exit(main())
