#!/usr/bin/env bash
# Line coverage (coverage.py) of the toolkit by the whole test suite, both backends, subprocesses
# included (the test processes start coverage through its `patch = subprocess`, .coveragerc);
# prints the total and writes the per-file table to .coverage_data/report.txt. Failing tests do
# not stop it: the figure is what ran.
#   bash scripts/coverage.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
rm -rf .coverage_data && mkdir -p .coverage_data
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
export COVERAGE_RCFILE="$PWD/.coveragerc" CONVBERT_ROOT="$PWD"
# One JAX compilation cache for the run: XLA compiles the same tiny steps in many test processes
# (measured: tests/pretrain/test_jax_trainer.py + tests/training/test_nonfinite.py 209 s -> 165 s).
# Empty at the start, removed at the end: nothing carries over between runs.
jax_cache=$(mktemp -d)
trap 'rm -rf "$jax_cache"' EXIT
export JAX_COMPILATION_CACHE_DIR="$jax_cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
cores=$(nproc)
parallel=(-n "${CONVBERT_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}" --dist loadfile --no-loadscope-reorder)
.venv/bin/python -m coverage run -m pytest -q "${parallel[@]}" "$@" || true
KERAS_BACKEND=jax .venv/bin/python -m coverage run -m pytest -q "${parallel[@]}" tests/model "$@" \
  || true
.venv/bin/python -m coverage combine -q
.venv/bin/python -m coverage report > .coverage_data/report.txt
tail -1 .coverage_data/report.txt
