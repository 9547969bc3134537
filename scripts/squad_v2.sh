#!/usr/bin/env bash
# SQuAD 2.0 (EM / F1 with the answerability classifier; null odds thresholded at -2.75) with the ConvBERT/ELECTRA recipe: peak lr 3e-4 (small, medium-small) or
# 1e-4 (base), layer-wise LR decay 0.8, weight decay 0.01, warm-up 10%, batch 32, 2 epochs,
# max_seq_length 512, doc_stride 128, max_query_length 64, joint start/end beam of 20.
#
#   INIT_CHECKPOINT=models/convbert_small MODEL_SIZE=small scripts/squad_v2.sh [extra flags]
#
# Data: $DATA_DIR/squad/{train,dev}-v2.0.json (DATA_DIR default ../shared/data; that copy has only
# the dev set, so give TRAIN_FILE=... for a real run). Writes predictions, n-best, null odds (2.0)
# and metrics JSON under $MODEL_DIR/results/. Pre-training at 128 leaves position embeddings
# 128..511 untrained: run_finetuning.py warns about it.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_SIZE="${MODEL_SIZE:-small}"
case "$MODEL_SIZE" in
  base) DEFAULT_LR=1e-4 ;;
  *) DEFAULT_LR=3e-4 ;;
esac
ARGS=(
  --task_names squad
  --data_dir "${DATA_DIR:-../shared/data}"
  --vocab_file "${VOCAB_FILE:-../shared/data/vocab/bert-uncased-vocab.txt}"
  --model_dir "${MODEL_DIR:-out/squad_$MODEL_SIZE}"
  --model_size "$MODEL_SIZE"
  --learning_rate "${LR:-$DEFAULT_LR}"
  --num_train_epochs 2
  --train_batch_size 32
  --max_seq_length 512
  --num_trials "${NUM_TRIALS:-1}"
  --seed "${SEED:-0}"
)
if [[ -n "${INIT_CHECKPOINT:-}" ]]; then ARGS+=(--init_checkpoint "$INIT_CHECKPOINT"); fi
if [[ -n "${TRAIN_FILE:-}" ]]; then ARGS+=(--train_file "$TRAIN_FILE"); fi
if [[ -n "${PREDICT_FILE:-}" ]]; then ARGS+=(--predict_file "$PREDICT_FILE"); fi
exec "${PYTHON:-python}" run_finetuning.py "${ARGS[@]}" "$@"
