#!/usr/bin/env bash
# The one-GPU run (docs/GPU.md): pre-train ConvBERT-small and ELECTRA-small for the same number of
# steps, chosen so the run fits --budget_s, fine-tune them and a random init on five GLUE tasks,
# measure RTD throughput. Keras-on-JAX; `tensorflow` is never imported. Needs the bundle
# (bash scripts/gpu_bundle.sh) and a Python with JAX; keras / optree / namex come from the
# bundle's wheels when that Python lacks them (no network). Rerun the same command to resume.
#   bash scripts/gpu_run.sh --output_dir=DIR [--budget_s=330] [--bundle_dir=gpu_bundle]
#                           [--work_dir=runs/gpu_budget] [--smoke]
# DIR gets at most 8 files: results.json, results.md, throughput.json, pretraining_curves.png,
# glue_scores.png, gpu_run.log.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=gpu_bundle out= smoke=
for arg in "$@"; do
  case "$arg" in
    --bundle_dir=*) bundle="${arg#*=}" ;;
    --output_dir=*) out="${arg#*=}" ;;
    --smoke) smoke=1 ;;
  esac
done
[ -n "$out" ] || { echo "error: --output_dir=DIR is required" >&2; exit 2; }
[ -f "$bundle/bundle.json" ] || { echo "error: $bundle/bundle.json not found: build the bundle with bash scripts/gpu_bundle.sh" >&2; exit 2; }
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -n "$smoke" ] && export JAX_PLATFORMS=cpu
if ! "$python" -c "import keras, optree, namex" 2>/dev/null; then
  site="${GPU_RUN_SITE:-/tmp/convbert_gpu_site}"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$bundle"/wheels/*.whl
  export PYTHONPATH="$site:$PYTHONPATH"
fi
mkdir -p "$out"
set -o pipefail
# tensorflow made unimportable: this path must not need it (a GPU box without it, a JAX TPU VM).
"$python" -c "import runpy, sys; sys.modules['tensorflow'] = None; sys.argv = ['reproduce.gpu_budget'] + sys.argv[1:]; runpy.run_module('reproduce.gpu_budget', run_name='__main__')" "$@" 2>&1 | tee "$out/gpu_run.log"
