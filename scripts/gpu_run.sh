#!/usr/bin/env bash
# The one-GPU run (docs/GPU.md): pre-train ConvBERT-small and ELECTRA-small for the same number of
# steps, chosen so the run fits the session's device window, fine-tune them and a random init on
# five GLUE tasks, measure RTD throughput. Keras-on-JAX; `tensorflow` is never imported. Needs the
# bundle (bash scripts/gpu_bundle.sh) and a Python with JAX; keras / optree / namex come from the
# bundle's wheels when that Python lacks them (no network). The window is two calls on one
# machine (reproduce/gpu_plan.py): call 1 plans, pre-trains and fine-tunes seed 1; call 2
# (--call=2, on the warm machine, same work folder) fine-tunes the seeds left. Rerun a call to
# resume it.
#   bash scripts/gpu_run.sh --output_dir=DIR [--call=1|2] [--budget_s=S] [--bundle_dir=gpu_bundle]
#                           [--work_dir=runs/gpu_budget] [--fresh] [--rehearse]
#                           [--compile_cache=jax_cache.tar.gz] [--jax_cache_dir=DIR|off]
# --rehearse: the same path and structure on a tiny model on the CPU (the check CI runs): the
# bundle's wheels are installed into an empty folder and imported from there, as on a GPU machine
# without Keras; a program compiled after the compile stage, a missing cell or a misreported step
# count fails it.
# The work folder belongs to one run (recipe, model, seed, bundle): --rehearse's default is
# runs/gpu_rehearsal, the real run's runs/gpu_budget; one made for another run is refused in one
# line, --fresh starts it afresh (reproduce/gpu_work.py). The bundle's wheels are for the Python
# it was built for (bash scripts/gpu_bundle.sh --python_version=X.Y; bundle.json "python").
# JAX's persistent compilation cache (training/compile_cache.py) is <work_dir>/jax_cache unless
# --jax_cache_dir (or $CONVBERT_JAX_CACHE_DIR) names another; --compile_cache=FILE unpacks an
# earlier run's DIR/jax_cache.tar.gz into it first (training/compile_cache.py unpack_archive: into
# a scratch folder, moved in whole or not at all; damaged entries left out), so the programs it
# compiled are read, not compiled again (same GPU kind, same jax/jaxlib). At the end the cache is
# packed into DIR/jax_cache.tar.gz, also after a failed run; over 16 MiB it is still written
# whole, and the log says so in one line (a device tool that returns files of at most 16 MiB
# leaves it behind).
# DIR gets at most 8 files: results.json, results.md, throughput.json, pretraining_curves.png,
# glue_scores.png, gpu_run.log (every call's console on this work folder, appended),
# jax_cache.tar.gz.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=gpu_bundle out= rehearse= work= cache= archive= call=1 fresh=
args=()        # what reproduce.gpu_budget gets: every argument but --compile_cache
for arg in "$@"; do
  case "$arg" in
    --bundle_dir=*) bundle="${arg#*=}" ;;
    --output_dir=*) out="${arg#*=}" ;;
    --work_dir=*) work="${arg#*=}" ;;
    --jax_cache_dir=*) cache="${arg#*=}" ;;
    --compile_cache=*) archive="${arg#*=}"; continue ;;
    --rehearse|--smoke) rehearse=1 ;;
    --call=*) call="${arg#*=}" ;;
    --fresh) fresh=1 ;;
  esac
  args+=("$arg")
done
[ -n "$out" ] || { echo "error: --output_dir=DIR is required" >&2; exit 2; }
if [ -z "$work" ]; then      # reproduce/gpu_work.py default_work_dir
  if [ -n "$rehearse" ]; then work=runs/gpu_rehearsal; else work=runs/gpu_budget; fi
  args+=("--work_dir=$work")
fi
[ -f "$bundle/bundle.json" ] || { echo "error: $bundle/bundle.json not found: build the bundle with bash scripts/gpu_bundle.sh" >&2; exit 2; }
[ -z "$archive" ] || [ -f "$archive" ] || { echo "error: --compile_cache=$archive: no such file" >&2; exit 2; }
if [ -z "$cache" ]; then
  cache="${CONVBERT_JAX_CACHE_DIR-$work/jax_cache}"
  args+=("--jax_cache_dir=$cache")
