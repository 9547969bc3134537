#!/usr/bin/env bash
# Set up and run every test: the whole suite on the TensorFlow backend, then the model tests again
# on the JAX backend (the backend our GPU measurements use), so neither path rots. Prints the 25
# slowest tests and the wall time (setup included). Both runs use one pytest-xdist worker per core,
# at most 4 (CONVBERT_TEST_WORKERS overrides; 0 runs in one process), whole test files per worker, so a
# module's fixtures are built once; tests/conftest.py starts the slowest files first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup.sh test
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
cores=$(nproc)
workers=${CONVBERT_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}  # each worker holds TF, torch and JAX
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
[ "$workers" = 0 ] && parallel=()
.venv/bin/python -m pytest -q "${parallel[@]}" --durations=25 "$@"
KERAS_BACKEND=jax .venv/bin/python -m pytest -q "${parallel[@]}" tests/model "$@"
echo "test.sh: wall time $(( $(date +%s) - started ))s (setup included)"
