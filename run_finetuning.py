"""Fine-tune ConvBERT on GLUE and SQuAD (ELECTRA/ConvBERT recipe).

    python run_finetuning.py --data_dir ../shared/data/glue --task_names mrpc,rte \
        --init_checkpoint models/convbert_small --vocab_file vocab.txt \
        --model_dir out/glue_small --model_size small --num_trials 9

Tasks: cola, sst, mrpc, sts, qqp, mnli, qnli, rte, wnli (GLUE layout
`<data_dir>/<TASK>/{train,dev,test}.tsv`), squad (SQuAD 2.0) and squadv1 (SQuAD 1.1; files
`<data_dir>/squad/{train,dev}-v{2.0,1.1}.json` or --train_file / --predict_file).

Writes under `<model_dir>/results/`: `<task>_dev_predictions.tsv` (index, prediction, label) and
`<task>_dev_metrics.json` per task (suffix `_trial<k>` with --num_trials > 1, plus
`<task>_dev_summary.json`: median and mean ± std per metric); with --do_predict the GLUE
leaderboard files and `glue_submission.zip` under `results/leaderboard/`; for SQuAD
`<task>_predictions.json`, `<task>_nbest_predictions.json`, `<task>_null_odds.json` (v2.0) and
`<task>_metrics.json`. TensorBoard logs go to `<model_dir>/tensorboard/`.

Hyper-parameters: the official defaults per --model_size (finetune/hparams.py), then --hparams
(JSON string or file; unknown keys are an error), then explicit flags. Bad input (missing task
directory, malformed TSV row, unknown label or task) stops with a one-line error naming the file.
"""
from __future__ import annotations

import glob
import functools
import json
import os
import sys

from absl import app, flags

# Our own flag registry, not absl's global one: run_pretraining.py defines flags of the same names
# (model_size, seed, ...), and both drivers must be importable in one process (tests, notebooks).
FLAGS = flags.FlagValues()


class _Flags:
    """`flags.DEFINE_*` bound to this driver's registry."""

    def __getattr__(self, name):
        return functools.partial(getattr(flags, name), flag_values=FLAGS)


_flags = _Flags()

_flags.DEFINE_string("data_dir", None, "GLUE data dir (<data_dir>/<TASK>/{train,dev,test}.tsv); "
                    "SQuAD files are looked up in <data_dir>/squad/ (or <data_dir>/).")
_flags.DEFINE_string("task_names", None, "Comma list: cola,sst,mrpc,sts,qqp,mnli,qnli,rte,wnli,"
                    "squad (SQuAD 2.0),squadv1 (SQuAD 1.1).")
_flags.DEFINE_string("init_checkpoint", None, "Pre-training model_dir, native export, official TF1 "
                    "checkpoint or Hugging Face ConvBERT dir. None: random weights (WARNING).")
_flags.DEFINE_string("model_size", None, "small, medium-small or base (default: small). Sets the "
                    "learning rate and, without a checkpoint, the architecture.")
_flags.DEFINE_string("vocab_file", None, "WordPiece vocab (BERT uncased). Default: vocab.txt next "
                    "to the checkpoint.")
_flags.DEFINE_string("model_dir", None, "Output directory (results/, tensorboard/).")
_flags.DEFINE_string("hparams", None, "JSON object or path to a JSON file of hparams "
                    "(finetune/hparams.py); unknown keys are an error.")
_flags.DEFINE_integer("num_trials", None, "Fine-tuning runs per task (the papers report the "
                     "median of 9 for GLUE). Default 1.")
_flags.DEFINE_integer("seed", None, "Random seed of the first trial (trial k uses seed + k - 1).")
_flags.DEFINE_bool("do_train", True, "Fine-tune on the train split.")
_flags.DEFINE_bool("do_eval", True, "Evaluate on the dev split and write dev predictions/metrics.")
_flags.DEFINE_bool("do_predict", False, "Predict the test split(s) and write leaderboard files.")
_flags.DEFINE_integer("max_seq_length", None, "Default 128 (512 for SQuAD).")
_flags.DEFINE_integer("train_batch_size", None, "Default 32.")
_flags.DEFINE_float("num_train_epochs", None, "Default 3 (RTE/STS-B 10, SQuAD 2).")
_flags.DEFINE_integer("max_train_steps", None, "Cap on training steps (smoke tests).")
_flags.DEFINE_float("learning_rate", None, "Peak learning rate (default 3e-4 small/medium-small, "
                   "1e-4 base).")
