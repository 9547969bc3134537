#!/usr/bin/env bash
# Shared body of the per-task GLUE scripts: the ConvBERT paper's fine-tuning hyper-parameters
# (Table 6, official configure_finetuning.py): peak lr 3e-4 (small, medium-small) or 1e-4 (base),
# layer-wise LR decay 0.8, weight decay 0.01, linear warm-up over 10% of the steps then linear
# decay, batch 32, max_seq_length 128; epochs per task (3, or 10 for RTE and STS-B).
#
# Environment: DATA_DIR (GLUE download, default ../shared/data/glue), INIT_CHECKPOINT (pre-training
# model_dir, native export, TF1 checkpoint or Hugging Face dir; unset = random weights, warned),
# VOCAB_FILE (default ../shared/data/vocab/bert-uncased-vocab.txt), MODEL_SIZE (small),
# MODEL_DIR (out/glue_$MODEL_SIZE), NUM_TRIALS (1), SEED (0), LR (per size), PYTHON.
#
# usage (from a task script): run_glue_task TASK EPOCHS [extra run_finetuning flags]
set -euo pipefail

run_glue_task() {
  local task="$1" epochs="$2"
  shift 2
  cd "$(dirname "${BASH_SOURCE[0]}")/../.."
  local size="${MODEL_SIZE:-small}" default_lr=3e-4
  [[ "$size" == base ]] && default_lr=1e-4
  local args=(
    --task_names "$task"
    --data_dir "${DATA_DIR:-../shared/data/glue}"
    --vocab_file "${VOCAB_FILE:-../shared/data/vocab/bert-uncased-vocab.txt}"
    --model_dir "${MODEL_DIR:-out/glue_$size}"
    --model_size "$size"
    --learning_rate "${LR:-$default_lr}"
    --num_train_epochs "$epochs"
    --train_batch_size 32
    --max_seq_length 128
    --num_trials "${NUM_TRIALS:-1}"
    --seed "${SEED:-0}"
  )
  if [[ -n "${INIT_CHECKPOINT:-}" ]]; then
    args+=(--init_checkpoint "$INIT_CHECKPOINT")
  fi
  exec "${PYTHON:-python}" run_finetuning.py "${args[@]}" "$@"
}
