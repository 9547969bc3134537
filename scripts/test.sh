#!/usr/bin/env bash
# Set up and run every test: the whole suite on the TensorFlow backend, then the model tests again
# on the JAX backend (the backend our GPU measurements use), so neither path rots. Prints the 25
# slowest tests and the wall time (setup included). The tests' Python subprocesses are forks of a
# process that imported TensorFlow once (tests/zygote.py). Both runs use one pytest-xdist worker
# per core, at most 4 (CONVBERT_TEST_WORKERS overrides; 0 runs in one process), whole test files
# per worker, so a module's fixtures are built once; tests/conftest.py starts the slowest files
# first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup.sh test
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
# One JAX compilation cache for the run: XLA compiles the same tiny steps in many test processes
# (measured: tests/pretrain/test_jax_trainer.py + tests/training/test_nonfinite.py 209 s -> 165 s).
# Empty at the start, removed at the end: nothing carries over between runs.
jax_cache=$(mktemp -d)
trap 'rm -rf "$jax_cache"' EXIT
export JAX_COMPILATION_CACHE_DIR="$jax_cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
cores=$(nproc)
workers=${CONVBERT_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}  # each worker holds TF, torch and JAX
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
[ "$workers" = 0 ] && parallel=()
.venv/bin/python -m pytest -q "${parallel[@]}" --durations=25 "$@"
KERAS_BACKEND=jax .venv/bin/python -m pytest -q "${parallel[@]}" tests/model "$@"
echo "test.sh: wall time $(( $(date +%s) - started ))s (setup included)"
