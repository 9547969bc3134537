#!/usr/bin/env bash
# The reproduction (docs/RESULTS.md): corpus -> shards -> pre-train ConvBERT and ELECTRA -> GLUE.
#   bash scripts/reproduce.sh --scale tiny      # ~2.5 h on 2 CPU cores (+1.5-2 h for the PyTorch
#                                               # reference; --noreference skips it); ../shared data
#   bash scripts/reproduce.sh --scale small --corpus_dirs=/data/owt/text --glue_dir=/data/glue \
#       --output_dir=/data/repro_small --pretrain_flags='--distribution=tpu --tpu=my-tpu'
#   (a bucket --output_dir is refused by the drivers until every write goes through tf.io.gfile)
# Defaults (overridable by the flags that follow): the ../shared corpora, GLUE and BERT vocab, and
# runs/repro_<scale>. Rerun the same command to resume; finished stages are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
scale=tiny
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale="$2"; shift 2 ;;
    --scale=*) scale="${1#--scale=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -x .venv/bin/python ] || bash scripts/setup.sh test
shared=../shared/data
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python run_reproduction.py --scale="$scale" \
  --corpus_dirs="$shared/corpus/gutenberg-en,$shared/corpus/wikitext-2-raw" \
  --glue_dir="$shared/glue" --vocab_file="$shared/vocab/bert-uncased-vocab.txt" \
  --output_dir="runs/repro_$scale" --reference ${args[@]+"${args[@]}"}