_flags.DEFINE_string("train_file", None, "SQuAD training JSON (overrides the data_dir default).")
_flags.DEFINE_string("predict_file", None, "SQuAD evaluation JSON (overrides the data_dir default).")
_flags.DEFINE_bool("print_glue_table", False, "Only print the GLUE dev table (medians over trials) "
                  "from <model_dir>/results and exit.")

GLUE_TABLE_COLUMNS = (("cola", "CoLA", "mcc"), ("sst", "SST", "accuracy"),
                      ("mrpc", "MRPC", "accuracy"), ("sts", "STS", "spearman"),
                      ("qqp", "QQP", "accuracy"), ("mnli-m", "MNLI", "accuracy"),
                      ("qnli", "QNLI", "accuracy"), ("rte", "RTE", "accuracy"))
QA_TASKS = ("squad", "squadv1")
PRETRAIN_SEQ_KEYS = ("trained_max_seq_length", "max_seq_length")
PRETRAIN_RECORD_FILES = ("hparams.json", "pretrain_config.json")


class UsageError(ValueError):
    """Bad flags / paths (one-line message)."""


def say(msg: str):
    print(msg, flush=True)


def warn(msg: str):
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- tasks
def parse_task_names(text):
    from finetune.glue.tasks import DataError, normalize_task_name
    if not text:
        raise UsageError("--task_names is required (e.g. --task_names mrpc,rte or squad)")
    names = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        key = raw.lower().replace("-", "").replace("_", "")
        if key in ("squad", "squad2", "squadv2", "squadv20", "squad20"):
            name = "squad"
        elif key in ("squadv1", "squad1", "squadv11", "squad11"):
            name = "squadv1"
        else:
            try:
                name = normalize_task_name(raw)
            except DataError:
                raise DataError(f"unknown task name {raw!r} in --task_names; known: cola, sst, "
                                f"mrpc, sts, qqp, mnli, qnli, rte, wnli, squad, squadv1") from None
            if name == "ax":
                raise DataError("task 'ax' (the GLUE diagnostic) is predicted with the MNLI "
                                "model: use --task_names mnli --do_predict")
        if name not in names:
            names.append(name)
    if not names:
        raise UsageError("--task_names is empty")
    return names


# ---------------------------------------------------------------------------------- checkpoint
class EncoderSource:
    """Where encoder weights come from: a checkpoint (read once) or random init."""

    def __init__(self, init_checkpoint, hp):
        from model import ConvBertConfig
        from model import checkpoints
        self.path = init_checkpoint
        overrides = dict(hp.model_hparam_overrides)
        if init_checkpoint:
            self.format, saved, self.tensors = checkpoints.resolve_checkpoint(init_checkpoint)
            self.config = saved.replace(**overrides) if overrides else saved
            self.config.validate()
        else:
            self.format, self.tensors = None, None
            self.config = ConvBertConfig.from_size(hp.model_size, **overrides)

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
        if os.path.isdir(path):
            for sub in ("discriminator", "export/discriminator"):
                if (not os.path.exists(os.path.join(path, "convbert_config.json"))
                        and os.path.exists(os.path.join(path, sub, "convbert_config.json"))):
                    return os.path.join(path, sub)
            return path
        return os.path.dirname(path) or "."

    def trained_max_seq_length(self):
        """(max_seq_length, file) recorded by a pre-training run: a top-level JSON key in the
        checkpoint dir or its parents, e.g. the `<model_dir>/hparams.json` that
        pretrain/trainer.py writes ({"max_seq_length": 128, ...}); None if unknown."""
        directory = self.resolved_dir()
        if directory is None:
            return None
        candidates = []
        for d in (directory, os.path.dirname(os.path.abspath(directory)),
                  os.path.dirname(os.path.dirname(os.path.abspath(directory)))):
            # pretrain/trainer.py writes <model_dir>/hparams.json (with max_seq_length).
            known = [os.path.join(d, name) for name in PRETRAIN_RECORD_FILES]
            candidates += [p for p in known if os.path.isfile(p)]
            candidates += [p for p in sorted(glob.glob(os.path.join(d, "*.json")))
                           if p not in known]
        for path in candidates:
            if os.path.basename(path) in ("config.json",):
                continue  # HF model config: max_position_embeddings, not the trained length
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
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


