#!/usr/bin/env bash
# Create .venv (once) and install the toolkit into it, editable.
#   bash scripts/setup.sh         # the toolkit: TensorFlow 2.21 (2.20 also works), tensorflow-text, Keras 3, ...
#   bash scripts/setup.sh test    # plus pytest, torch 2.13 (CPU), transformers, JAX and Apache Beam for the tests
#   bash scripts/setup.sh beam    # plus Apache Beam: the shard builder on a Beam runner (`dataflow`: with its GCP clients)
#   bash scripts/setup.sh tpu     # a TPU VM: TensorFlow 2.20 with tensorflow-tpu, cloud-tpu-client
# The packages are installed by uv (bootstrapped into .venv from PyPI) with the machine's pip
# settings (index, find-links, constraints, certificate): a fresh `test` install 91 s -> 52 s on
# 2 cores (empty uv cache), as uv unpacks in parallel. No byte-compiling at install: Python
# compiles a module when it is first imported, and the suite imports a small part of the ~20,000
# files (measured in a clean clone, warm uv cache: install 34.9-49.0 s -> 8.2-9.8 s; the test
# run's collection then 13.6 -> 26.8 s, once). CONVBERT_SETUP_INSTALLER=pip installs
# with pip alone, as does any machine where uv cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
spec="."
[ -n "${1:-}" ] && spec=".[$1]"
installer=${CONVBERT_SETUP_INSTALLER:-uv}
if [ "$installer" = uv ] && [ ! -x .venv/bin/uv ] \
    && ! .venv/bin/pip install -q uv 2>/dev/null; then
  installer=pip
fi
if [ "$installer" = uv ]; then
  # uv reads no pip configuration: hand it pip's (from its files and PIP_* variables).
  uv_flags=(--python .venv/bin/python)
  while IFS= read -r line; do
    value=${line#*=}; value=${value#\'}; value=${value%\'}
    key=${line%%=*}
    case "${key##*.}" in
      index-url) uv_flags+=(--index-url "$value") ;;
      extra-index-url) for v in $value; do uv_flags+=(--extra-index-url "$v"); done ;;
      find-links) for v in $value; do uv_flags+=(--find-links "$v"); done ;;
      constraint) for v in $value; do uv_flags+=(-c "$v"); done ;;
      cert) export SSL_CERT_FILE="$value" ;;
    esac
  done < <(.venv/bin/pip config list 2>/dev/null)
  # As pip does: the best version from every index, not the first index that has the package.
  uv_flags+=(--index-strategy unsafe-best-match)
fi
# torch is pinned in the `test` extra; the constraint keeps transformers from pulling another build.
if [ "$installer" = uv ]; then
  .venv/bin/uv pip install -q "${uv_flags[@]}" -e "$spec" -c <(echo "torch==2.13.0")
else
  .venv/bin/pip install -q -e "$spec" -c <(echo "torch==2.13.0")
fi
if [ "${1:-}" = "tpu" ]; then
  # tensorflow-text pulls the CPU `tensorflow` wheel beside `tensorflow-tpu` (same version, same
  # files): reinstall the TPU build last so its files are the ones on disk (docs/TPU.md §3).
  .venv/bin/pip install -q --force-reinstall --no-deps "tensorflow-tpu==2.20.*"
fi
