"""GLUE fine-tuning: read a task's files, train its trials, write dev predictions, metrics,
leaderboard files and the paper-style dev table.

    data = load_glue_data("mrpc", hp, data_dir, do_train=True, do_eval=True, do_predict=False)
    sets = tokenize_glue_data(data, tokenizer, hp)         # data: finetune/glue/splits.py
    sets = read_glue_features(features_dir, manifest, "mrpc", hp, True, True, False)  # or this
    finetuner, weights = tensorflow_glue_finetuner("mrpc", hp, source)   # or, on JAX,
    finetuner = Finetuners().get(config, "mrpc", hp)                      # finetune/jax_trainer.py
    run_glue_task("mrpc", hp, sets, finetuner, weights, model_dir, submission={})

`run_glue_task` is the one GLUE trial loop (`glue_trial` one trial of it) for both backends'
finetuners (finetune/finetuner.py): TensorFlow's finetune/trainer.py, Keras-on-JAX's
finetune/jax_trainer.py, the GPU run's (reproduce/gpu_stages.py) and the random-init check's.

Files under `<model_dir>/results/`: `<task>_dev_predictions.tsv`, `<task>_dev_metrics.json`
(suffix `_trial<k>` with several trials, plus `<task>_dev_summary.json`: median and mean ± std),
and with --do_predict the leaderboard TSVs and `glue_submission.zip` under `results/leaderboard/`.
"""
from __future__ import annotations

import json
import os

from base import fileio
from finetune.console import say
from finetune.glue.splits import glue_eval_splits, glue_predict_splits

GLUE_TABLE_COLUMNS = (("cola", "CoLA", "mcc"), ("sst", "SST", "accuracy"),
                      ("mrpc", "MRPC", "accuracy"), ("sts", "STS", "spearman"),
                      ("qqp", "QQP", "accuracy"), ("mnli-m", "MNLI", "accuracy"),
                      ("qnli", "QNLI", "accuracy"), ("rte", "RTE", "accuracy"))


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


class _EncoderWithHead:
    """The encoder's weights plus the head's under `task_specific/<task>/` (official names):
    `ConvBertModel.from_pretrained` reads the encoder and skips the head; elastic/train.py reads
    both (the DynaBERT teacher)."""

    def __init__(self, encoder, head, task):
        self.config, self.encoder, self.head, self.task = encoder.config, encoder, head, task

    def weight_map(self):
        from finetune.finetuner import named_variables
        return named_variables(self.encoder, self.head, self.task)


def save_finetuned_model(encoder, head, task, directory):
    """Encoder + task head as one native checkpoint in `directory`."""
    from model import checkpoints
    return checkpoints.save_pretrained(_EncoderWithHead(encoder, head, task), directory)


def make_glue_head(task, config, dropout_rate=0.1, build=True):
    """ELECTRA's classification / regression head of `task` for an encoder of `config` (built
    with `build`)."""
    from finetune.classification_head import ClassificationHead
    from finetune.glue.tasks import get_task
    spec = get_task(task)
    head = ClassificationHead(spec.num_labels, spec.is_regression, dropout_rate=dropout_rate,
                              initializer_range=config.initializer_range,
                              name=f"{spec.name}_head")
    if build:
        head.build((None, None, config.hidden_size))
    return head


class GlueSets:
    """A task's model inputs, as `convert_examples_to_features` makes them: tokenized from the
    examples (`tokenize_glue_data`) or read from feature files (`read_glue_features`)."""

    def __init__(self, task, train, evals, predicts):
        self.task = task
        self.train = train          # arrays or None (no training)
        self.evals = evals          # [(result key, arrays, guids)]
        self.predicts = predicts    # [(submission stem, arrays, guids)]


def tokenize_glue_data(data, tokenizer, hp):
    """GlueData (examples, finetune/glue/splits.py) -> GlueSets."""
    from finetune.features import convert_examples_to_features as glue_features

    def sets(pairs):
        return [(key, glue_features(examples, data.task, tokenizer, hp.max_seq_length),
                 [e.guid for e in examples]) for key, examples in pairs]

    train = None
    if data.train is not None:
        train = glue_features(data.train, data.task, tokenizer, hp.max_seq_length)
    return GlueSets(data.task, train, sets(data.evals), sets(data.predicts))


