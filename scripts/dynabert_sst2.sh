#!/usr/bin/env bash
# The DynaBERT experiment of docs/DYNABERT.md ("Experiments"): a small random-init ConvBERT
# teacher fine-tuned on SST-2, DynaBERT-W + DynaBERT over three seeds, then the 12-cell grid
# (DynaBERT vs the same cells cut from the plain teacher) on the SST-2 dev set.
#
#   GLUE=/abs/path/glue VOCAB=/abs/path/vocab.txt OUT=runs/dynabert_sst2 bash scripts/dynabert_sst2.sh
#
# Resumable: a finished teacher is kept, and elastic.run skips finished phases and resumes an
# interrupted one from its checkpoints. Wall time and load averages go to $OUT/timing.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
GLUE=${GLUE:-../shared/data/glue}
VOCAB=${VOCAB:-../shared/data/vocab/bert-uncased-vocab.txt}
OUT=${OUT:-runs/dynabert_sst2}
SEEDS=${SEEDS:-0,1,2}
mkdir -p "$OUT"
log() { echo "$(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/timing.log"; }

# 4 layers, hidden 128, 2 self-attention + 2 convolution heads of 32, FFN 512; sequence 64;
# the first 8,000 training examples.
MODEL='{"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 512}'
TEACHER_HP="{\"model_size\": \"small\", \"model_hparam_overrides\": $MODEL, \"max_seq_length\": 64,
  \"max_train_examples\": 8000, \"num_train_epochs\": 3, \"learning_rate\": 1e-3,
  \"train_batch_size\": 32, \"save_finetuned_model\": true, \"seed\": 0}"
DYNA_HP='{"model_size": "small", "max_seq_length": 64, "max_train_examples": 8000,
  "num_train_epochs": 1, "learning_rate": 2e-4, "train_batch_size": 32}'

if ! ls "$OUT"/teacher/finetuned/*/model.safetensors >/dev/null 2>&1; then
  log "teacher start"
  "$PY" run_finetuning.py --task_names=sst-2 --data_dir="$GLUE" --vocab_file="$VOCAB" \
      --model_dir="$OUT/teacher" --hparams="$TEACHER_HP"
  log "teacher done"
fi
TEACHER=$(ls -d "$OUT"/teacher/finetuned/*/ | head -1)

log "dynabert start seeds=$SEEDS"
"$PY" -m elastic.run --task_name=sst-2 --teacher_dir="$TEACHER" --data_dir="$GLUE" \
    --vocab_file="$VOCAB" --output_dir="$OUT/dynabert" --phases=width,depth --seeds="$SEEDS" \
    --hparams="$DYNA_HP"
log "dynabert done"
