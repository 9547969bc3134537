"""Pre-train ConvBERT with ELECTRA's replaced-token detection (generator + discriminator).

With no flags at all: a tiny model on the embedded corpus (Python's own documentation), a couple
of minutes on a laptop CPU, written to ./runs/demo:

    python run_pretraining.py

The paper's models (see scripts/pretrain_*.sh and docs/PRETRAINING.md):

    python run_pretraining.py --model_size=small --data_dir=$DATA_DIR \\
        --hparams='{"num_train_steps": 1000000}'

`--data_dir` follows ELECTRA: TFRecords in $DATA_DIR/pretrain_tfrecords, vocab in
$DATA_DIR/vocab.txt, model in $DATA_DIR/models/<model_name>. Rerunning the same command resumes
from the last checkpoint in --model_dir. Any key of pretrain/hparams.py can be set with
--hparams (a JSON string or a .json file); explicit flags win over --hparams. Every path
(--model_dir, --data_dir, --pretrain_tfrecords, --vocab_file, --sp_model) may be local or on any
filesystem tf.io.gfile knows, e.g. a gs:// bucket on a Cloud TPU.

On Keras-on-JAX, without TensorFlow (it is never imported, even where it is installed):

    KERAS_BACKEND=jax python run_pretraining.py --model_size=small \\
        --pretrain_tfrecords='shards/*' --vocab_file=vocab.txt --model_dir=runs/small_jax

and on several hosts (JAX's distributed runtime; each host reads its share of the shards, host 0
writes --model_dir, which every host must see): the same command on each with
`--coordinator_address=<host 0>:<port> --num_processes=N --process_id=<i>`, or
`--distribution=multi_worker` alone where JAX finds the cluster (TPU pod slice, SLURM).

What a run writes into --model_dir, per backend:
  TensorFlow: checkpoints/ (tf.train.Checkpoint, the last --keep_checkpoint_max); on JAX:
    jax_checkpoints/ (safetensors, the same number); rerunning resumes from the newest.
  Both: vocab.txt (or sentencepiece.model): the vocabulary the shards were built with, where
    `run_finetuning.py --init_checkpoint=<model_dir>` finds it;
    discriminator/ and generator/ (the exports, native format), train/ (TensorBoard scalars
    every --log_every_n_steps: loss, gen_loss, gen_accuracy, disc_loss, disc_accuracy,
    disc_auc, learning_rate, grad_norm, sequences_per_second; one event file per run or
    resume, written without TensorFlow on JAX), hparams.json and pretraining_summary.json
    (every logged window's record, the throughput, the backend).

Bad input (unknown hparam or size, no or malformed TFRecords, a vocab that does not match the
model, ...) prints one line `error: ...` and exits with status 1, writing nothing.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
from base.command import exit_with_error, quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402
from training import define_distribution_flags  # noqa: E402  (TF-free)
from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP  # noqa: E402  (TF-free)

FLAGS = flags.FLAGS
flags.DEFINE_string("model_size", None, "small | medium-small | base | tiny, a configs/ row name "
                    "(configs/README.md) or a .json config (default: tiny for the built-in demo "
                    "corpus, else medium-small).")
flags.DEFINE_string("model_name", None, "Name of the run (default convbert_<size>).")
flags.DEFINE_string("data_dir", None, "ELECTRA-style data directory: pretrain_tfrecords/, "
                    "vocab.txt, models/<model_name>.")
flags.DEFINE_string("pretrain_tfrecords", None, "Glob (or comma-separated globs) of TFRecord "
                    "shards; default <data_dir>/pretrain_tfrecords/pretrain_data.tfrecord*.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab (default <data_dir>/vocab.txt).")
flags.DEFINE_string("sp_model", None, "SentencePiece model instead of --vocab_file (the one the "
                    "shards were built with; build_vocab.py --vocab_type=sentencepiece).")
flags.DEFINE_string("model_dir", None, "Checkpoints, exports, TensorBoard logs (default "
                    "<data_dir>/models/<model_name>, or ./runs/demo for the demo).")
flags.DEFINE_string("hparams", None, "JSON object (string or .json file) overriding any key "
                    "of pretrain/hparams.py.")
flags.DEFINE_integer("num_train_steps", None, "Total optimizer steps.")
flags.DEFINE_integer("train_batch_size", None, "Global batch size (split over replicas).")
flags.DEFINE_float("learning_rate", None, "Peak learning rate.")
flags.DEFINE_integer("save_checkpoints_steps", None, "Checkpoint (and export) every N steps.")
flags.DEFINE_integer("keep_checkpoint_max", None, "Keep the last N checkpoints.")
flags.DEFINE_integer("seed", None, "Seed for weights, masking, sampling and data order.")
flags.DEFINE_string("precision", None, "fp32 | bf16 | mixed_float16 (dynamic loss scaling).")
define_distribution_flags(flags.DEFINE_string, flags.DEFINE_integer)
flags.DEFINE_integer("max_seq_length", None, "Tokens per example; larger than the trained "
                     "length on resume starts a continuation phase (position embeddings copied).")
flags.DEFINE_integer("log_every_n_steps", None, "Log line + TensorBoard scalars every N steps.")
flags.DEFINE_integer("steps_per_loop", None, "Steps inside one compiled call (default 1; on a "
                     "TPU e.g. 200: one host round-trip per loop). Logs and saves still happen "
                     "at their steps.")
flags.DEFINE_boolean("deterministic", None, "Op determinism + fixed seeds: reruns and resumed "
                     "runs are bit-identical on CPU (slower).")
flags.DEFINE_boolean("jit_compile", None, "XLA-compile the train step (default: on GPU only).")
flags.DEFINE_string("jax_cache_dir", None, JAX_CACHE_HELP)

DEMO_MODEL_DIR = os.path.join("runs", "demo")
_FLAG_KEYS = ("model_size", "model_name", "num_train_steps", "train_batch_size", "learning_rate",
              "save_checkpoints_steps", "keep_checkpoint_max", "seed", "precision",
              "max_seq_length", "log_every_n_steps", "steps_per_loop", "deterministic",
              "jit_compile")


class UsageError(ValueError):
    """Bad flags; one line."""


def log(message):
    print(message, flush=True)


def _check_token_ids(files, vocab_size):
    """The largest token id in the first records must fit the model's vocabulary."""
    from data.errors import DataError
    from data.tfrecord_io import largest_token_id
    largest = largest_token_id(files[0])
    if largest >= vocab_size:
        raise DataError(f"{files[0]} holds token id {largest} but the model's vocab_size is "
                        f"{vocab_size}: the TFRecords were built with another vocabulary "
                        "(pass the matching --vocab_file / --sp_model or set vocab_size)")


