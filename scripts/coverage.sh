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
source scripts/test_env.sh
export COVERAGE_RCFILE="$PWD/.coveragerc" CONVBERT_ROOT="$PWD"
XLA_FLAGS="$xla_flags" .venv/bin/python -m coverage run -m pytest -q "${parallel[@]}" \
  "$@" || true
XLA_FLAGS="$xla_flags" KERAS_BACKEND=jax .venv/bin/python -m coverage run -m pytest -q \
  "${parallel[@]}" tests/model "$@" || true
.venv/bin/python -m coverage combine -q
.venv/bin/python -m coverage report > .coverage_data/report.txt
grep "^TOTAL" .coverage_data/report.txt   # (its last line may be "N empty files skipped.")
