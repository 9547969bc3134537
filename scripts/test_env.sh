# The test run's environment, sourced by scripts/test.sh and scripts/coverage.sh (after
# `cd` to the repository root). Sets the variables and a trap that removes the run's JAX cache.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3 JAX_PLATFORMS=cpu
# One JAX compilation cache for the run: XLA compiles the same tiny steps in many test processes
# (measured: tests/pretrain/test_jax_trainer.py + tests/training/test_nonfinite.py 209 s -> 165 s).
# Empty at the start, removed at the end: nothing carries over between runs.
jax_cache=$(mktemp -d)
# And one directory for the inputs every worker of both pytest runs would make again (the
# Hugging Face references, the tiny shards: tests/conftest.py made_once).
test_cache=$(mktemp -d)
trap 'rm -rf "$jax_cache" "$test_cache"' EXIT
export JAX_COMPILATION_CACHE_DIR="$jax_cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 CONVBERT_TEST_CACHE="$test_cache"
# XLA's CPU code generation without LLVM's optimisation passes for both passes of the suite,
# whose XLA programs (JAX-path tools, TF XLA steps, the JAX model tests) are tiny models:
# compiling is most of their time (same programs, same HLO; measured: tests/pretrain/
# test_jax_trainer.py + tests/training/test_tasks_both_cores.py 101 s -> 74 s CPU; the JAX
# model tests 83.3 / 83.2 s -> 71.9 / 71.3 s, A B A B, 2026-11-29, since their models' weights
# are drawn with NumPy: before that, initialising base-size models eagerly made unoptimised
# code the slower, 128 s -> 164 s).
xla_flags="--xla_backend_optimization_level=0${XLA_FLAGS:+ $XLA_FLAGS}"
# Likewise TensorFlow's graph optimizer (grappler) off in the tests' processes (tests/zygote.py
# tensorflow_test_settings): it rewrites each traced function before its first run, more work
# than the suite's tiny steps then do (measured: three heavy modules 146 s -> 120 s). The README
# demo's test runs with it, as users do.
export CONVBERT_TEST_GRAPPLER=0
# One thread per TensorFlow operation (its intra-op pool; the inter-op pool stays, which
# MirroredStrategy's replicas need): two workers on two cores, each op on the suite's tiny tensors
# too small to share out (measured: tests/pretrain/test_run_pretraining.py +
# tests/training/test_nonfinite.py 88 / 96 s -> 83 / 91 s, A B A B, 2026-11-29). Not
# OMP_NUM_THREADS: GNU nproc reports it, and the worker count below reads nproc.
export TF_NUM_INTRAOP_THREADS=1
cores=$(nproc)
# One pytest-xdist worker per core, at most 4 (each holds TF, torch and JAX); whole files per
# worker, so a module's fixtures are built once. CONVBERT_TEST_WORKERS overrides; 0: one process.
workers=${CONVBERT_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
if [ "$workers" = 0 ]; then parallel=(); fi
