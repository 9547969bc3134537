"""Fine-tune ConvBERT on GLUE and SQuAD (ELECTRA/ConvBERT recipe).

    python run_finetuning.py --data_dir ../shared/data/glue --task_names mrpc,rte \\
        --init_checkpoint models/convbert_small --vocab_file vocab.txt \\
        --model_dir out/glue_small --model_size small --num_trials 9

Tasks: cola, sst, mrpc, sts, qqp, mnli, qnli, rte, wnli (GLUE layout
`<data_dir>/<TASK>/{train,dev,test}.tsv`), squad (SQuAD 2.0) and squadv1 (SQuAD 1.1; files
`<data_dir>/squad/{train,dev}-v{2.0,1.1}.json` or --train_file / --predict_file).

Writes under `<model_dir>/results/`: `<task>_dev_predictions.tsv` (index, prediction, label) and
`<task>_dev_metrics.json` per task (suffix `_trial<k>` with --num_trials > 1, plus
`<task>_dev_summary.json`: median and mean ± std per metric); with --do_predict the GLUE
leaderboard files and `glue_submission.zip` under `results/leaderboard/`; for SQuAD
`<task>_predictions.json`, `<task>_nbest_predictions.json`, `<task>_null_odds.json` (v2.0) and
`<task>_metrics.json`. TensorBoard scalars go to `<model_dir>/tensorboard/<task>[_trial<k>]/`
(train/loss, train/learning_rate, train/grad_norm, train/sequences_per_second every log window;
the dev metrics under dev_<task>/ at the trial's last step).

Hyper-parameters: the official defaults per --model_size (finetune/hparams.py), then --hparams
(JSON string or file; unknown keys are an error), then explicit flags. Bad input (missing task
directory, malformed TSV row, unknown label or task) stops with a one-line error naming the file
(`error: ...`, exit status 1; docs/RELIABILITY.md).

Every path (--data_dir, --model_dir, --init_checkpoint, --vocab_file, --sp_model, --train_file,
--predict_file, --features_dir) may be on any filesystem TensorFlow knows (gs:// buckets on a
Cloud TPU): every file goes through base/fileio.py.

From feature files, on Keras-on-JAX (TensorFlow is never imported) or TensorFlow:

    python -m finetune.features --task_names=mrpc,sts --data_dir=GLUE_DIR --vocab_file=VOCAB \\
        --splits=train,dev,test --output_dir=features
    KERAS_BACKEND=jax python run_finetuning.py --features_dir=features --task_names=mrpc,sts \\
        --init_checkpoint=NATIVE_OR_HF_DIR --model_dir=out/glue_jax [--do_predict]

--features_dir replaces --data_dir (no tokenization; the manifest's vocabulary, lengths and
casing must match the run's) and is the only input on JAX, where the run uses every local device
or, with --coordinator_address / --num_processes / --process_id, every device of several
processes (process 0 writes), and writes what a TensorFlow run writes (docs/FINETUNING.md).
"""
from __future__ import annotations

import functools
import os
import sys

from base.command import quiet_tensorflow

quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

from base.command import exit_with_error, run_command  # noqa: E402
from finetune.console import UsageError, say  # noqa: E402
from training import define_distribution_flags
from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP

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
_flags.DEFINE_string("features_dir", None, "GLUE / SQuAD features from python -m "
                    "finetune.features (<task>_<split>.npz + manifest.json) instead of "
                    "--data_dir TSVs / SQuAD JSON: no "
                    "tokenization; the only input on KERAS_BACKEND=jax (TensorFlow never "
                    "imported). With --do_predict it needs the test splits.")
_flags.DEFINE_string("task_names", None, "Comma list: cola,sst,mrpc,sts,qqp,mnli,qnli,rte,wnli,"
                    "squad (SQuAD 2.0),squadv1 (SQuAD 1.1).")
_flags.DEFINE_string("init_checkpoint", None, "Pre-training model_dir, native export, official TF1 "
                    "checkpoint or Hugging Face ConvBERT dir. None: random weights (WARNING).")
_flags.DEFINE_string("model_size", None, "small, medium-small, base, a configs/ row name or a "
                    ".json config (default: small). Sets the learning rate and, without a "
                    "checkpoint, the architecture.")
_flags.DEFINE_string("vocab_file", None, "WordPiece vocab (BERT uncased). Default: vocab.txt next "
                    "to the checkpoint (run_pretraining.py writes the one it used into its "
                    "model_dir).")
