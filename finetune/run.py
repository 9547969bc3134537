"""One fine-tuning run over several tasks: what run_finetuning.py calls once its flags are read.

    run_tasks(tasks, base_hp, model_dir, data_dir=..., init_checkpoint=..., vocab_file=...)
    run_tasks(tasks, base_hp, model_dir, features_dir=...)   # tokenized GLUE / SQuAD features

Every input file of every task is read and checked before any model is built (a bad row stops
the run with the file and line before minutes of training); then each task trains its trials
(finetune/glue_task.py `run_glue_task`, finetune/squad_task.py `run_squad_task`: the trial loops
of both backends) from the same encoder source.

With `features_dir` (`python -m finetune.features` output, finetune/feature_files.py) the GLUE
tasks read their train / dev / test arrays from there, SQuAD its windows and dev JSON, checked
against the run (vocabulary sha256, max_seq_length, casing, for training double_unordered and
max_train_examples, for SQuAD doc_stride and max_query_length), and nothing is tokenized. That is the only input of the Keras-on-JAX backend (`KERAS_BACKEND=jax`), which
trains with finetune/jax_trainer.py's finetuners and never imports TensorFlow, on every local device
(`keras.distribution.DataParallel`; `num_devices`: training/jax_distribution.py `jax_num_devices`
of the driver's --distribution flags), or of several processes (`join_processes`; process 0 writes);
the TensorFlow backend takes it too. Both write the same results files.
"""
from __future__ import annotations

import contextlib
import json

from base import fileio
from finetune.console import UsageError, say, warn
from finetune.hparams import QA_TASKS


def check_flags(FLAGS):
    """run_finetuning.py's flags (`FLAGS`) that cannot work, each refused in one line naming it
    before any input is read: nothing to do, --vocab_file with --sp_model, a --data_dir,
    --features_dir or --init_checkpoint that is not there, --train_file / --predict_file beside
    --features_dir (the features hold SQuAD's windows and dev JSON), a --model_size fine-tuning does not know (pre-training's `tiny` among them), and
    on JAX the several-process flags (training/jax_distribution.py `check_process_flags`, as
    run_pretraining.py); on TensorFlow those are refused whole (training/flags.py)."""
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise UsageError("nothing to do: set --do_train, --do_eval or --do_predict")
    if FLAGS.vocab_file and FLAGS.sp_model:
        raise UsageError("give --vocab_file or --sp_model, not both")
    for name in ("data_dir", "features_dir"):
        if getattr(FLAGS, name) and not fileio.isdir(getattr(FLAGS, name)):
            raise UsageError(f"{getattr(FLAGS, name)}: --{name} not found")
    init = FLAGS.init_checkpoint
    if init and not (fileio.exists(init) or fileio.exists(init + ".index")):
        raise UsageError(f"{init}: --init_checkpoint not found")
    if FLAGS.features_dir:
        for name in ("train_file", "predict_file"):
            if getattr(FLAGS, name):
                raise UsageError(f"--{name} is not read with --features_dir (the features hold "
                                 "SQuAD's windows and dev JSON): make features from it "
                                 f"(python -m finetune.features --{name}=...) or leave out "
                                 "--features_dir")
    if FLAGS.model_size is not None:
        from finetune.hparams import MODEL_SIZES, resolve_model_size
        if str(FLAGS.model_size).strip().lower() == "tiny":
            raise UsageError(
                "--model_size 'tiny' is run_pretraining.py's demo model, not a fine-tuning size "
                f"({', '.join(MODEL_SIZES)}, a configs/ name or a ConvBertConfig .json file): "
                "fine-tune a tiny pre-training with --init_checkpoint=<its model_dir> (the "
                "checkpoint gives the architecture) and no --model_size")
        resolve_model_size(FLAGS.model_size, "--model_size")   # HParamsError naming the flag
    from training.flags import JAX_ONLY_FLAGS, jax_only_flags_error
    if any(getattr(FLAGS, name) is not None for name in JAX_ONLY_FLAGS):
        import keras
        if keras.backend.backend() == "jax":
            from training.jax_distribution import check_process_flags
            check_process_flags(FLAGS.distribution, FLAGS.coordinator_address,
                                FLAGS.num_processes, FLAGS.process_id,
                                FLAGS.distributed_timeout, FLAGS.peer_timeout)
        elif jax_only_flags_error(FLAGS):
            raise UsageError(jax_only_flags_error(FLAGS))


