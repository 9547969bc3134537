#!/usr/bin/env bash
# The GPU run's bundle (docs/GPU.md): pre-training arrays from ../shared/data/corpus (held-out
# shard apart), the tokenized GLUE features and the keras / optree / namex wheels for the GPU
# machine's CPython (--python_version, default 3.12), in gpu_bundle/ (git-ignored, <= 60 MiB; it
# prints its size). --wheels_from=DIR: the wheels from that folder, not the package index (offline).
#   bash scripts/gpu_bundle.sh [--output_dir=gpu_bundle] [--shared_dir=../shared] [--python_version=3.12]
#                              [--wheels_from=DIR]
# PYTHON: the interpreter (default .venv/bin/python, which this script sets up; a given one is
# used as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PYTHON:-}" ] || bash scripts/setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3
exec "${PYTHON:-.venv/bin/python}" -m reproduce.gpu_bundle "$@"