_flags.DEFINE_string("sp_model", None, "SentencePiece model instead of --vocab_file (the one the "
                    "encoder was pre-trained with). Default, where no vocab.txt is: the "
                    "sentencepiece.model run_pretraining.py --sp_model wrote into its "
                    "model_dir.")
_flags.DEFINE_string("model_dir", None, "Output directory (results/, tensorboard/).")
_flags.DEFINE_string("hparams", None, "JSON object or path to a JSON file of hparams "
                    "(finetune/hparams.py); unknown keys are an error.")
_flags.DEFINE_integer("num_trials", None, "Fine-tuning runs per task (the papers report the "
                     "median of 9 for GLUE). Default 1.")
_flags.DEFINE_integer("seed", None, "Random seed of the first trial (trial k uses seed + k - 1).")
define_distribution_flags(_flags.DEFINE_string, _flags.DEFINE_integer)
_flags.DEFINE_bool("do_train", True, "Fine-tune on the train split.")
_flags.DEFINE_bool("do_eval", True, "Evaluate on the dev split and write dev predictions/metrics.")
_flags.DEFINE_bool("do_predict", False, "Predict the test split(s) and write leaderboard files.")
_flags.DEFINE_integer("max_seq_length", None, "Default 128 (512 for SQuAD); with --features_dir "
                     "the features' (their manifest's).")
_flags.DEFINE_integer("train_batch_size", None, "Default 32.")
_flags.DEFINE_float("num_train_epochs", None, "Default 3 (RTE/STS-B 10, SQuAD 2).")
_flags.DEFINE_integer("max_train_steps", None, "Cap on training steps (smoke tests).")
_flags.DEFINE_float("learning_rate", None, "Peak learning rate (default 3e-4 small/medium-small, "
                   "1e-4 base).")
_flags.DEFINE_string("precision", None, "fp32 (default) | bf16 | mixed_float16 (dynamic loss "
                    "scaling), as in pre-training.")
_flags.DEFINE_integer("steps_per_loop", None, "Training steps inside one compiled call (default "
                     "1; on a TPU e.g. 100), as in pre-training.")
_flags.DEFINE_string("jax_cache_dir", None, JAX_CACHE_HELP)
_flags.DEFINE_string("train_file", None, "SQuAD training JSON (overrides the data_dir default).")
_flags.DEFINE_string("predict_file", None, "SQuAD evaluation JSON (overrides the data_dir default).")
_flags.DEFINE_bool("glue_submission", False, "Only gather every task's latest test predictions "
                  "(<model_dir>/results/leaderboard, or --submission_dir) into one "
                  "glue_submission.zip, checked against the test sets under --data_dir, and exit. "
                  "A missing file of the eleven is an error unless --allow_partial.")
_flags.DEFINE_string("submission_dir", None, "Directory of <NAME>.tsv files for --glue_submission "
                    "(default <model_dir>/results/leaderboard).")
_flags.DEFINE_bool("allow_partial", False, "--glue_submission: zip the files present even if some "
                  "of the eleven are missing.")
_flags.DEFINE_bool("wnli_majority", False, "--glue_submission: first write WNLI.tsv predicting the "
                  "train set's majority class for every test example (BERT's WNLI submission).")
_flags.DEFINE_bool("print_glue_table", False, "Only print the GLUE dev table (medians over trials) "
                  "from <model_dir>/results and exit.")



def collect_flag_overrides():
    names = ("model_size", "num_trials", "seed", "max_seq_length", "train_batch_size",
             "num_train_epochs", "max_train_steps", "learning_rate", "precision",
             "steps_per_loop")
    return {n: getattr(FLAGS, n) for n in names if getattr(FLAGS, n) is not None}