fi
case "${cache,,}" in off|none|0|"") cache= ;; esac     # training/compile_cache.py's off values
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -n "$rehearse" ] && export JAX_PLATFORMS=cpu
# The rehearsal installs the wheels whatever this Python has, as on a GPU machine without Keras.
if [ -n "$rehearse" ] || ! "$python" -c "import keras, optree, namex" 2>/dev/null; then
  # the wheels are built for one Python (bundle.json "python"; bundles before it: 3.12)
  want=$(sed -n 's/.*"python": *"\([0-9.]*\)".*/\1/p' "$bundle/bundle.json"); want=${want:-3.12}
  have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$want" != "$have" ]; then
    echo "error: $bundle/wheels are for CPython $want, $python is $have: rebuild the bundle with bash scripts/gpu_bundle.sh --python_version=$have" >&2
    exit 2
  fi
  site="${GPU_RUN_SITE:-/tmp/convbert_gpu_site}"
  if [ -n "$rehearse" ]; then site=$(mktemp -d); trap 'rm -rf "$site"' EXIT; fi   # empty
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$bundle"/wheels/*.whl
  export PYTHONPATH="$site:$PYTHONPATH"
fi
mkdir -p "$out" "$work"
# One log for the run: every call on this work folder appends to <work>/gpu_run.log, and DIR gets
# the whole of it (a fresh DIR per call on a device tool still shows the calls before).
log="$work/gpu_run.log"
[ -z "$fresh" ] || : > "$log"
echo "=== call $call, $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >> "$log"
cp "$log" "$out/gpu_run.log"
say() { echo "$1" | tee -a "$log" "$out/gpu_run.log"; }
if [ -n "$archive" ]; then
  if [ -z "$cache" ]; then
    say "compile cache: off, $archive not unpacked"
  else
    # training/compile_cache.py unpack_archive: into a scratch folder first, moved in only when
    # the whole archive read cleanly; a torn one leaves the cache as it was (and costs the
    # compile time it would have saved, not the run). One line, status 0 either way.
    if ! line=$("$python" -m training.compile_cache unpack "$archive" "$cache" 2>&1); then
      line="compile cache: $archive not unpacked (training.compile_cache failed${line:+: ${line##*$'\n'}}); the cache in $cache is used as it was"
    fi
    say "$line"
  fi
fi
status=0
# tensorflow made unimportable: this path must not need it (a GPU box without it, a JAX TPU VM).
# In the background, so that a SIGTERM / SIGINT to this script (a time limit, a preemption)
# reaches the run at once: it records where it stopped, writes its report and ends; the cache is
# packed after it as after any run.
"$python" -c "import runpy, sys; sys.modules['tensorflow'] = None; sys.argv = ['reproduce.gpu_budget'] + sys.argv[1:]; runpy.run_module('reproduce.gpu_budget', run_name='__main__')" "${args[@]}" > >(tee -a "$log" "$out/gpu_run.log") 2>&1 &
run=$!
stopped=
forward() { if [ -z "$stopped" ]; then stopped=$1; kill "-$1" "$run" 2>/dev/null || true; fi; }
trap 'forward TERM' TERM
trap 'forward INT' INT
while :; do
  wait "$run" && status=0 || status=$?
  kill -0 "$run" 2>/dev/null || break      # a trap ended the wait: wait for the run itself
done
trap - TERM INT
sleep 0.2                                  # tee's last lines
[ -z "$stopped" ] || say "gpu_run.sh: stopped by SIG$stopped; rerun the same command to continue"
# What this run and the ones before it compiled, for the next machine (--compile_cache); written
# to a temporary name first, so a cut-off pack leaves no truncated archive behind.
if [ -n "$cache" ] && [ -d "$cache" ] && [ -n "$(ls -A "$cache")" ]; then
  if tar -czf "$out/.jax_cache.tar.gz.tmp" -C "$cache" --exclude='./.unpack.*' . && mv "$out/.jax_cache.tar.gz.tmp" "$out/jax_cache.tar.gz"; then
    size=$(wc -c < "$out/jax_cache.tar.gz")
    if [ "$size" -gt $((16 * 1024 * 1024)) ]; then
      say "compile cache: $out/jax_cache.tar.gz is $((size / 1024 / 1024)) MiB, over the 16 MiB a device tool returns"
    else
      say "compile cache: $(find "$cache" -name '*-cache' | wc -l) programs packed into $out/jax_cache.tar.gz ($(( (size + 1023) / 1024 )) KiB)"
    fi
  else
    rm -f "$out/.jax_cache.tar.gz.tmp"
    say "compile cache: packing $cache failed"
  fi
fi
exit "$status"
