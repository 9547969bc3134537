#!/usr/bin/env bash
# Pre-train ConvBERT-base with the paper's settings (Table 5 / official configure_pretraining.py):
#   lr 2e-4, batch 256, 1M steps, 10k warm-up, max_seq_length 128, mask_prob 0.15,
#   generator 1/3 of the discriminator width, disc_weight 50, checkpoint every 10k steps (keep 5).
#
#   DATA_DIR=/path/to/data bash scripts/pretrain_base.sh [extra run_pretraining.py flags]
#
# DATA_DIR holds pretrain_tfrecords/ and vocab.txt (scripts/prepare_openwebtext.sh makes them);
# the model goes to $DATA_DIR/models/convbert_base. Rerunning resumes from the last checkpoint.
# Several GPUs: add --distribution=mirrored; several machines: --distribution=multi_worker with
# TF_CONFIG set on each (see docs/PRETRAINING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATA_DIR:?set DATA_DIR to the directory with pretrain_tfrecords/ and vocab.txt}"
PYTHON="${PYTHON:-.venv/bin/python}"
DIST=()
# ConvBERT-base was trained on one TPU v3-8 (batch 256). On a TPU VM: TPU=local, or a TPU name.
if [[ -n "${TPU:-}" ]]; then
  DIST=(--distribution=tpu "--tpu=${TPU}")
fi
exec "$PYTHON" run_pretraining.py \
  --data_dir="$DATA_DIR" \
  --model_size=base \
  --model_name=convbert_base \
  "${DIST[@]}" \
  "$@"