def run(argv=None):
    """Flags -> checks -> finetune.run.run_tasks (or the GLUE table)."""
    from finetune.hparams import QA_TASKS, load_hparams, parse_task_names
    if FLAGS.print_glue_table:
        if not FLAGS.model_dir:
            raise UsageError("--print_glue_table needs --model_dir")
        from finetune.glue_task import glue_table
        say(glue_table(FLAGS.model_dir))
        return 0
    if FLAGS.glue_submission:
        return glue_submission()
    if not FLAGS.model_dir:
        raise UsageError("--model_dir is required")
    from base import fileio
    blocked = fileio.output_dir_error(FLAGS.model_dir, "--model_dir")
    if blocked:
        raise UsageError(blocked)
    from finetune.run import check_flags
    check_flags(FLAGS)
    init = FLAGS.init_checkpoint
    tasks = parse_task_names(FLAGS.task_names)
    base_hp = load_hparams(FLAGS.hparams, **collect_flag_overrides())
    data_dir, features_dir = FLAGS.data_dir, FLAGS.features_dir
    if any(t not in QA_TASKS for t in tasks) and not (data_dir or features_dir):
        raise UsageError("--data_dir (or --features_dir) is required for GLUE tasks")
    if features_dir:
        # The shapes the features were made at, unless --max_seq_length / --hparams asks for
        # others (those are then refused, naming the manifest): SQuAD's windows too.
        from finetune.feature_files import read_manifest
        from finetune.hparams import parse_hparams_arg
        from finetune.run import adopt_manifest_shapes
        adopt_manifest_shapes(base_hp, read_manifest(features_dir),
                              asked=parse_hparams_arg(FLAGS.hparams)[0])
    sp_model = FLAGS.sp_model
    if init and not (FLAGS.vocab_file or sp_model or features_dir):
        from finetune.encoder_source import find_sp_model
        sp_model = find_sp_model(init)   # a SentencePiece pre-training's, in its model_dir
    from finetune.run import keras_backend, run_tasks
    kwargs = dict(data_dir=data_dir, init_checkpoint=init, vocab_file=FLAGS.vocab_file,
                  sp_model=sp_model, do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
                  do_predict=FLAGS.do_predict, train_file=FLAGS.train_file,
                  predict_file=FLAGS.predict_file, features_dir=features_dir)
    if keras_backend(features_dir) == "jax":   # finetune/jax_trainer.py; no TensorFlow
        from finetune.run import jax_run_options
        run_tasks(tasks, base_hp, FLAGS.model_dir, **kwargs, **jax_run_options(FLAGS))
        return 0
    if FLAGS.jax_cache_dir is not None:
        raise UsageError("--jax_cache_dir is for KERAS_BACKEND=jax")
    from training.flags import jax_only_flags_error
    if jax_only_flags_error(FLAGS):
        raise UsageError(jax_only_flags_error(FLAGS))
    from training.distribution import make_strategy
    # Before TensorFlow creates a tensor: logical devices and the TPU system are fixed at start-up.
    strategy = make_strategy(FLAGS.distribution, FLAGS.tpu, FLAGS.num_cpu_devices,
                             FLAGS.tpu_zone, FLAGS.gcp_project)
    with strategy.scope():   # models, optimizer and steps of every task live on the strategy
        run_tasks(tasks, base_hp, FLAGS.model_dir, **kwargs)
    return 0


def glue_submission():
    """--glue_submission: one zip from every task's latest leaderboard file."""
    directory = FLAGS.submission_dir or (
        FLAGS.model_dir and os.path.join(FLAGS.model_dir, "results", "leaderboard"))
    if not directory or not FLAGS.data_dir:
        raise UsageError("--glue_submission needs --data_dir and --model_dir (or --submission_dir)")
    from finetune.glue_task import gather_glue_submission
    say(gather_glue_submission(directory, FLAGS.data_dir, FLAGS.allow_partial,
                               FLAGS.wnli_majority))
    return 0


_ERROR_TYPES = (("data.errors", "DataError"), ("finetune.hparams", "HParamsError"),
                ("training.loop", "TrainingError"), ("base.fileio", "FileIOError"),
                ("training.distribution", "DistributionError"),
                ("finetune.qa.squad_eval", "SquadFormatError"),
                ("model.checkpoints", "CheckpointError"), ("model.config", "ConfigError"))


def _user_error_types():
    """Bad-input error classes of the modules loaded so far (importing them all up front would
    load TensorFlow before a cheap check such as an unknown task name)."""
    types = [UsageError]
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
        exit_with_error(e, 1)
    flags.FLAGS(argv[:1])  # absl's app insists its global registry is parsed too
    return remaining


def main(argv):
    if len(argv) > 1:
        exit_with_error(f"unexpected arguments: {' '.join(argv[1:])}", 2)
    sys.exit(run_command(run, argv, _user_error_types))   # 128 + signal after SIGTERM/SIGINT


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
