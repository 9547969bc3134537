"""SQuAD v1.1 / v2.0 fine-tuning: the QA pieces of finetune/qa wired into the trainer.

* data: `squad_data.read_squad_examples` + `convert_examples_to_features` (sliding windows of
  max_seq_length with doc_stride, questions cut to max_query_length);
* model: ConvBERT encoder + `qa_head.ElectraQAHead` (joint start/end beam, answerability
  classifier) trained with `qa_head.qa_loss`;
* outputs under `<model_dir>/results/`: `<task>_predictions.json`, `<task>_nbest_predictions.json`,
  for v2.0 `<task>_null_odds.json` and `<task>_leaderboard_predictions.json` (null threshold
  applied), and `<task>_metrics.json` (official EM/F1; v2.0 with the null odds at
  `qa_na_threshold`, plus best_exact/best_f1). With several trials the files get `_trial<k>`
  after the task name and `<task>_summary.json` has median and mean ± std per metric.

The windows come from tokenizing the JSON here (`tokenize_squad_data`) or from feature files
(`read_squad_features`, `python -m finetune.features`); `run_squad_task`, the one SQuAD trial
loop, trains them on either backend's finetuner (TensorFlow's from `tensorflow_squad_finetuner`
here, finetune/jax_trainer.py's `JaxQAFinetuner`; their contract: finetune/finetuner.py) and
writes the results through `write_trial_results` / `write_summary`.

Task names: "squad" = SQuAD 2.0 (ELECTRA's name), "squadv1" = SQuAD 1.1.
"""
from __future__ import annotations

import json

from base import fileio

VERSIONS = {"squad": "2.0", "squadv1": "1.1"}
BEAM_KEYS = ("start_top_index", "start_top_log_probs", "end_top_index", "end_top_log_probs")


def default_files(task, data_dir):
    """(train_file, predict_file) under <data_dir>/squad/ (or <data_dir>/)."""
    version = VERSIONS[task]
    if not data_dir:
        return None, None
    for d in (fileio.join(data_dir, "squad"), fileio.norm(data_dir)):
        dev = fileio.join(d, f"dev-v{version}.json")
        train = fileio.join(d, f"train-v{version}.json")
        if fileio.exists(dev) or fileio.exists(train):
            return train, dev
    return (fileio.join(data_dir, "squad", f"train-v{version}.json"),
            fileio.join(data_dir, "squad", f"dev-v{version}.json"))


def require_file(path, what, flag):
    """`path`, or SquadFormatError saying which flag gives it (none given, or not a file)."""
    from finetune.qa.squad_eval import SquadFormatError
    if not path:
        raise SquadFormatError(f"no SQuAD {what} file: give --{flag} or --data_dir")
    if not fileio.isfile(path):
        raise SquadFormatError(f"{path}: SQuAD {what} file not found (give --{flag})")
    return path


def uses_answerable_classifier(hp, version):
    """SQuAD 1.1 has no unanswerable questions: ELECTRA's answerability classifier is v2.0 only."""
    return bool(hp.answerable_classifier) and version == "2.0"


def make_head(hp, config, version, name="squad_head"):
    from finetune.qa.qa_head import ElectraQAHead
    head = ElectraQAHead(beam_size=hp.beam_size, qa_hidden_size=hp.qa_hidden_size,
                         joint_prediction=hp.joint_prediction,
                         answerable_classifier=uses_answerable_classifier(hp, version),
                         answerable_uses_start_logits=hp.answerable_uses_start_logits,
                         hidden_act=config.hidden_act, initializer_range=config.initializer_range,
                         name=name)
    head.build((None, None, config.hidden_size))
    return head


