#!/usr/bin/env bash
# Prepare OpenWebText for pre-training (as the official build_data.sh):
#
#   DATA_DIR=/path/to/data OWT_ARCHIVE=/path/to/openwebtext.tar.xz bash scripts/prepare_openwebtext.sh
#
# 1. extracts the OpenWebText archive (https://skylion007.github.io/OpenWebTextCorpus/, 12 GB of
#    text) into $DATA_DIR/openwebtext/ (a directory of *.xz sub-archives),
# 2. puts the BERT-uncased vocab at $DATA_DIR/vocab.txt (VOCAB_FILE, default the shared copy),
# 3. runs build_openwebtext_pretraining_dataset.py -> $DATA_DIR/pretrain_tfrecords/ (1000 shards,
#    max_seq_length 128, about 30 GB). NUM_PROCESSES (default: all cores) parallelises it.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATA_DIR:?set DATA_DIR (the output directory)}"
PYTHON="${PYTHON:-.venv/bin/python}"
NUM_PROCESSES="${NUM_PROCESSES:-$(nproc)}"
VOCAB_FILE="${VOCAB_FILE:-../shared/data/vocab/bert-uncased-vocab.txt}"
mkdir -p "$DATA_DIR"
if [[ ! -d "$DATA_DIR/openwebtext" ]]; then
  : "${OWT_ARCHIVE:?set OWT_ARCHIVE to openwebtext.tar.xz (or extract it to \$DATA_DIR/openwebtext)}"
  echo "extracting $OWT_ARCHIVE into $DATA_DIR ..."
  tar -xJf "$OWT_ARCHIVE" -C "$DATA_DIR"
fi
if [[ ! -f "$DATA_DIR/vocab.txt" ]]; then
  cp "$VOCAB_FILE" "$DATA_DIR/vocab.txt"
fi
exec "$PYTHON" build_openwebtext_pretraining_dataset.py \
  --data_dir="$DATA_DIR" \
  --max_seq_length=128 \
  --num_processes="$NUM_PROCESSES" \
  "$@"