def _default_data(max_seq_length):
    """Shards of the embedded corpus (built once, cached) and its vocab."""
    import shutil
    import tempfile
    from data import default_corpus
    target = os.path.join(default_corpus.cache_dir(), f"default_pretrain_data-{max_seq_length}")
    pattern = os.path.join(target, "pretrain_data.tfrecord*")
    import glob
    if not [f for f in glob.glob(pattern) if not f.endswith(".incomplete")]:
        log(f"building the demo pre-training data (Python's documentation) in {target} ...")
        staging = tempfile.mkdtemp(prefix=".default_pretrain_data-",
                                   dir=default_corpus.cache_dir())
        default_corpus.build_default_pretraining_data(staging, max_seq_length=max_seq_length)
        try:
            os.rename(staging, target)
        except OSError:  # built concurrently by another process
            shutil.rmtree(staging, ignore_errors=True)
    return pattern, default_corpus.default_vocab_file()


def resolve(flag_values, backend="tensorflow", vocabulary=None):
    """Flags -> (hparams, model_dir, shard files, special token ids), on either backend (nothing
    here imports TensorFlow but the demo data's builder). Raises one-line errors. `vocabulary`:
    a dict to receive the vocab_file and sp_model the run uses (None where there is none)."""
    # Paths may be local or any filesystem tf.io.gfile knows (gs://, ram://): base/fileio.py;
    # joined with os.path (posix on the machines TensorFlow's bucket filesystems run on).
    from data.errors import DataError
    from data.tfrecord_io import check_shard, count_records, find_shards
    from data.vocab import special_token_ids
    from base import fileio
    from pretrain.hparams import make_hparams, parse_overrides

    overrides = parse_overrides(flag_values.hparams)
    from_flags = {k: getattr(flag_values, k) for k in _FLAG_KEYS
                  if getattr(flag_values, k) is not None}
    demo = not (flag_values.data_dir or flag_values.pretrain_tfrecords)
    size = None
    if demo and not ("model_size" in from_flags or "model_size" in overrides):
        size = "tiny"
    hp = make_hparams(size, overrides, from_flags)
    positions = hp.model_hparam_overrides.get("max_position_embeddings",
                                              hp.max_position_embeddings)
    if hp.max_seq_length > positions:
        raise UsageError(f"--max_seq_length {hp.max_seq_length} is beyond the model's {positions} "
                         "position embeddings (max_position_embeddings)")

    vocab_file, sp_model = flag_values.vocab_file, flag_values.sp_model
    if vocab_file and sp_model:
        raise UsageError("give --vocab_file or --sp_model, not both")
    if demo and sp_model:
        raise UsageError("--sp_model needs the shards built with it (--data_dir or "
                         "--pretrain_tfrecords); the demo data is WordPiece")
    if demo and backend != "tensorflow":
        raise UsageError("on JAX give --pretrain_tfrecords or --data_dir (the demo corpus is "
                         "built with TensorFlow)")
    if demo:
        pattern, default_vocab = _default_data(hp.max_seq_length)
        vocab_file = vocab_file or default_vocab
    elif flag_values.pretrain_tfrecords:
        pattern = flag_values.pretrain_tfrecords
    else:
        if not fileio.isdir(flag_values.data_dir):
            raise UsageError(f"--data_dir {flag_values.data_dir} is not a directory")
        pattern = os.path.join(flag_values.data_dir, "pretrain_tfrecords",
                               "pretrain_data.tfrecord*")
    if vocab_file is None and sp_model is None and flag_values.data_dir:
        candidate = os.path.join(flag_values.data_dir, "vocab.txt")
        vocab_file = candidate if fileio.exists(candidate) else None

    files = find_shards(pattern)
    any_records = False
    for path in files:
        if not fileio.is_url(path):   # a seek per record: cheap on a disk, not on a bucket
            count_records(path)       # a truncated shard fails now, not hours into training
        any_records = check_shard(path, hp.max_seq_length) or any_records
    if not any_records:               # tf.data would wait forever for a first batch
        raise DataError(f"{files[0]}: no records (empty TFRecord file"
                        + (")" if len(files) == 1 else f"s, all {len(files)} of them)"))

    special_ids = {}
    if vocab_file is not None or sp_model is not None:
        file_size, special_ids = special_token_ids(vocab_file, sp_model)
        if hp.vocab_size is not None and hp.vocab_size != file_size:
            raise DataError(f"{sp_model or vocab_file} has {file_size} tokens but the model "
                            f"config has vocab_size {hp.vocab_size}")
        hp.vocab_size = file_size
    elif hp.vocab_size is None:
        hp.vocab_size = 30522  # BERT uncased, the official vocabulary
    _check_token_ids(files, hp.vocab_size)

    model_dir = flag_values.model_dir
    if model_dir is None:
        if demo:
            model_dir = DEMO_MODEL_DIR
        elif flag_values.data_dir:
            model_dir = os.path.join(flag_values.data_dir, "models", hp.model_name)
        else:
            model_dir = os.path.join("runs", hp.model_name)
    blocked = fileio.output_dir_error(model_dir, "--model_dir")
    if blocked:
        raise UsageError(blocked)
    if vocabulary is not None:
        vocabulary.update(vocab_file=vocab_file, sp_model=sp_model)
    return hp, model_dir, files, special_ids