def jax_run_options(FLAGS):
    """run_tasks' JAX options from run_finetuning.py's flags: how many local devices
    (training/jax_distribution.py `jax_num_devices`: every one by default) and how to join
    several processes (--distribution=multi_worker / --coordinator_address ...; joined by
    run_tasks once the features are read: each reads them all and feeds its rows). Turns on the
    JAX compile cache (before the first compile)."""
    import functools
    from training.compile_cache import enable_compile_cache
    from training.jax_distribution import jax_num_devices, start_processes
    num_devices = jax_num_devices(FLAGS.distribution, FLAGS.tpu, FLAGS.tpu_zone,
                                  FLAGS.gcp_project, FLAGS.num_cpu_devices)
    join = functools.partial(start_processes, FLAGS.distribution, FLAGS.coordinator_address,
                             FLAGS.num_processes, FLAGS.process_id, FLAGS.distributed_timeout,
                             log=say, peer_timeout=FLAGS.peer_timeout, checkpoints=False)
    enable_compile_cache(FLAGS.jax_cache_dir, log=say)
    return {"num_devices": num_devices, "join_processes": join}


def keras_backend(features_dir=None):
    """The Keras backend of this run ("tensorflow" or "jax"); a UsageError where it cannot run
    (JAX without feature files, or another backend)."""
    import keras
    backend = keras.backend.backend()
    if backend == "jax" and not features_dir:
        raise UsageError("run_finetuning.py needs the TensorFlow Keras backend (tf.data + "
                         "tf.function) to read --data_dir; on KERAS_BACKEND='jax' give "
                         "--features_dir (features made with python -m finetune.features)")
    if backend not in ("tensorflow", "jax"):
        raise UsageError(f"run_finetuning.py needs the TensorFlow Keras backend (or JAX with "
                         f"--features_dir); KERAS_BACKEND is {backend!r}")
    return backend


def load_task_data(tasks, base_hp, data_dir, train_file, predict_file, do_train, do_eval,
                   do_predict):
    """{task: its examples}, every file read and checked (one-line errors naming the file)."""
    from finetune import squad_task
    from finetune.glue.splits import load_glue_data
    task_data = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        if task in QA_TASKS:
            task_data[task] = squad_task.load_squad_data(
                task, hp, data_dir, train_file, predict_file, do_train, do_eval or do_predict)
        else:
            task_data[task] = load_glue_data(task, hp, data_dir, do_train, do_eval, do_predict)
    return task_data


def load_feature_sets(tasks, base_hp, features_dir, vocab_file, do_train, do_eval, do_predict,
                      printer=say):
    """(manifest, {task: GlueSets or squad_task.SquadSets}) from `features_dir`, every file read
    and checked against the run before any model is built: FeatureFileError naming the manifest
    for features made with another vocabulary (`vocab_file`'s sha256, when there is one; a
    SentencePiece model's for --sp_model), max_seq_length or casing, for training also
    double_unordered / max_train_examples, for SQuAD doc_stride and max_query_length, and for a
    split it lacks."""
    from finetune import feature_files, squad_task
    from finetune.glue.tasks import get_task
    from finetune.glue_task import read_glue_features
    manifest = feature_files.read_manifest(features_dir)
    where = feature_files.manifest_path(features_dir)
    vocab_sha = feature_files.vocab_sha256(vocab_file) if vocab_file else None
    task_sets = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        check = {}
        if do_train:
            check["max_train_examples"] = hp.max_train_examples
            if task not in QA_TASKS and get_task(task).unordered_pair:
                check["double_unordered"] = hp.double_unordered
        if task in QA_TASKS:
            check.update(doc_stride=hp.doc_stride, max_query_length=hp.max_query_length)
        feature_files.check_compatible(manifest, where, vocab_sha, hp.max_seq_length,
                                       hp.do_lower_case, **check)
    for task in tasks:   # every manifest check first: they are one line each, these read files
        hp = base_hp.for_task(task)
        if task in QA_TASKS:   # the TensorFlow run predicts SQuAD's dev set for do_predict too
            task_sets[task] = squad_task.read_squad_features(
                features_dir, manifest, task, hp, do_train, do_eval or do_predict, printer)
        else:
            task_sets[task] = read_glue_features(features_dir, manifest, task, hp, do_train,
                                                 do_eval, do_predict)
    return manifest, task_sets


