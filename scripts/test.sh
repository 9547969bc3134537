#!/usr/bin/env bash
# Set up and run every test: the whole suite on the TensorFlow backend, then the model tests again
# on the JAX backend (the backend our GPU measurements use), so neither path rots. Prints the 25
# slowest tests and the wall time (setup included). The tests' Python subprocesses are forks of a
# process that imported TensorFlow once (tests/zygote.py). The environment (one JAX compilation
# cache, XLA flags, pytest-xdist workers: CONVBERT_TEST_WORKERS) is scripts/test_env.sh's;
# tests/conftest.py starts the slowest files first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup.sh test
source scripts/test_env.sh
# Both passes below: a backend-independent test runs in one of them (tests/conftest.py).
export CONVBERT_TEST_TWO_PASSES=1
XLA_FLAGS="$xla_flags" .venv/bin/python -m pytest -q "${parallel[@]}" --durations=25 "$@"
XLA_FLAGS="$xla_flags" KERAS_BACKEND=jax .venv/bin/python -m pytest -q "${parallel[@]}" \
  tests/model "$@"
echo "test.sh: wall time $(( $(date +%s) - started ))s (setup included)"
