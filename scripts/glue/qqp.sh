#!/usr/bin/env bash
# QQP (accuracy / F1) with the ConvBERT paper's fine-tuning hyper-parameters (Table 6, official
# configure_finetuning.py): peak lr 3e-4 (small, medium-small) or 1e-4 (base), layer-wise LR decay
# 0.8, weight decay 0.01, linear warm-up over 10% of the steps then linear decay, batch 32,
# max_seq_length 128, 3 epochs.
#
#   INIT_CHECKPOINT=models/convbert_small VOCAB_FILE=vocab.txt MODEL_SIZE=small \
#     NUM_TRIALS=9 MODEL_DIR=out/glue_small scripts/glue/qqp.sh [extra run_finetuning flags]
#
# Environment: DATA_DIR (GLUE download, default ../shared/data/glue), INIT_CHECKPOINT (pre-training
# model_dir, native export, TF1 checkpoint or Hugging Face dir; unset = random weights, warned),
# VOCAB_FILE (default ../shared/data/vocab/bert-uncased-vocab.txt), MODEL_SIZE (small),
# MODEL_DIR (out/glue_$MODEL_SIZE), NUM_TRIALS (1), SEED (0), LR (per size), PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL_SIZE="${MODEL_SIZE:-small}"
case "$MODEL_SIZE" in
  base) DEFAULT_LR=1e-4 ;;
  *) DEFAULT_LR=3e-4 ;;
esac
ARGS=(
  --task_names qqp
  --data_dir "${DATA_DIR:-../shared/data/glue}"
  --vocab_file "${VOCAB_FILE:-../shared/data/vocab/bert-uncased-vocab.txt}"
  --model_dir "${MODEL_DIR:-out/glue_$MODEL_SIZE}"
  --model_size "$MODEL_SIZE"
  --learning_rate "${LR:-$DEFAULT_LR}"
  --num_train_epochs 3
  --train_batch_size 32
  --max_seq_length 128
  --num_trials "${NUM_TRIALS:-1}"
  --seed "${SEED:-0}"
)
if [[ -n "${INIT_CHECKPOINT:-}" ]]; then
  ARGS+=(--init_checkpoint "$INIT_CHECKPOINT")
fi
exec "${PYTHON:-python}" run_finetuning.py "${ARGS[@]}" "$@"
