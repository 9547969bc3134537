#!/usr/bin/env bash
# SQuAD 2.0 (EM / F1 with the answerability classifier; null odds thresholded at -2.75) with the ConvBERT/ELECTRA recipe
# (hyper-parameters and environment variables in scripts/squad_common.sh).
#
#   INIT_CHECKPOINT=models/convbert_small MODEL_SIZE=small scripts/squad_v2.sh [extra flags]
#
# Data: $DATA_DIR/squad/{train,dev}-v2.0.json (DATA_DIR default ../shared/data; that copy has only
# the dev set, so give TRAIN_FILE=... for a real run). Writes predictions, n-best, null odds (2.0)
# and metrics JSON under $MODEL_DIR/results/. Pre-training at 128 leaves position embeddings
# 128..511 untrained: run_finetuning.py warns about it.
source "$(dirname "$0")/squad_common.sh"
squad_args squad
exec "${PYTHON:-python}" run_finetuning.py "${ARGS[@]}" "$@"