def find_vocab_file(vocab_flag, init_checkpoint):
    if vocab_flag:
        if not os.path.isfile(vocab_flag):
            raise UsageError(f"{vocab_flag}: vocab file not found")
        return vocab_flag
    if init_checkpoint:
        base = init_checkpoint if os.path.isdir(init_checkpoint) else os.path.dirname(
            init_checkpoint)
        parent = os.path.dirname(os.path.abspath(base))
        for d in (base, os.path.join(base, "discriminator"), parent):
            for name in ("vocab.txt", "bert-uncased-vocab.txt"):
                path = os.path.join(d, name)
                if os.path.isfile(path):
                    return path
    raise UsageError("--vocab_file is required (the BERT uncased vocab.txt); none was found "
                     "next to --init_checkpoint")


# ---------------------------------------------------------------------------------------- GLUE
def glue_eval_splits(task):
    return [("mnli-m", "dev_matched"), ("mnli-mm", "dev_mismatched")] if task == "mnli" \
        else [(task, "dev")]


def glue_predict_splits(task, data_dir):
    from finetune.glue.leaderboard import SUBMISSION_FILES
    if task == "mnli":
        splits = [("MNLI-m", "test_matched"), ("MNLI-mm", "test_mismatched")]
        if os.path.isfile(os.path.join(data_dir, "diagnostic", "diagnostic.tsv")):
            splits.append(("AX", "diagnostic"))
        else:
            warn(f"{data_dir}/diagnostic/diagnostic.tsv not found: no AX predictions")
        return splits
    stem = [s for s, (t, _) in SUBMISSION_FILES.items() if t == task][0]
    return [(stem, "test")]


def glue_features(examples, task, tokenizer, max_seq_length):
    from finetune.features import convert_examples_to_features
    return convert_examples_to_features(examples, task, tokenizer, max_seq_length)


