#!/usr/bin/env bash
# Set up and run every test: the whole suite on the TensorFlow backend, then the model tests again
# on the JAX backend (the backend our GPU measurements use), so neither path rots.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
.venv/bin/python -m pytest -q "$@"
KERAS_BACKEND=jax .venv/bin/python -m pytest -q tests/model "$@"
