#!/usr/bin/env bash
# Pre-train ConvBERT-base with the paper's recipe: scripts/pretrain_recipe.sh (DATA_DIR or BUCKET,
# TPU, flags).   DATA_DIR=/path/to/data bash scripts/pretrain_base.sh [run_pretraining.py flags]
exec bash "$(dirname "$0")/pretrain_recipe.sh" base "$@"