def adopt_manifest_shapes(base_hp, manifest, asked=()):
    """Fill in from the manifest what the run left open: max_seq_length when None, SQuAD's
    doc_stride and max_query_length when not in `asked` (the --hparams keys). A value the run
    does ask for and the features lack is refused later by `load_feature_sets`."""
    if base_hp.max_seq_length is None:
        base_hp.max_seq_length = manifest["max_seq_length"]
    for key in ("doc_stride", "max_query_length"):
        if key not in asked and manifest.get(key) is not None:
            setattr(base_hp, key, int(manifest[key]))
    return base_hp


def features_vocab_file(vocab_file, sp_model, init_checkpoint):
    """(vocab_file, sp_model) the features are checked against, at most one of them: --vocab_file
    or --sp_model, else the vocab.txt (or sentencepiece.model) next to the checkpoint, else
    neither (not checked: the features carry their token ids)."""
    from finetune.encoder_source import find_sp_model, find_vocab_file
    if sp_model:
        if not fileio.isfile(sp_model):
            raise UsageError(f"{sp_model}: --sp_model not found")
        return None, sp_model
    if vocab_file or init_checkpoint:
        try:
            return find_vocab_file(vocab_file, init_checkpoint), None
        except UsageError:
            if vocab_file:
                raise
        return None, find_sp_model(init_checkpoint)
    return None, None


