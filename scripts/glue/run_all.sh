#!/usr/bin/env bash
# Every GLUE task x NUM_TRIALS seeds, then the table the ConvBERT/ELECTRA papers print: GLUE dev
# medians (CoLA MCC, STS-B Spearman, accuracy otherwise) and their average (WNLI excluded).
#
#   INIT_CHECKPOINT=models/convbert_small MODEL_SIZE=small NUM_TRIALS=9 \
#     MODEL_DIR=out/glue_small scripts/glue/run_all.sh [extra run_finetuning flags, e.g. --do_predict]
#
# TASKS (default "cola sst mrpc sts qqp mnli qnli rte wnli") picks tasks; a task whose data
# directory is missing under DATA_DIR is skipped with a note. With --do_predict the last step
# gathers every task's latest test predictions under $MODEL_DIR/results/leaderboard into one
# glue_submission.zip and fails naming any of the eleven server files that is missing, unless
# ALLOW_PARTIAL=1. WNLI_MAJORITY=1 submits WNLI as the majority class (as BERT did).
# Other variables as in scripts/glue/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export MODEL_SIZE="${MODEL_SIZE:-small}"
export MODEL_DIR="${MODEL_DIR:-out/glue_$MODEL_SIZE}"
export NUM_TRIALS="${NUM_TRIALS:-9}"
DATA_DIR="${DATA_DIR:-../shared/data/glue}"
export DATA_DIR
declare -A DIRS=([cola]=CoLA [sst]=SST-2 [mrpc]=MRPC [sts]=STS-B [qqp]=QQP [mnli]=MNLI
                 [qnli]=QNLI [rte]=RTE [wnli]=WNLI)
for task in ${TASKS:-cola sst mrpc sts qqp mnli qnli rte wnli}; do
  if [[ -z "${DIRS[$task]:-}" ]]; then
    echo "unknown task $task" >&2; exit 1
  fi
  if [[ ! -f "$DATA_DIR/${DIRS[$task]}/train.tsv" ]]; then
    echo "== $task: skipped ($DATA_DIR/${DIRS[$task]}/train.tsv not found)"
    continue
  fi
  echo "== $task: $NUM_TRIALS trial(s) -> $MODEL_DIR/results"
  "scripts/glue/$task.sh" "$@"
done
"${PYTHON:-python}" run_finetuning.py --print_glue_table --model_dir "$MODEL_DIR"
for arg in "$@"; do
  if [[ "$arg" == "--do_predict" || "$arg" == "--do_predict=true" ]]; then
    SUBMISSION_FLAGS=()
    [[ "${ALLOW_PARTIAL:-0}" == 1 ]] && SUBMISSION_FLAGS+=(--allow_partial)
    [[ "${WNLI_MAJORITY:-0}" == 1 ]] && SUBMISSION_FLAGS+=(--wnli_majority)
    "${PYTHON:-python}" run_finetuning.py --glue_submission --model_dir "$MODEL_DIR" \
      --data_dir "$DATA_DIR" "${SUBMISSION_FLAGS[@]}"
  fi
done
