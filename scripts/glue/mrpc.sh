#!/usr/bin/env bash
# MRPC (accuracy and F1) with the paper's hyper-parameters (3 epochs; the rest in common.sh).
#   INIT_CHECKPOINT=runs/small VOCAB_FILE=vocab.txt MODEL_SIZE=small NUM_TRIALS=9 \
#     MODEL_DIR=out/glue_small scripts/glue/mrpc.sh [extra run_finetuning flags]
source "$(dirname "$0")/common.sh"
run_glue_task mrpc 3 "$@"
