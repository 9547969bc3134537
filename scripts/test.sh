#!/usr/bin/env bash
# Set up and run every test: the whole suite on the TensorFlow backend, then the model tests again
# on the JAX backend (the backend our GPU measurements use), so neither path rots. Prints the 25
# slowest tests and the wall time (setup included).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup.sh test
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
.venv/bin/python -m pytest -q --durations=25 "$@"
KERAS_BACKEND=jax .venv/bin/python -m pytest -q tests/model "$@"
echo "test.sh: wall time $(( $(date +%s) - started ))s (setup included)"