def read_glue_features(features_dir, manifest, task, hp, do_train, do_eval, do_predict):
    """GlueSets of `task` from `python -m finetune.features` files (finetune/feature_files.py):
    the splits `load_glue_data` would read, dev sets cut to hp.max_eval_examples as there.
    FeatureFileError naming the manifest for a split it lacks. Needs no TensorFlow."""
    from finetune import feature_files
    where = feature_files.manifest_path(features_dir)

    def load(split):
        return feature_files.load_split(features_dir, task, split, manifest)

    train = None
    if do_train:
        train, _ = load("train")
        if not len(train["input_ids"]):
            raise feature_files.FeatureFileError(f"{where}: no {task} training examples")
    evals = []
    if do_eval:
        for key, split in glue_eval_splits(task):
            arrays, guids = load(split)
            if not guids:
                raise feature_files.FeatureFileError(f"{where}: no {task} {split} examples to "
                                                     f"evaluate")
            if hp.max_eval_examples:
                arrays = {k: v[:hp.max_eval_examples] for k, v in arrays.items()}
                guids = guids[:hp.max_eval_examples]
            evals.append((key, arrays, guids))
    predicts = []
    if do_predict:   # always the whole test split: the leaderboard needs every id
        for stem, split in glue_predict_splits(task, where, manifest):
            predicts.append((stem, *load(split)))
    return GlueSets(task, train, evals, predicts)


def describe_training_set(task, hp, train):
    """'mrpc: 7336 training examples (both sentence orders)'."""
    from finetune.glue.tasks import get_task
    both = hp.double_unordered and get_task(task).unordered_pair
    return (f"{task}: {len(train['input_ids'])} training examples"
            + (" (both sentence orders)" if both else ""))


def write_dev_results(task, key, guids, logits, labels, model_dir, hp, trial, log=say):
    """One trial's predictions on one dev set -> `results/<key>_dev_predictions*.tsv` and
    `_dev_metrics*.json` (finetune/glue/leaderboard.py), logged; returns the metrics."""
    from finetune.glue import leaderboard
    metrics = leaderboard.write_dev_predictions(
        model_dir, key, guids, to_predictions(task, logits), labels,
        trial=trial.record_number(hp.num_trials))
    log(f"{trial.label}: dev {key} " + ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())
        + f" ({len(guids)} examples)")
    return metrics


def write_trials_summaries(model_dir, hp, trial_metrics, log=say):
    """With several trials: `results/<key>_dev_summary.json` per dev set, logged."""
    from finetune.glue import leaderboard
    if hp.num_trials > 1:
        for key, metrics_list in trial_metrics.items():
            if metrics_list:
                summary = leaderboard.write_trials_summary(model_dir, key, metrics_list)
                log(leaderboard.format_summary(key, summary))


def choose_test_predictions(task, hp, trial_metrics, trial_test_preds, submission, log=say):
    """Leaderboard predictions: those of the trial with the best dev score (trial 1 without dev
    results) go into `submission` ({stem: (ids, predictions)}).
    `trial_test_preds`: per trial, [(stem, guids, predictions)]."""
    if not trial_test_preds:
        return
    best = 0
    main_key = glue_eval_splits(task)[0][0]
    if trial_metrics.get(main_key):
        scores = [sum(m.values()) / len(m) for m in trial_metrics[main_key]]
        best = max(range(len(scores)), key=lambda i: scores[i])
    for stem, ids, preds in trial_test_preds[best]:
        submission[stem] = (ids, preds)
    if hp.num_trials > 1:
        log(f"{task}: test predictions from trial {best + 1} (best dev score)")


def tensorflow_glue_finetuner(task, hp, source, log=say):
    """(TensorFlow finetuner, its start weights) of `task` from an encoder source."""
    from finetune.trainer import tensorflow_finetuner
    return tensorflow_finetuner(source, hp, task, lambda config: make_glue_head(task, config),
                                *glue_model_fns(task), log=log)


def glue_trial(task, hp, sets, finetuner, encoder_weights, trial, model_dir, writer=None,
               log=say):
    """One trial of `task` on either backend's finetuner (finetune/finetuner.py): started from
    `encoder_weights`, trained on `sets.train` (None: not trained), each dev set predicted, its
    predictions and metrics written under `model_dir` (`write_dev_results`; model_dir None or a
    process that does not write: computed only) and its dev_<key>/ scalars to `writer`.
    {eval key: (metrics, predictions)} and the steps trained."""
    from finetune.finetuner import train_trial
    from finetune.glue.metrics import compute_metrics
    steps = train_trial(finetuner, trial, encoder_weights, sets.train, hp, writer)
    out = {}
    for key, features, guids in sets.evals:
        logits = finetuner.predict(features, hp.eval_batch_size)["logits"]
        if model_dir is not None and finetuner.writes:
            metrics = write_dev_results(task, key, guids, logits, features["label_ids"],
                                        model_dir, hp, trial, log=log)
            if writer is not None:
                writer.write(metrics, steps, prefix=f"dev_{key}/")
        else:
            metrics = compute_metrics(key, to_predictions(task, logits), features["label_ids"])
        out[key] = (metrics, logits)
    return out, steps


