#!/usr/bin/env bash
# What fine-tuning writes, on both backends, for a before/after comparison of a change to the
# fine-tuning path (docs/ARCHITECTURE.md "One fine-tuning path"):
#   bash scripts/finetune_snapshot.sh OUT     # at the commit before the change, then after it
#   diff -r --exclude=tensorboard --exclude='*.zip' BEFORE/tf AFTER/tf   # and jax, tfsq, jaxsq
# A tiny random model (seed 0): GLUE MRPC + STS-B (2 trials, --do_predict, the fine-tuned models
# saved) from the TSVs on TensorFlow and from features on Keras-on-JAX (2 CPU devices), SQuAD
# 1.1 + 2.0 (2 trials) the same way, from ../shared/data. Results files and saved models are
# byte-identical where nothing changed (finetune_hparams.json and the SQuAD metrics name their
# input files, under OUT: those lines differ by OUT's path only); the zip's members too (its
# timestamps differ), and the TensorBoard scalars' values (their wall times differ). About a
# minute on 2 cores (57 s on 2026-11-28, quiet).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: finetune_snapshot.sh OUT}
SHARED=${CONVBERT_SHARED_DIR:-../shared}/data
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH=$PWD TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
mkdir -p "$OUT"
VOCAB=$SHARED/vocab/bert-uncased-vocab.txt
TINY='{"hidden_size": 32, "embedding_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64, "num_groups": 1}'
GLUE_HP="{\"model_hparam_overrides\": $TINY, \"train_batch_size\": 8, \"eval_batch_size\": 64, \"max_train_examples\": 64, \"log_every_steps\": 1, \"save_finetuned_model\": true}"
QA_HP="{\"model_hparam_overrides\": $TINY, \"train_batch_size\": 8, \"predict_batch_size\": 32, \"max_train_examples\": 32, \"max_eval_examples\": 24, \"doc_stride\": 32, \"max_query_length\": 16, \"beam_size\": 5, \"qa_hidden_size\": 32, \"n_best_size\": 5, \"log_every_steps\": 1, \"num_trials\": 2}"

# The inputs: GLUE features at 32 tokens; SQuAD split by article (the first trains, the second
# is evaluated: only the dev sets are in ../shared) and its features at 64 tokens.
KERAS_BACKEND=tensorflow "$PY" -m finetune.features --task_names=mrpc,sts \
  --data_dir="$SHARED/glue" --vocab_file="$VOCAB" --max_seq_length=32 --max_train_examples=64 \
  --splits=train,dev,test --output_dir="$OUT/inputs/glue_features" > "$OUT/inputs.log"
"$PY" - "$SHARED/squad" "$OUT/inputs/squad/squad" <<'EOF'
import json, os, sys
source, target = sys.argv[1:]
os.makedirs(target, exist_ok=True)
for version in ("1.1", "2.0"):
    with open(os.path.join(source, f"dev-v{version}.json"), encoding="utf-8") as f:
        data = json.load(f)
    for split, articles in (("train", data["data"][:1]), ("dev", data["data"][1:2])):
        with open(os.path.join(target, f"{split}-v{version}.json"), "w", encoding="utf-8") as f:
            json.dump(dict(data, data=articles), f)
EOF
KERAS_BACKEND=tensorflow "$PY" -m finetune.features --task_names=squadv1,squad \
  --data_dir="$OUT/inputs/squad" --vocab_file="$VOCAB" --max_seq_length=64 --doc_stride=32 \
  --max_query_length=16 --max_train_examples=32 --output_dir="$OUT/inputs/squad_features" \
  >> "$OUT/inputs.log"

run() {   # backend name args...
  local backend=$1 name=$2
  shift 2
  KERAS_BACKEND=$backend "$PY" run_finetuning.py --model_dir "$OUT/$name" "$@" \
    > "$OUT/$name.log" 2>&1 || { echo "$name failed: $OUT/$name.log" >&2; return 1; }
}
run tensorflow tf --hparams "$GLUE_HP" --max_seq_length 32 --max_train_steps 3 \
  --data_dir "$SHARED/glue" --vocab_file "$VOCAB" --task_names mrpc,sts --num_trials 2 --do_predict
run jax jax --hparams "$GLUE_HP" --max_seq_length 32 --max_train_steps 3 \
  --features_dir "$OUT/inputs/glue_features" --task_names mrpc,sts --num_trials 2 \
  --num_cpu_devices 2 --do_predict
run tensorflow tfsq --hparams "$QA_HP" --max_seq_length 64 --max_train_steps 3 \
  --data_dir "$OUT/inputs/squad" --vocab_file "$VOCAB" --task_names squadv1,squad
run jax jaxsq --hparams "$QA_HP" --max_seq_length 64 --max_train_steps 3 \
  --features_dir "$OUT/inputs/squad_features" --task_names squadv1,squad
echo "finetune_snapshot.sh: $OUT/{tf,jax,tfsq,jaxsq}"
