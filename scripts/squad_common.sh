#!/usr/bin/env bash
# Shared body of scripts/squad_v1.sh and scripts/squad_v2.sh: the ConvBERT/ELECTRA SQuAD recipe,
# peak lr 3e-4 (small, medium-small) or 1e-4 (base), layer-wise LR decay 0.8, weight decay 0.01,
# warm-up 10%, batch 32, 2 epochs, max_seq_length 512, doc_stride 128, max_query_length 64, joint
# start/end beam of 20.
#
# Environment: DATA_DIR (default ../shared/data; reads squad/{train,dev}-v*.json), INIT_CHECKPOINT,
# VOCAB_FILE, MODEL_SIZE (small), MODEL_DIR, LR (per size), NUM_TRIALS (1), SEED (0), TRAIN_FILE,
# PREDICT_FILE, PYTHON.
#
# usage (from a version script, after `source`): squad_args TASK; then run
#   run_finetuning.py "${ARGS[@]}" "$@"   (the current directory is the repository root)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

squad_args() {
  local task="$1"
  local size="${MODEL_SIZE:-small}" default_lr=3e-4
  [[ "$size" == base ]] && default_lr=1e-4
  ARGS=(
    --task_names "$task"
    --data_dir "${DATA_DIR:-../shared/data}"
    --vocab_file "${VOCAB_FILE:-../shared/data/vocab/bert-uncased-vocab.txt}"
    --model_dir "${MODEL_DIR:-out/${task}_$size}"
    --model_size "$size"
    --learning_rate "${LR:-$default_lr}"
    --num_train_epochs 2
    --train_batch_size 32
    --max_seq_length 512
    --num_trials "${NUM_TRIALS:-1}"
    --seed "${SEED:-0}"
  )
  if [[ -n "${INIT_CHECKPOINT:-}" ]]; then ARGS+=(--init_checkpoint "$INIT_CHECKPOINT"); fi
  if [[ -n "${TRAIN_FILE:-}" ]]; then ARGS+=(--train_file "$TRAIN_FILE"); fi
  if [[ -n "${PREDICT_FILE:-}" ]]; then ARGS+=(--predict_file "$PREDICT_FILE"); fi
}