def run_glue_task(task, hp, sets, finetuner, encoder_weights, model_dir, submission=None,
                  log=say):
    """`hp.num_trials` trials of `task` from its GlueSets: the one GLUE trial loop, on either
    backend's finetuner (finetune/finetuner.py; every trial starts from `encoder_weights`, the
    finetuner's own start weights on TensorFlow). Each dev set's predictions and metrics (and the
    trials summary) under `<model_dir>/results/`, each trial's TensorBoard scalars (train/,
    dev_<key>/) under its `trial.log_dir`; the test sets' predictions of the trial with the best
    dev score into `submission` ({stem: (ids, predictions)}); with hp.save_finetuned_model each
    trial's encoder + head under `<model_dir>/finetuned/<task>[_trial<k>]`. With several
    processes all train and predict, the writer alone writes. {eval key: [metrics per trial]}."""
    from finetune.finetuner import trials
    from training.summaries import ScalarWriter
    writes = finetuner.writes
    trial_metrics = {key: [] for key, _, _ in sets.evals}
    trial_test_preds = []
    for trial in trials(hp, task, model_dir):
        writer = ScalarWriter(trial.log_dir if writes else None)
        try:
            dev, _ = glue_trial(task, hp, sets, finetuner, encoder_weights, trial, model_dir,
                                writer, log)
        finally:
            writer.close()
        for key, (metrics, _) in dev.items():
            trial_metrics[key].append(metrics)
        if sets.predicts:   # the eval batch size: the compiled predict step serves both
            trial_test_preds.append([(stem, guids, to_predictions(
                task, finetuner.predict(features, hp.eval_batch_size)["logits"]))
                for stem, features, guids in sets.predicts])
        if hp.save_finetuned_model and writes:
            save_finetuned_model(finetuner.encoder, finetuner.head, task,
                                 os.path.join(model_dir, "finetuned", task + trial.suffix))
    if writes:
        write_trials_summaries(model_dir, hp, trial_metrics, log=log)
        if submission is not None:
            choose_test_predictions(task, hp, trial_metrics, trial_test_preds, submission,
                                    log=log)
    return trial_metrics


def write_glue_submission(submission, model_dir, data_dir):
    """This run's test predictions -> `results/leaderboard/<NAME>.tsv`, then the zip of every
    task's latest file there (earlier runs' included), checked against the test sets under
    `data_dir` (None: not checked; a run from feature files)."""
    from finetune.glue import leaderboard
    out_dir = fileio.join(model_dir, "results", "leaderboard")
    leaderboard.write_submission(out_dir, submission)
    status = leaderboard.make_submission(out_dir, data_dir, allow_partial=True)
    say(describe_submission(status, "no --data_dir" if data_dir is None else None))
    return status.zip_path


def gather_glue_submission(directory, data_dir, allow_partial=False, wnli_majority=False):
    """run_finetuning.py --glue_submission: one zip of every task's latest leaderboard file in
    `directory`, checked against the test sets under `data_dir` (with `wnli_majority` WNLI.tsv
    written first, the train set's majority class: BERT's WNLI submission); what it holds."""
    from finetune.glue import leaderboard
    if wnli_majority:
        leaderboard.write_submission_file(
            fileio.join(directory, "WNLI.tsv"), "wnli",
            *leaderboard.majority_class_predictions(data_dir, "wnli"))
    return describe_submission(leaderboard.make_submission(directory, data_dir,
                                                           allow_partial=allow_partial))


def describe_submission(status, unchecked_because=None):
    """One paragraph: what the zip holds, what was checked, what the server still needs."""
    held = ", ".join(f"{name} ({rows} rows)" for name, rows in status.rows.items())
    text = f"GLUE submission {status.zip_path}: {held}"
    if status.unchecked:
        text += (f"; not checked ({unchecked_because or 'test set not found'}): "
                 f"{', '.join(status.unchecked)}")
    if status.missing:
        text += f"; missing for the server: {', '.join(status.missing)}"
    return text


# ---------------------------------------------------------------------------------- GLUE table
def _median_metrics(results_dir, key):
    path = fileio.join(results_dir, f"{key}_dev_summary.json")
    if fileio.isfile(path):
        summary = json.loads(fileio.read_text(path))["summary"]
        return {m: s["median"] for m, s in summary.items()}, summary
    path = fileio.join(results_dir, f"{key}_dev_metrics.json")
    if fileio.isfile(path):
        return json.loads(fileio.read_text(path))["metrics"], None
    return None, None


def glue_table(model_dir) -> str:
    """The ELECTRA/ConvBERT dev table: one metric per task (median over trials) and the mean."""
    from finetune.glue.metrics import glue_score
    results_dir = fileio.join(model_dir, "results")
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