def model_fns(hp, version):
    """(forward_fn, loss_fn, output_keys) for the trainer."""
    from finetune.qa.qa_head import qa_loss
    use_answerable = uses_answerable_classifier(hp, version)

    def forward(encoder, head, batch, training):
        h = encoder({"input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                     "segment_ids": batch["segment_ids"]}, training=training)
        if training:
            return head(h, batch["input_mask"], batch["segment_ids"],
                        start_positions=batch["start_positions"], training=True)
        return head(h, batch["input_mask"], batch["segment_ids"], training=False,
                    return_beam=True)

    def loss(outputs, batch):
        return qa_loss(outputs, batch, answerable_weight=hp.answerable_weight
                       if use_answerable else 0.0)

    if hp.joint_prediction:
        keys = list(BEAM_KEYS)
    else:
        keys = ["start_logits", "end_logits"]
    if use_answerable:
        keys.append("answerable_logit")
    return forward, loss, keys


def _numeric(metrics):
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def evaluate(version, dataset_json, predictions, null_odds, threshold):
    from finetune.qa import squad_eval
    dataset = squad_eval.validate_dataset(dataset_json)
    quiet = lambda msg: None  # noqa: E731 -- missing predictions are expected with a subset
    if version == "1.1":
        return dict(squad_eval.evaluate_v1(dataset, predictions, log=quiet))
    return dict(squad_eval.evaluate_v2(dataset, predictions, null_odds, threshold, log=quiet))


def _subset_dataset(dataset_json, qids):
    """The dataset restricted to questions `qids` (evaluation on a --max_eval_examples subset)."""
    data = []
    for article in dataset_json["data"]:
        paragraphs = []
        for p in article["paragraphs"]:
            qas = [qa for qa in p["qas"] if qa["id"] in qids]
            if qas:
                paragraphs.append(dict(p, qas=qas))
        if paragraphs:
            data.append(dict(article, paragraphs=paragraphs))
    return dict(dataset_json, data=data)


class SquadData:
    """The examples of one SQuAD task, read (and checked) before any model work."""

    def __init__(self, task, train_file, predict_file, train_examples, eval_examples,
                 dataset_json):
        self.task, self.train_file, self.predict_file = task, train_file, predict_file
        self.train_examples, self.eval_examples = train_examples, eval_examples
        self.dataset_json = dataset_json


def load_squad_data(task, hp, data_dir, train_file, predict_file, do_train, do_eval):
    """Reads the training / evaluation files (SquadFormatError naming the file when bad)."""
    from finetune.qa import squad_data
    from finetune.qa.squad_eval import SquadFormatError
    default_train, default_dev = default_files(task, data_dir)
    train_file = train_file or default_train
    predict_file = predict_file or default_dev
    train_examples = eval_examples = dataset_json = None
    if do_train:
        train_file = require_file(train_file, "training", "train_file")
        train_examples = squad_data.read_squad_examples(train_file, is_training=True)
        if hp.max_train_examples:
            train_examples = train_examples[:hp.max_train_examples]
        if not train_examples:
            raise SquadFormatError(f"{train_file}: no usable training questions")
    if do_eval:
        predict_file = require_file(predict_file, "evaluation", "predict_file")
        eval_examples = squad_data.read_squad_examples(predict_file, is_training=False)
        # valid JSON: read_squad_examples checked it
        dataset_json = json.loads(fileio.read_text(predict_file))
        if hp.max_eval_examples:
            eval_examples = eval_examples[:hp.max_eval_examples]
            dataset_json = _subset_dataset(dataset_json, {e.qas_id for e in eval_examples})
        if not eval_examples:
            raise SquadFormatError(f"{predict_file}: no questions to evaluate")
    return SquadData(task, train_file, predict_file, train_examples, eval_examples,
                     dataset_json)


class SquadSets:
    """The windows of one SQuAD task, tokenized here (`tokenize_squad_data`) or read from feature
    files (`read_squad_features`): `train` the model inputs with labels (None: no training),
    `evals` None or (examples, SquadFeatures, dataset JSON the metrics are computed on),
    `predict_file` what the metrics record names."""

    def __init__(self, task, train, evals, predict_file):
        self.task, self.train, self.evals, self.predict_file = task, train, evals, predict_file


def tokenize_squad_data(task, hp, data, tokenizer, printer=print):
    """SquadSets of `data` (SquadData): sliding windows of max_seq_length with doc_stride,
    questions cut to max_query_length."""
    from finetune.qa import squad_data
    train = evals = None
    if data.train_examples is not None:
        examples = data.train_examples
        feats = squad_data.convert_examples_to_features(
            examples, tokenizer, hp.max_seq_length, hp.doc_stride, hp.max_query_length,
            is_training=True)
        if len(feats) == 0:
            from finetune.qa.squad_eval import SquadFormatError
            raise SquadFormatError(f"{data.train_file}: no training windows (every answer "
                                   f"fell outside the tokenized context?)")
        train = feats.model_inputs(with_labels=True)
        printer(f"{task}: {len(examples)} training questions -> {len(feats)} windows "
                f"({data.train_file})")
    if data.eval_examples is not None:
        examples = data.eval_examples
        feats = squad_data.convert_examples_to_features(
            examples, tokenizer, hp.max_seq_length, hp.doc_stride, hp.max_query_length,
            is_training=False)
        evals = (examples, feats, data.dataset_json)
        printer(f"{task}: {len(examples)} evaluation questions -> {len(feats)} windows "
                f"({data.predict_file})")
    return SquadSets(task, train, evals, data.predict_file)


def read_squad_features(features_dir, manifest, task, hp, do_train, do_eval, printer=print):
    """SquadSets of `task` from `python -m finetune.features` files (finetune/feature_files.py),
    the dev questions cut to hp.max_eval_examples as `load_squad_data` cuts them (their windows
    are the first ones: windows follow their questions). Needs no TensorFlow."""
    from finetune import feature_files
    from finetune.qa import squad_data
    where = feature_files.manifest_path(features_dir)
    train = evals = predict_file = None
    if do_train:
        feats, _ = feature_files.load_squad_split(features_dir, task, "train", manifest)
        if not len(feats):
            raise feature_files.FeatureFileError(f"{where}: no {task} training windows")
        train = feats.model_inputs(with_labels=True)
        printer(f"{task}: {len(feats)} training windows ({features_dir})")
    if do_eval:
        feats, dataset = feature_files.load_squad_split(features_dir, task, "dev", manifest,
                                                        with_dataset=True)
        entry = manifest["files"][feature_files.file_key(task, "dev")]
        path = fileio.join(features_dir, entry["file"])
        examples = squad_data.read_squad_examples(dataset, is_training=False)
        if len(feats) and int(feats.example_index.max()) >= len(examples):
            raise feature_files.FeatureFileError(
                f"{path}: windows point at question {int(feats.example_index.max())} of "
                f"{len(examples)}")
        if hp.max_eval_examples:
            examples = examples[:hp.max_eval_examples]
            feats = feats.select(feats.example_index < len(examples))
            dataset = _subset_dataset(dataset, {e.qas_id for e in examples})
        if not examples:
            raise feature_files.FeatureFileError(f"{path}: no questions to evaluate")
        evals = (examples, feats, dataset)
        predict_file = path
        printer(f"{task}: {len(examples)} evaluation questions -> {len(feats)} windows "
                f"({path})")
    return SquadSets(task, train, evals, predict_file)


def write_trial_results(task, hp, sets, results, model_dir, trial, steps, printer=print):
    """One trial's head outputs on the dev windows -> `results/<task>[_trial<k>]_predictions.json`,
    `_nbest_predictions.json`, for v2.0 `_null_odds.json` and `_leaderboard_predictions.json`,
    and `_metrics.json` (official EM/F1); returns the numeric metrics. Both backends write
    through here."""
    from finetune.qa import postprocess
    version = VERSIONS[task]
    examples, feats, dataset_json = sets.evals
    results_dir = fileio.join(model_dir, "results")
    prefix = f"{task}{trial.suffix}_"
    paths = postprocess.write_predictions(
        examples, feats, results, results_dir, version_2_with_negative=version == "2.0",
        n_best_size=hp.n_best_size, max_answer_length=hp.max_answer_length,
        null_threshold=hp.qa_na_threshold, prefix=prefix)
    predictions = json.loads(fileio.read_text(paths["predictions"]))
    null_odds = None
    if "null_odds" in paths:
        null_odds = json.loads(fileio.read_text(paths["null_odds"]))
    metrics = evaluate(version, dataset_json, predictions, null_odds, hp.qa_na_threshold)
    record = {"task": task, "version": version, "trial": trial.record_number(hp.num_trials),
              "num_questions": len(examples), "num_windows": len(feats),
              "predict_file": sets.predict_file, "train_steps": steps, "metrics": metrics}
    metrics_path = fileio.join(results_dir, f"{prefix}metrics.json")
    postprocess.write_json_atomic(record, metrics_path)
    main = ("exact_match", "f1") if version == "1.1" else ("exact", "f1")
    printer(f"{trial.label}: dev " + ", ".join(f"{k} {metrics[k]:.2f}" for k in main)
            + f" ({len(examples)} questions) -> {', '.join(sorted(paths.values()))}, "
              f"{metrics_path}")
    return _numeric(metrics)


def write_summary(task, hp, all_metrics, model_dir, printer=print):
    """With several trials: `results/<task>_summary.json` (median, mean ± std per metric)."""
    if hp.num_trials <= 1 or not all_metrics:
        return
    from finetune.glue.leaderboard import summarize_trials
    from finetune.qa import postprocess
    keys = set.intersection(*(set(m) for m in all_metrics))
    summary = summarize_trials([{k: m[k] for k in sorted(keys)} for m in all_metrics])
    postprocess.write_json_atomic({"task": task, "summary": summary},
                                  fileio.join(model_dir, "results", f"{task}_summary.json"))
    printer(f"{task} " + ", ".join(
        f"{k} {summary[k]['median']:.2f} (median of {summary[k]['n']}; mean "
        f"{summary[k]['mean']:.2f} ± {summary[k]['std']:.2f})"
        for k in (("exact_match", "f1") if VERSIONS[task] == "1.1" else ("exact", "f1"))
        if k in summary))


def tensorflow_squad_finetuner(task, hp, source, log=print):
    """(TensorFlow finetuner, its start weights) of a SQuAD task from an encoder source."""
    from finetune.trainer import tensorflow_finetuner
    version = VERSIONS[task]
    forward, loss, output_keys = model_fns(hp, version)
    return tensorflow_finetuner(source, hp, task, lambda config: make_head(hp, config, version),
                                forward, loss, output_keys, log=log)


def run_squad_task(task, hp, sets, finetuner, encoder_weights, model_dir, log=print):
    """`hp.num_trials` trials of a SQuAD task from its SquadSets: the one SQuAD trial loop, on
    either backend's finetuner (finetune/finetuner.py; every trial starts from
    `encoder_weights`). Each trial trains on `sets.train` (None: not trained), predicts the dev
    windows, and the writer post-processes and scores them (`write_trial_results`, then
    `write_summary`) and writes the trial's TensorBoard scalars (train/, dev_<task>/); returns
    the metrics per trial."""
    from finetune.finetuner import train_trial, trials
    from training.summaries import ScalarWriter
    all_metrics = []
    writes = finetuner.writes   # several processes: all train and predict, the writer writes
    for trial in trials(hp, task, model_dir):
        writer = ScalarWriter(trial.log_dir if writes else None)
        try:
            steps = train_trial(finetuner, trial, encoder_weights, sets.train, hp, writer)
            if sets.evals is not None:
                windows = sets.evals[1].model_inputs(with_labels=False)
                results = finetuner.predict(windows, hp.predict_batch_size)
                if writes:
                    metrics = write_trial_results(task, hp, sets, results, model_dir, trial,
                                                  steps, log)
                    all_metrics.append(metrics)
                    writer.write(metrics, steps, prefix=f"dev_{task}/")
        finally:
            writer.close()
    if writes:
        write_summary(task, hp, all_metrics, model_dir, log)
    return all_metrics