def glue_model_fns(task):
    """(forward_fn, loss_fn) for a GLUE task."""
    from finetune.classification_head import (classification_loss, normalize_regression_label,
                                              regression_loss)
    from finetune.glue.tasks import get_task
    spec = get_task(task)

    def forward(encoder, head, batch, training):
        h = encoder({"input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                     "segment_ids": batch["segment_ids"]}, training=training)
        return {"logits": head(h, training=training)}

    def loss(outputs, batch):
        if spec.is_regression:
            target = normalize_regression_label(batch["label_ids"], spec.min_value, spec.max_value)
            return regression_loss(outputs["logits"], target)
        return classification_loss(outputs["logits"], batch["label_ids"])

    return forward, loss


def to_predictions(task, logits):
    """Label ids (classification) or label-scale scores (regression) from head outputs."""
    import numpy as np
    from finetune.classification_head import denormalize_regression_output
    from finetune.glue.tasks import get_task
    spec = get_task(task)
    if spec.is_regression:
        return denormalize_regression_output(np.asarray(logits, np.float64), spec.min_value,
                                             spec.max_value)
    return np.argmax(logits, axis=-1)


class GlueData:
    """The examples of one GLUE task, read (and checked) before any model work."""

    def __init__(self, task, train, evals, predicts):
        self.task = task
        self.train = train          # [InputExample] or None
        self.evals = evals          # [(result key, [InputExample])]
        self.predicts = predicts    # [(submission stem, [InputExample])]


def load_glue_data(task, hp, data_dir, do_train, do_eval, do_predict):
    """Reads every file the run needs; DataError (file + line) on bad input."""
    from finetune.glue.readers import add_swapped_pairs, read_examples, task_file
    from finetune.glue.tasks import DataError, get_task
    spec = get_task(task)
    train = None
    if do_train:
        train = read_examples(data_dir, task, "train")
        if not train:
            raise DataError(f"{task_file(data_dir, task, 'train')}: no training examples")
        if hp.max_train_examples:
            train = train[:hp.max_train_examples]
        if hp.double_unordered and spec.unordered_pair:
            train = add_swapped_pairs(train)
    evals = []
    if do_eval:
        for key, split in glue_eval_splits(task):
            examples = read_examples(data_dir, task, split)
            if not examples:
                raise DataError(f"{task_file(data_dir, task, split)}: no examples to evaluate")
            if hp.max_eval_examples:
                examples = examples[:hp.max_eval_examples]
            evals.append((key, examples))
    predicts = []
    if do_predict:   # always the whole test file: the leaderboard needs every id
        for stem, split in glue_predict_splits(task, data_dir):
            predicts.append((stem, read_examples(data_dir, task, split)))
    return GlueData(task, train, evals, predicts)


def run_glue_task(task, hp, data, source, tokenizer, model_dir, submission):
    from finetune.classification_head import ClassificationHead
    from finetune.glue import leaderboard
    from finetune.glue.tasks import get_task
    from finetune.trainer import Trainer, trials

    spec = get_task(task)
    check_sequence_length(source, hp.max_seq_length, task)
    do_train = data.train is not None
    train_features = None
    if do_train:
        train_features = glue_features(data.train, task, tokenizer, hp.max_seq_length)
        say(f"{task}: {len(data.train)} training examples"
            + (" (both sentence orders)" if hp.double_unordered and spec.unordered_pair else ""))
    eval_sets = [(key, examples, glue_features(examples, task, tokenizer, hp.max_seq_length))
                 for key, examples in data.evals]
    predict_sets = [(stem, examples, glue_features(examples, task, tokenizer, hp.max_seq_length))
                    for stem, examples in data.predicts]

    forward, loss = glue_model_fns(task)
    trial_metrics = {key: [] for key, _, _ in eval_sets}
    trial_test_preds = []
    for trial in trials(hp, task, model_dir):
        if trial.number == 1:
            encoder = source.build()
            head = ClassificationHead(spec.num_labels, spec.is_regression,
                                      dropout_rate=0.1,
                                      initializer_range=encoder.config.initializer_range,
                                      name=f"{task}_head")
            head.build((None, None, encoder.config.hidden_size))
            named = dict(encoder.weight_map())
            named.update(head.weight_map(prefix=f"task_specific/{task}/"))
            trainer = Trainer(encoder, head, forward, loss, hp, task, named, log_dir=trial.log_dir,
                              trial_label=trial.label, printer=say)
            initial_weights = source.initial_weights(encoder)
        else:   # same variables, so the traced train/predict steps are reused
            trainer.start_trial(initial_weights, trial.log_dir, trial.label)
        steps = trainer.train_epochs(train_features, seed=trial.seed)
        for key, examples, features in eval_sets:
            logits = trainer.predict(features, ["logits"])["logits"]
            preds = to_predictions(task, logits)
            labels = features["label_ids"]
            metrics = leaderboard.write_dev_predictions(
                model_dir, key, [e.guid for e in examples], preds, labels,
                trial=trial.record_number(hp.num_trials))
            trial_metrics[key].append(metrics)
            trainer.write_scalars(f"dev_{key}", metrics, steps)
            say(f"{trial.label}: dev {key} " + ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())
                + f" ({len(examples)} examples)")
        if predict_sets:
            trial_test_preds.append([(stem, [e.guid for e in ex],
                                      to_predictions(task, trainer.predict(f, ["logits"])
                                                     ["logits"]))
                                     for stem, ex, f in predict_sets])
        if hp.save_finetuned_model:
            encoder.save_pretrained(os.path.join(model_dir, "finetuned", task + trial.suffix))
    # Trial summaries.
    if hp.num_trials > 1:
        for key, metrics_list in trial_metrics.items():
            if metrics_list:
                summary = leaderboard.write_trials_summary(model_dir, key, metrics_list)
                say(leaderboard.format_summary(key, summary))
    # Leaderboard predictions: the trial with the best dev score (trial 1 without dev results).
    if trial_test_preds:
        best = 0
        main_key = glue_eval_splits(task)[0][0]
        if trial_metrics.get(main_key):
            scores = [sum(m.values()) / len(m) for m in trial_metrics[main_key]]
            best = max(range(len(scores)), key=lambda i: scores[i])
        for stem, ids, preds in trial_test_preds[best]:
            submission[stem] = (ids, preds)
        if hp.num_trials > 1:
            say(f"{task}: test predictions from trial {best + 1} (best dev score)")
    return trial_metrics


def write_glue_submission(submission, model_dir, data_dir):
    from finetune.glue import leaderboard
    out_dir = os.path.join(model_dir, "results", "leaderboard")
    zip_path = leaderboard.write_submission(out_dir, submission)
    rows = leaderboard.validate_submission(out_dir, data_dir, require_all=False)
    say(f"leaderboard files: {', '.join(sorted(rows))} -> {zip_path} (validated against the "
        f"test files; the GLUE server wants all {len(leaderboard.SUBMISSION_FILES)} files)")
    return zip_path


# ---------------------------------------------------------------------------------- GLUE table
def _median_metrics(results_dir, key):
    path = os.path.join(results_dir, f"{key}_dev_summary.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)["summary"]
        return {m: s["median"] for m, s in summary.items()}, summary
    path = os.path.join(results_dir, f"{key}_dev_metrics.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)["metrics"], None
    return None, None


def glue_table(model_dir) -> str:
    """The ELECTRA/ConvBERT dev table: one metric per task (median over trials) and the mean."""
    from finetune.glue.metrics import glue_score
    results_dir = os.path.join(model_dir, "results")
    header, values, results = [], [], {}
    for key, title, metric in GLUE_TABLE_COLUMNS:
        metrics, summary = _median_metrics(results_dir, key)
        header.append(title)
        if metrics is None:
            values.append("-")
            continue
        results[key] = metrics
        cell = f"{metrics[metric]:.1f}"
        if summary is not None:
            s = summary[metric]
            cell += f" ({s['mean']:.1f}±{s['std']:.1f}, n={s['n']})"
        values.append(cell)
    header.append("Avg")
    values.append(f"{glue_score(results, style='paper'):.1f}" if results else "-")
    widths = [max(len(h), len(v)) for h, v in zip(header, values)]
    lines = ["GLUE dev (median over trials; CoLA MCC, STS-B Spearman, accuracy otherwise; "
             "Avg over the tasks present, WNLI excluded)",
             "  ".join(h.rjust(w) for h, w in zip(header, widths)),
             "  ".join(v.rjust(w) for v, w in zip(values, widths))]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- main
def collect_flag_overrides():
    names = ("model_size", "num_trials", "seed", "max_seq_length", "train_batch_size",
             "num_train_epochs", "max_train_steps", "learning_rate")
    return {n: getattr(FLAGS, n) for n in names if getattr(FLAGS, n) is not None}


def run(argv=None):
    from finetune.hparams import load_hparams
    if FLAGS.print_glue_table:
        if not FLAGS.model_dir:
            raise UsageError("--print_glue_table needs --model_dir")
        say(glue_table(FLAGS.model_dir))
        return 0
    if not FLAGS.model_dir:
        raise UsageError("--model_dir is required")
    tasks = parse_task_names(FLAGS.task_names)
    base_hp = load_hparams(FLAGS.hparams, **collect_flag_overrides())
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise UsageError("nothing to do: set --do_train, --do_eval or --do_predict")
    glue_tasks = [t for t in tasks if t not in QA_TASKS]
    data_dir = FLAGS.data_dir
    if glue_tasks and not data_dir:
        raise UsageError("--data_dir is required for GLUE tasks")
    if data_dir and not os.path.isdir(data_dir):
        raise UsageError(f"{data_dir}: --data_dir not found")

    init = FLAGS.init_checkpoint
    if init and not (os.path.exists(init) or os.path.exists(init + ".index")):
        raise UsageError(f"{init}: --init_checkpoint not found")
    vocab_file = find_vocab_file(FLAGS.vocab_file, init)
    # Read (and check) every input file before building anything.
    task_data = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        if task in QA_TASKS:
            from finetune import squad_task
            task_data[task] = squad_task.load_squad_data(
                task, hp, data_dir, FLAGS.train_file, FLAGS.predict_file, FLAGS.do_train,
                FLAGS.do_eval or FLAGS.do_predict)
        else:
            task_data[task] = load_glue_data(task, hp, data_dir, FLAGS.do_train, FLAGS.do_eval,
                                             FLAGS.do_predict)

    import keras
    if keras.backend.backend() != "tensorflow":
        raise UsageError(f"run_finetuning.py needs the TensorFlow Keras backend (tf.data + "
                         f"tf.function); KERAS_BACKEND is {keras.backend.backend()!r}")
    from data.tokenization import Tokenizer
    tokenizer = Tokenizer(vocab_file, do_lower_case=base_hp.do_lower_case)
    source = EncoderSource(FLAGS.init_checkpoint, base_hp)
    if source.tensors is None:
        warn("no --init_checkpoint: fine-tuning from RANDOM weights (model_size "
             f"{base_hp.model_size}); results only check that the pipeline runs")
    else:
        say(f"encoder: {source.format} checkpoint {FLAGS.init_checkpoint} "
            f"({source.config.num_hidden_layers} layers, hidden {source.config.hidden_size})")
    if tokenizer.vocab_size > source.config.vocab_size:
        raise UsageError(f"{vocab_file}: {tokenizer.vocab_size} tokens but the model has only "
                         f"{source.config.vocab_size} word embeddings")

    os.makedirs(os.path.join(FLAGS.model_dir, "results"), exist_ok=True)
    with open(os.path.join(FLAGS.model_dir, "finetune_hparams.json"), "w", encoding="utf-8") as f:
        json.dump({"hparams": base_hp.to_dict(), "tasks": tasks,
                   "init_checkpoint": FLAGS.init_checkpoint, "vocab_file": vocab_file,
                   "model_config": source.config.to_dict()}, f, indent=2, sort_keys=True)

    submission = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        if task in QA_TASKS:
            from finetune import squad_task
            squad_task.run_squad_task(task, hp, task_data[task], source, tokenizer,
                                      FLAGS.model_dir, check_seq=check_sequence_length,
                                      printer=say)
        else:
            run_glue_task(task, hp, task_data[task], source, tokenizer, FLAGS.model_dir,
                          submission)
    if submission:
        write_glue_submission(submission, FLAGS.model_dir, data_dir)
    if len(glue_tasks) > 1 and FLAGS.do_eval:
        say(glue_table(FLAGS.model_dir))
    return 0


_ERROR_TYPES = (("data.errors", "DataError"), ("finetune.hparams", "HParamsError"),
                ("finetune.qa.squad_eval", "SquadFormatError"),
                ("model.checkpoints", "CheckpointError"), ("model.config", "ConfigError"))


def _user_error_types():
    """Bad-input error classes of the modules loaded so far (importing them all up front would
    load TensorFlow before a cheap check such as an unknown task name)."""
    types = [UsageError, FloatingPointError]
    for module, name in _ERROR_TYPES:
        if module in sys.modules:
            types.append(getattr(sys.modules[module], name))
    return tuple(types)


def parse_flags(argv):
    """absl's parser for this driver's registry; --help prints its flags."""
    if any(arg in ("-h", "--help", "--helpshort", "--helpfull") for arg in argv[1:]):
        print(__doc__)
        print(FLAGS.get_help())
        sys.exit(0)
    try:
        remaining = FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"ERROR: {e}")
    flags.FLAGS(argv[:1])  # absl's app insists its global registry is parsed too
    return remaining


def main(argv):
    if len(argv) > 1:
        print(f"ERROR: unexpected arguments: {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(2)
    try:
        code = run(argv)
    except Exception as e:  # noqa: BLE001 -- user errors become one line, the rest propagate
        if not isinstance(e, _user_error_types()):
            raise
        message = " ".join(str(e).split())
        print(f"ERROR: {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
