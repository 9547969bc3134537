#!/usr/bin/env bash
# Prepare OpenWebText for pre-training (as the official build_data.sh):
#
#   DATA_DIR=/path/to/data OWT_ARCHIVE=/path/to/openwebtext.tar.xz bash scripts/prepare_openwebtext.sh
#
# 1. unpacks the OpenWebText release (https://skylion007.github.io/OpenWebTextCorpus/, a 12 GB
#    tar.xz) into $DATA_DIR/openwebtext/: its ~20,000 *.xz sub-archives, still compressed (about
#    the release's size on disk; the ~38 GB of text is never written out),
# 2. puts the BERT-uncased vocab at $DATA_DIR/vocab.txt (VOCAB_FILE, default the shared copy),
# 3. runs build_openwebtext_pretraining_dataset.py -> $DATA_DIR/pretrain_tfrecords/ (1000 shards,
#    max_seq_length 128, about 30 GB): each sub-archive is one unit of work, streamed (no staging
#    folder). NUM_PROCESSES (default: all cores) parallelises it.
#
# Extra arguments go to the builder, e.g. the Beam DirectRunner on several worker processes:
#   bash scripts/prepare_openwebtext.sh --runner=DirectRunner --direct_num_workers=8 \
#       --direct_running_mode=multi_processing
# (with --runner, NUM_PROCESSES is not used: the runner's workers are the parallelism).
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
processes=(--num_processes="$NUM_PROCESSES")
for arg in "$@"; do
  [[ "$arg" == --runner=* ]] && processes=()
done
exec "$PYTHON" build_openwebtext_pretraining_dataset.py \
  --data_dir="$DATA_DIR" \
  --max_seq_length=128 \
  "${processes[@]}" \
  "$@"
