"""One fine-tuning run over several tasks: what run_finetuning.py calls once its flags are read.

    run_tasks(tasks, base_hp, model_dir, data_dir=..., init_checkpoint=..., vocab_file=...)

Every input file of every task is read and checked before any model is built (a bad row stops
the run with the file and line before minutes of training); then each task trains its trials
(finetune/glue_task.py, finetune/squad_task.py) from the same encoder source.
"""
from __future__ import annotations

import json

from model import fileio
from finetune.console import UsageError, say, warn
from finetune.hparams import QA_TASKS


def load_task_data(tasks, base_hp, data_dir, train_file, predict_file, do_train, do_eval,
                   do_predict):
    """{task: its examples}, every file read and checked (one-line errors naming the file)."""
    from finetune import glue_task, squad_task
    task_data = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        if task in QA_TASKS:
            task_data[task] = squad_task.load_squad_data(
                task, hp, data_dir, train_file, predict_file, do_train, do_eval or do_predict)
        else:
            task_data[task] = glue_task.load_glue_data(task, hp, data_dir, do_train, do_eval,
                                                       do_predict)
    return task_data


def run_tasks(tasks, base_hp, model_dir, data_dir=None, init_checkpoint=None, vocab_file=None,
              sp_model=None, do_train=True, do_eval=True, do_predict=False, train_file=None,
              predict_file=None):
    from finetune import glue_task, squad_task
    from finetune.encoder_source import EncoderSource, find_vocab_file
    if sp_model is None:
        vocab_file = find_vocab_file(vocab_file, init_checkpoint)
    task_data = load_task_data(tasks, base_hp, data_dir, train_file, predict_file, do_train,
                               do_eval, do_predict)

    import keras
    if keras.backend.backend() != "tensorflow":
        raise UsageError(f"run_finetuning.py needs the TensorFlow Keras backend (tf.data + "
                         f"tf.function); KERAS_BACKEND is {keras.backend.backend()!r}")
    from data.tokenization import load_tokenizer
    tokenizer = load_tokenizer(vocab_file, sp_model, do_lower_case=base_hp.do_lower_case)
    source = EncoderSource(init_checkpoint, base_hp)
    if source.tensors is None:
        warn("no --init_checkpoint: fine-tuning from RANDOM weights (model_size "
             f"{base_hp.model_size}); results only check that the pipeline runs")
    else:
        say(f"encoder: {source.format} checkpoint {init_checkpoint} "
            f"({source.config.num_hidden_layers} layers, hidden {source.config.hidden_size})")
    if tokenizer.vocab_size > source.config.vocab_size:
        raise UsageError(f"{sp_model or vocab_file}: {tokenizer.vocab_size} tokens but the model "
                         f"has only {source.config.vocab_size} word embeddings")

    from finetune.encoder_source import check_sequence_length
    for task in tasks:   # every task's length against the position table, before any output
        hp = base_hp.for_task(task)
        if hp.max_seq_length > source.config.max_position_embeddings:
            check_sequence_length(source, hp.max_seq_length, task)

    fileio.makedirs(fileio.join(model_dir, "results"))
    fileio.write_atomic(fileio.join(model_dir, "finetune_hparams.json"), json.dumps(
        {"hparams": base_hp.to_dict(), "tasks": tasks, "init_checkpoint": init_checkpoint,
         "vocab_file": vocab_file, "sp_model": sp_model,
         "model_config": source.config.to_dict()}, indent=2, sort_keys=True))

    submission = {}
    for task in tasks:
        hp = base_hp.for_task(task)
        if task in QA_TASKS:
            squad_task.run_squad_task(task, hp, task_data[task], source, tokenizer, model_dir,
                                      printer=say)
        else:
            glue_task.run_glue_task(task, hp, task_data[task], source, tokenizer, model_dir,
                                    submission)
    if submission:
        glue_task.write_glue_submission(submission, model_dir, data_dir)
    if len([t for t in tasks if t not in QA_TASKS]) > 1 and do_eval:
        say(glue_task.glue_table(model_dir))