def main(argv):
    if len(argv) > 1:
        exit_with_error(f"unexpected arguments {' '.join(argv[1:])} (flags are --name=value)")
    if os.environ.get("KERAS_BACKEND") == "jax":
        _report(_main_jax())
        return
    if FLAGS.jax_cache_dir is not None:
        exit_with_error(UsageError("--jax_cache_dir is for KERAS_BACKEND=jax"))
    from training.flags import jax_only_flags_error
    if jax_only_flags_error(FLAGS):
        exit_with_error(UsageError(jax_only_flags_error(FLAGS)))
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.WARNING)  # TF's per-save INFO lines
    from data.errors import DataError
    from model.config import ConfigError
    from pretrain.hparams import HParamsError
    from pretrain.task import pretrain
    from training import TrainingError
    from training.distribution import DistributionError, make_strategy

    user_errors = (HParamsError, DataError, DistributionError, TrainingError, ConfigError,
                   UsageError)
    try:
        import tensorflow as tf
        # The strategy first: logical devices and the worker cluster are fixed at TF start-up.
        strategy = make_strategy(FLAGS.distribution, FLAGS.tpu, FLAGS.num_cpu_devices,
                                 FLAGS.tpu_zone, FLAGS.gcp_project)
        vocabulary = {}
        hp, model_dir, files, special_ids = resolve(FLAGS, vocabulary=vocabulary)
        if hp.deterministic:
            tf.config.experimental.enable_op_determinism()
        summary = pretrain(hp, model_dir, files, strategy, hp.vocab_size, log=log,
                           special_ids=special_ids, **vocabulary)
    except user_errors as e:
        exit_with_error(e)   # 1; 128 + signal after SIGTERM/SIGINT
    _report(summary)


