#!/usr/bin/env bash
# Set up and run the demo: pre-train a tiny ConvBERT with replaced-token detection on text that
# ships with Python (no download), then load the exported discriminator back.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=3
.venv/bin/python run_pretraining.py "$@"
.venv/bin/python - <<'PY'
from base.command import quiet_tensorflow
quiet_tensorflow()
from model import ConvBertModel
model = ConvBertModel.from_pretrained("runs/demo")
print(f"loaded runs/demo: {model.count_params():,} parameters, config {model.config.to_dict()}")
PY
