#!/usr/bin/env bash
# Pre-train ConvBERT-medium-small with the paper's settings (Table 5 / official configure_pretraining.py):
#   lr 5e-4, batch 128, 1M steps, 10k warm-up, max_seq_length 128, mask_prob 0.15,
#   generator 1/4 of the discriminator width, disc_weight 50, checkpoint every 10k steps (keep 5).
#
#   DATA_DIR=/path/to/data bash scripts/pretrain_medium_small.sh [extra run_pretraining.py flags]
#
# DATA_DIR holds pretrain_tfrecords/ and vocab.txt (scripts/prepare_openwebtext.sh makes them);
# the model goes to $DATA_DIR/models/convbert_medium_small. Rerunning resumes from the last checkpoint.
# Several GPUs: add --distribution=mirrored; several machines: --distribution=multi_worker with
# TF_CONFIG set on each (see docs/PRETRAINING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATA_DIR:?set DATA_DIR to the directory with pretrain_tfrecords/ and vocab.txt}"
PYTHON="${PYTHON:-.venv/bin/python}"
DIST=()
exec "$PYTHON" run_pretraining.py \
  --data_dir="$DATA_DIR" \
  --model_size=medium-small \
  --model_name=convbert_medium_small \
  "${DIST[@]}" \
  "$@"