def _main_jax():
    """KERAS_BACKEND=jax: pretrain/jax_trainer.py, TensorFlow never imported."""
    from training.jax_distribution import check_process_flags
    from training.loop import TrainingError
    try:   # several-process flags that cannot work: before any data is read or written
        check_process_flags(FLAGS.distribution, FLAGS.coordinator_address, FLAGS.num_processes,
                            FLAGS.process_id, FLAGS.distributed_timeout, FLAGS.peer_timeout)
    except TrainingError as e:
        exit_with_error(e)
    from training.compile_cache import enable_compile_cache
    enable_compile_cache(FLAGS.jax_cache_dir, log=log)      # before the first compile
    from data.errors import DataError
    from model.config import ConfigError
    from base.fileio import FileIOError
    from pretrain.hparams import HParamsError
    from pretrain.jax_trainer import pretrain_jax
    from pretrain.task import input_shares
    from training.jax_distribution import jax_num_devices, start_processes
    try:   # the --distribution flags on JAX; --num_cpu_devices before JAX starts
        num_devices = jax_num_devices(FLAGS.distribution, FLAGS.tpu, FLAGS.tpu_zone,
                                      FLAGS.gcp_project, FLAGS.num_cpu_devices)
        vocabulary = {}
        hp, model_dir, files, special_ids = resolve(FLAGS, backend="jax", vocabulary=vocabulary)
        # Files the processes cannot share evenly: said before waiting for the others.
        input_shares(hp, files, FLAGS.num_processes or 1)
        # several processes: joined on JAX's runtime before any JAX computation
        start_processes(FLAGS.distribution, FLAGS.coordinator_address, FLAGS.num_processes,
                        FLAGS.process_id, FLAGS.distributed_timeout, log=log,
                        peer_timeout=FLAGS.peer_timeout)
        summary = pretrain_jax(hp, model_dir, files, hp.vocab_size, special_ids, log=log,
                               num_devices=num_devices, **vocabulary)
    except (HParamsError, DataError, ConfigError, TrainingError, UsageError, FileIOError,
            FileNotFoundError) as e:
        exit_with_error(e)   # 1; 128 + signal after SIGTERM/SIGINT
    return summary


def _report(summary):
    final = summary.get("final") or {}
    first = summary.get("first") or {}
    if final:
        log(f"done: step {summary['global_step']} in {summary['wall_seconds']:.0f}s | loss "
            f"{first.get('loss', float('nan')):.3f} -> {final['loss']:.3f} | gen "
            f"{first.get('gen_loss', float('nan')):.3f} -> {final['gen_loss']:.3f} | disc "
            f"{first.get('disc_loss', float('nan')):.4f} -> {final['disc_loss']:.4f} | "
            f"disc AUC {final['disc_auc']:.3f} | {summary['sequences_per_second']:.1f} seq/s")
    else:
        log(f"done: nothing to train (step {summary['global_step']} already reached)")
    summary_file = os.path.join(summary["model_dir"], "pretraining_summary.json")
    log(f"model: {summary['discriminator']} (ConvBertModel.from_pretrained("
        f"{summary['model_dir']!r})); summary: {summary_file}")


if __name__ == "__main__":
    app.run(main)
