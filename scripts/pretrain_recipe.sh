#!/usr/bin/env bash
# The paper's pre-training recipe for one size (Table 5 / official configure_pretraining.py, via
# pretrain/hparams.py): 1M steps, 10k warm-up, max_seq_length 128, mask_prob 0.15, disc_weight 50,
# checkpoint every 10k steps (keep 5); per size lr / batch / generator width:
#   small 3e-4 / 128 / 1/4;  medium-small 5e-4 / 128 / 1/4;  base 2e-4 / 256 / 1/3.
# Called by scripts/pretrain_{small,medium_small,base}.sh; `SIZE` may also be a configs/ row name.
#
#   DATA_DIR=/path/to/data bash scripts/pretrain_base.sh [extra run_pretraining.py flags]
#   BUCKET=gs://my-bucket/owt TPU=local bash scripts/pretrain_base.sh     # on a TPU VM
#   BUCKET=gs://my-bucket/owt TPU=my-v3-8 bash scripts/pretrain_base.sh --tpu_zone=Z --gcp_project=P
#
# DATA_DIR (or BUCKET, the same thing on Cloud Storage) holds pretrain_tfrecords/ and vocab.txt
# (scripts/prepare_openwebtext.sh makes them); the model goes to <DATA_DIR>/models/convbert_<size>
# unless --model_dir is given. Rerunning resumes from the last checkpoint.
# TPU=<name | local | grpc://...>: TensorFlow's TPUStrategy with --steps_per_loop=200 (ELECTRA's
# iterations_per_loop) unless the flags set it. With KERAS_BACKEND=jax every local device (the TPU
# VM's 8 cores) is used and TPU only adds a note. Several GPUs: add --distribution=mirrored.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${1:?usage: pretrain_recipe.sh SIZE [run_pretraining.py flags]}"
shift
DATA_DIR="${DATA_DIR:-${BUCKET:-}}"
: "${DATA_DIR:?set DATA_DIR (or BUCKET=gs://...) to the directory with pretrain_tfrecords/ and vocab.txt}"
PYTHON="${PYTHON:-.venv/bin/python}"
EXTRA=()
if [[ -n "${TPU:-}" ]]; then
  if [[ "${KERAS_BACKEND:-}" == "jax" ]]; then
    echo "note: KERAS_BACKEND=jax uses every local device; TPU=${TPU} is not passed on" >&2
  else
    EXTRA=("--tpu=${TPU}")
    [[ " $* " == *" --steps_per_loop="* ]] || EXTRA+=("--steps_per_loop=200")
  fi
fi
exec "$PYTHON" run_pretraining.py \
  --data_dir="$DATA_DIR" \
  --model_size="$SIZE" \
  --model_name="convbert_${SIZE//-/_}" \
  "${EXTRA[@]}" \
  "$@"
