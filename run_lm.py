"""Train and evaluate a causal (left-to-right) language model: ConvBERT's mixed attention or a
Transformer of matched size (lm/).

    python run_lm.py --train_files=$WT/wiki.train.raw --eval_files=$WT/wiki.valid.raw \
        --vocab_file=vocab.txt --model_config=lm_small_mixed --model_dir=runs/lm_mixed \
        --num_train_steps=10000 --hparams='{"seq_len": 128, "learning_rate": 5e-4}'
    python run_lm.py --model_dir=runs/lm_mixed --vocab_file=vocab.txt \
        --eval_files=$WT/wiki.test.raw --eval_stride=64 --generate="the game was"

--train_files / --eval_files: comma-separated text files or directories (WikiText raw format or
any UTF-8 text; lm/data.py). --model_config: a configs/ name (lm_small_mixed,
lm_small_transformer), a .json file or a JSON string; made causal, vocab_size from the vocab.
Rerunning the same command resumes from <model_dir>/checkpoints (exact resume); a run whose
steps are done only evaluates / generates. Any key of lm/task.py `LMHParams` can be set with
--hparams (a JSON string or a .json file); explicit flags win.

Writes into --model_dir: hparams.json, model_config.json, checkpoints/, train/ (TensorBoard:
loss, ppl, lr), lm/ (`ConvBertLM.from_pretrained`), lm_summary.json, and with --eval_files
lm_curve.json (when training: the held-out perplexity at every save) and lm_eval.json
(perplexity per WordPiece token; non-overlapping blocks of seq_len, or a sliding window with
--eval_stride). --generate prints a greedy continuation (--temperature > 0 samples).

Bad input (missing file, bad flag or hparam) prints one line `error: ...` and exits with status 1.
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
from base.command import exit_with_error, quiet_tensorflow  # noqa: E402
quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("train_files", None, "Comma-separated training text files / directories.")
flags.DEFINE_string("eval_files", None, "Comma-separated held-out text files / directories: "
                    "perplexity after training.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab (required).")
flags.DEFINE_string("model_config", None, "configs/ name, .json file or JSON string "
                    "(default lm_small_mixed).")
flags.DEFINE_string("model_dir", None, "Checkpoints, TensorBoard, exports (required).")
flags.DEFINE_string("hparams", None, "JSON object (string or .json file) overriding LMHParams.")
flags.DEFINE_integer("num_train_steps", None, "Total optimizer steps.")
flags.DEFINE_integer("train_batch_size", None, "Blocks per batch.")
flags.DEFINE_integer("seq_len", None, "Tokens per block (training and evaluation).")
flags.DEFINE_float("learning_rate", None, "Peak learning rate.")
flags.DEFINE_integer("seed", None, "Seed of the weights and the block order.")
flags.DEFINE_integer("eval_stride", None, "Sliding-window stride of the evaluation (default "
                     "seq_len: non-overlapping blocks).")
flags.DEFINE_integer("log_every_n_steps", None, "Progress line + TensorBoard every N steps.")
flags.DEFINE_integer("save_checkpoints_steps", None, "Checkpoint (and export) every N steps.")
flags.DEFINE_boolean("deterministic", None, "Op determinism (bit-identical reruns on CPU).")
flags.DEFINE_string("generate", None, "A prompt to continue.")
flags.DEFINE_integer("num_generate_tokens", 20, "Tokens to generate for --generate.")
flags.DEFINE_float("temperature", 0.0, "0: greedy; > 0: sample from softmax(logits / T).")
flags.DEFINE_integer("top_k", 0, "Sample among the k most likely tokens (0: all).")

_FLAG_KEYS = ("model_config", "num_train_steps", "train_batch_size", "seq_len", "learning_rate",
              "seed", "eval_stride", "log_every_n_steps", "save_checkpoints_steps",
              "deterministic")


class UsageError(ValueError):
    """Bad flags; one line."""


def log(message):
    print(message, flush=True)


def run(flag_values):
    """Everything the driver does; returns {summary, eval, generated} (what ran)."""
    from data.tokenization import load_tokenizer
    from lm import task as lm_task
    from lm.data import token_stream, text_files
    from base import fileio

    if not flag_values.model_dir:
        raise UsageError("--model_dir is required")
    if not flag_values.vocab_file:
        raise UsageError("--vocab_file is required")
    if not fileio.isfile(flag_values.vocab_file):
        raise UsageError(f"--vocab_file {flag_values.vocab_file}: not found")
    model_dir = flag_values.model_dir
    model_dir = model_dir if fileio.is_url(model_dir) else os.path.abspath(model_dir)
    blocked = fileio.output_dir_error(model_dir, "--model_dir")
    if blocked:
        raise UsageError(blocked)
    from_flags = {k: getattr(flag_values, k) for k in _FLAG_KEYS
                  if getattr(flag_values, k) is not None}
    overrides = flag_values.hparams
    saved = os.path.join(model_dir, lm_task.HPARAMS_FILE)
    if overrides is None and fileio.exists(saved):   # a rerun: the run's own hparams
        overrides = fileio.read_text(saved)
    hp = lm_task.make_hparams(overrides, from_flags)
    # Check every input file before anything is written.
    for files in (flag_values.train_files, flag_values.eval_files):
        if files:
            text_files(files)
    tokenizer = load_tokenizer(flag_values.vocab_file, do_lower_case=hp.do_lower_case)
    config = lm_task.model_config(hp, tokenizer.vocab_size)
    train_stream = token_stream(flag_values.train_files, tokenizer) if flag_values.train_files \
        else None
    eval_stream = token_stream(flag_values.eval_files, tokenizer) if flag_values.eval_files \
        else None

    import tensorflow as tf
    if hp.deterministic:
        tf.config.experimental.enable_op_determinism()
    task, core = lm_task.make_core(hp, config, train_stream, log=log,
                                   heldout_stream=eval_stream if train_stream is not None else None)
    result = {}
    fileio.makedirs(model_dir)
    if train_stream is not None:
        result["summary"] = lm_task.train(task, core, model_dir, log=log)
    else:
        restored = core.restore(os.path.join(model_dir, lm_task.CHECKPOINT_DIR))
        if not restored:
            raise UsageError(f"{model_dir} holds no checkpoint; give --train_files to train")
        log(f"restored {restored} (step {int(core.step.numpy())})")
    if eval_stream is not None:
        scores = lm_task.evaluate(task.model, eval_stream, hp.seq_len, hp.eval_stride,
                                  hp.eval_batch_size)
        scores.update(step=int(core.step.numpy()), eval_files=flag_values.eval_files)
        fileio.write_text_atomic(os.path.join(model_dir, lm_task.EVAL_FILE),
                                 json.dumps(scores, indent=2, sort_keys=True) + "\n")
        log(f"eval: ppl {scores['ppl']:.2f} (loss {scores['loss']:.4f} nats per WordPiece token, "
            f"{scores['tokens']:,} tokens, seq_len {scores['seq_len']}, stride {scores['stride']})")
        result["eval"] = scores
    if flag_values.generate is not None:
        prompt = [int(i) for i in tokenizer.tokenize([flag_values.generate])[0]] or [tokenizer.sep_id]
        new = lm_task.generate(task.model, prompt, flag_values.num_generate_tokens, hp.seq_len,
                               flag_values.temperature, flag_values.top_k, hp.seed)
        text = lm_task.detokenize(tokenizer, new)
        log(f"generated ({'greedy' if flag_values.temperature <= 0 else 'sampled'}): "
            f"{flag_values.generate} >>> {text}")
        result["generated"] = new
    return result


def main(argv):
    if len(argv) > 1:
        exit_with_error(f"unexpected arguments {' '.join(argv[1:])} (flags are --name=value)")
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.WARNING)
    from data.errors import DataError
    from lm.task import LMError
    from model.config import ConfigError
    from base.fileio import FileIOError
    from training import TrainingError
    try:
        run(FLAGS)
    except (UsageError, LMError, DataError, ConfigError, TrainingError, FileIOError,
            FileNotFoundError) as e:
        exit_with_error(e)   # 1; 128 + signal after SIGTERM/SIGINT


if __name__ == "__main__":
    app.run(main)