def run_tasks(tasks, base_hp, model_dir, data_dir=None, init_checkpoint=None, vocab_file=None,
              sp_model=None, do_train=True, do_eval=True, do_predict=False, train_file=None,
              predict_file=None, features_dir=None, num_devices=None, join_processes=None):
    """`tasks` one after another into `model_dir` (see the module doc). On JAX `num_devices` is
    how many local devices to use (None: all) and `join_processes`, if given, joins several
    processes (training/jax_distribution.py `start_processes` with the driver's flags) once every
    input is read and checked, before any JAX computation; on TensorFlow the caller's strategy scope
    decides."""
    from finetune import glue_task, squad_task
    from finetune.encoder_source import EncoderSource, check_sequence_length, find_vocab_file
    backend = keras_backend(features_dir)
    tokenizer = task_data = task_sets = None
    if features_dir:
        vocab_file, sp_model = features_vocab_file(vocab_file, sp_model, init_checkpoint)
        manifest, task_sets = load_feature_sets(tasks, base_hp, features_dir,
                                                sp_model or vocab_file, do_train, do_eval,
                                                do_predict)
        vocab_size, vocab_name = manifest["vocab_size"], fileio.join(features_dir,
                                                                     "manifest.json")
    else:
        if sp_model is None:
            vocab_file = find_vocab_file(vocab_file, init_checkpoint)
        task_data = load_task_data(tasks, base_hp, data_dir, train_file, predict_file,
                                   do_train, do_eval, do_predict)
        from data.tokenization import load_tokenizer
        tokenizer = load_tokenizer(vocab_file, sp_model, do_lower_case=base_hp.do_lower_case)
        vocab_size, vocab_name = tokenizer.vocab_size, sp_model or vocab_file

    writes, peers_lost = True, contextlib.nullcontext()
    if backend == "jax":
        from training.settings import set_precision
        import jax
        from training.jax_distribution import (check_batch_size, is_writer, lost_peer_as_error,
                                               use_devices)
        set_precision(base_hp.precision)   # mixed_float16: TrainingError, nothing written
        if join_processes is not None:     # a bad input file: said before waiting for peers
            join_processes()
        writes = is_writer()               # several processes: process 0 writes model_dir
        peers_lost = lost_peer_as_error(jax.process_count() > 1, checkpoints=False)
        use_devices(num_devices, log=say)  # before any model: variables replicated over them
        for task in tasks if do_train else ():   # a batch they do not divide: before any output
            check_batch_size(base_hp.for_task(task).train_batch_size)
    source = EncoderSource(init_checkpoint, base_hp)
    if source.tensors is None:
        warn("no --init_checkpoint: fine-tuning from RANDOM weights (model_size "
             f"{base_hp.model_size}); results only check that the pipeline runs")
    else:
        layers = source.config.num_hidden_layers
        say(f"encoder: {source.format} checkpoint {init_checkpoint} "
            f"({layers} layer{'s' * (layers != 1)}, hidden {source.config.hidden_size})")
    if vocab_size > source.config.vocab_size:
        raise UsageError(f"{vocab_name}: {vocab_size} tokens but the model "
                         f"has only {source.config.vocab_size} word embeddings")

    for task in tasks:   # every task's length against the position table, before any output
        hp = base_hp.for_task(task)
        if hp.max_seq_length > source.config.max_position_embeddings:
            check_sequence_length(source, hp.max_seq_length, task)

    record = {"hparams": base_hp.to_dict(), "tasks": tasks, "init_checkpoint": init_checkpoint,
              "vocab_file": vocab_file, "sp_model": sp_model,
              "model_config": source.config.to_dict()}
    if features_dir:
        record.update(features_dir=features_dir, backend=backend)
    if writes:
        fileio.makedirs(fileio.join(model_dir, "results"))
        fileio.write_atomic(fileio.join(model_dir, "finetune_hparams.json"),
                            json.dumps(record, indent=2, sort_keys=True))

    submission = {}
    finetuners = start_weights = None
    if backend == "jax":
        from finetune.jax_trainer import Finetuners, random_encoder_weights
        finetuners = Finetuners(log=say)   # compiled steps shared by tasks of one head shape
        # every trial starts from the checkpoint's weights (or one random initialisation, drawn
        # from hp.seed as the TensorFlow run's first trial draws it)
        start_weights = source.tensors
        if start_weights is None:
            start_weights = random_encoder_weights(source.config, base_hp.seed)
    # Several JAX processes: a call with one that was lost (killed, its host gone) anywhere in
    # the tasks (a trial's start, training, predictions) is one line and exit 1 on the others
    # (training/jax_distribution.py `lost_peer_as_error`; fine-tuning writes no checkpoints:
    # the rerun trains again), never a traceback and JAX's abort. SIGTERM / SIGINT between the
    # training loops (a trial's start, its predictions) end the run with one line too
    # (training/loop.py `StopAtOnce`; inside a loop, the loop's own stop).
    from training.loop import StopAtOnce
    with peers_lost, StopAtOnce() as stopping:
        for task in tasks:
            stopping.where = task
            hp = base_hp.for_task(task)
            check_sequence_length(source, hp.max_seq_length, task)
            if task in QA_TASKS:
                sets = task_sets[task] if task_sets else squad_task.tokenize_squad_data(
                    task, hp, task_data[task], tokenizer, say)
            else:
                sets = task_sets[task] if task_sets else glue_task.tokenize_glue_data(
                    task_data[task], tokenizer, hp)
                if sets.train is not None:
                    say(glue_task.describe_training_set(task, hp, sets.train))
            if finetuners is not None:
                finetuner, weights = finetuners.get(source.config, task, hp), start_weights
            elif task in QA_TASKS:
                finetuner, weights = squad_task.tensorflow_squad_finetuner(task, hp, source,
                                                                           log=say)
            else:
                finetuner, weights = glue_task.tensorflow_glue_finetuner(task, hp, source, log=say)
            if task in QA_TASKS:
                squad_task.run_squad_task(task, hp, sets, finetuner, weights, model_dir, log=say)
            else:
                glue_task.run_glue_task(task, hp, sets, finetuner, weights, model_dir, submission)
    if submission and writes:   # without --data_dir (features only) the files are not checked
        glue_task.write_glue_submission(submission, model_dir, data_dir)
    if len([t for t in tasks if t not in QA_TASKS]) > 1 and do_eval and writes:
        say(glue_task.glue_table(model_dir))
