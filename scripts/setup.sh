#!/usr/bin/env bash
# Create .venv (once) and install the toolkit into it, editable.
#   bash scripts/setup.sh         # the toolkit: TensorFlow 2.21 (2.20 also works), tensorflow-text, Keras 3, ...
#   bash scripts/setup.sh test    # plus pytest, torch 2.13 (CPU), transformers, JAX and Apache Beam for the tests
#   bash scripts/setup.sh beam    # plus Apache Beam: the shard builder on a Beam runner (`dataflow`: with its GCP clients)
#   bash scripts/setup.sh tpu     # a TPU VM: TensorFlow 2.20 with tensorflow-tpu, cloud-tpu-client
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
spec="."
[ -n "${1:-}" ] && spec=".[$1]"
# torch is pinned in the `test` extra; the constraint keeps transformers from pulling another build.
.venv/bin/pip install -q -e "$spec" -c <(echo "torch==2.13.0")
if [ "${1:-}" = "tpu" ]; then
  # tensorflow-text pulls the CPU `tensorflow` wheel beside `tensorflow-tpu` (same version, same
  # files): reinstall the TPU build last so its files are the ones on disk (docs/TPU.md §3).
  .venv/bin/pip install -q --force-reinstall --no-deps "tensorflow-tpu==2.20.*"
fi
