"""Shared pytest fixtures.

`../shared` (real GLUE/SQuAD/WikiText data, the BERT vocab, the HF oracle tool) sits beside the
repository in CI and on developer machines, but not in a user's fresh clone: tests that read it
use `shared_path(...)`, which skips cleanly when it is absent.
"""
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO_ROOT.parent / "shared"))
# One directory per test run (scripts/test_env.sh makes it and removes it at the end) for what
# every worker of both runs (TensorFlow, then JAX) would otherwise make again: see made_once.
RUN_CACHE_ENV = "CONVBERT_TEST_CACHE"


# Modules whose fixtures run a whole pipeline (a minute or more on 2 cores). scripts/test.sh runs
# the suite with pytest-xdist, one worker per core and whole files per worker (`--dist loadfile
# --no-loadscope-reorder`): these start first, longest first, so the run does not end with one of
# them alone on one core while the other core idles.
# Order: seconds per module in a measured run (--durations=0, 2 workers, 2026-11-26 23:05),
# longest first.
SLOW_MODULES = (
    "tests/test_gpu_run.py", "tests/finetune/test_run_finetuning.py", "tests/test_reproduction.py",
    "tests/training/test_nonfinite.py", "tests/training/test_tasks_both_cores.py",
    "tests/pretrain/test_run_pretraining.py", "tests/finetune/test_run_finetuning_features.py",
    "tests/pretrain/test_jax_trainer.py", "tests/test_fault_injection.py",
    "tests/training/test_xla_compile.py", "tests/data/test_bench_builders.py",
    "tests/analysis/test_ablation.py", "tests/model/test_hf_parity.py",
    "tests/elastic/test_grid.py", "tests/elastic/test_train.py", "tests/elastic/test_pretrain.py",
    "tests/model/test_checkpoints.py", "tests/finetune/test_squad_finetune.py",
    "tests/model/test_paper_configs.py", "tests/pretrain/test_distribution.py",
    "tests/lm/test_lm.py", "tests/finetune/test_jax_finetune.py",
    "tests/finetune/test_squad_features.py",
)


# `python -c TENSORFLOW_WATCH script.py ARGS...` runs a command-line tool where TensorFlow IS
# importable, for the Keras-on-JAX path, which must never import it anyway (issue #50: Keras'
# own `set_random_seed` imports it wherever it is installed). If the tool imported it, the
# process ends with status 3 and the stack of the first `import tensorflow` on stderr. It checks
# `"tensorflow" in sys.modules`, so tests/zygote.py gives it a fresh interpreter (a fork would
# inherit the zygote's modules).
TENSORFLOW_WATCH = r"""
import os, runpy, sys, traceback
first = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text") and not first:
            first.append(name + ":\n" + "".join(traceback.format_stack()[:-1]))
        return None
sys.meta_path.insert(0, Watch())
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    if "tensorflow" in sys.modules:
        print("error: tensorflow was imported, first " + (first[0] if first else "?"),
              file=sys.stderr, flush=True)
        os._exit(3)
"""


_SHARED_REGISTRY = pytest.StashKey[bool]()
_OWN_JAX_CACHE = pytest.StashKey[str]()


def pytest_configure(config):
    """The tests' Python subprocesses (the command-line tools, run as a user runs them) are forks
    of a process that imported TensorFlow once: tests/zygote.py. pytest-xdist's controller runs
    no test: it makes the registry its workers share their zygotes in.
    CONVBERT_TEST_ZYGOTE=0 turns it off."""
    controller = not hasattr(config, "workerinput") and \
        getattr(config.option, "dist", "no") not in (None, "no")
    # Run without scripts/test_env.sh (a plain `pytest`): the JAX commands' compilation cache
    # (training/compile_cache.py) in a directory of this run, as test_env.sh makes one, never
    # the default under the user's ~/.cache. xdist's workers inherit the controller's.
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR") and \
            "CONVBERT_JAX_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="convbert-jax-cache-")
        config.stash[_OWN_JAX_CACHE] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    if not controller and os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        from tests.zygote import tensorflow_test_settings
        tensorflow_test_settings()
    if os.environ.get("CONVBERT_TEST_ZYGOTE") != "0":
        from tests import zygote
        if controller:       # one registry for its workers: they share their zygotes
            zygote.make_registry()
            config.stash[_SHARED_REGISTRY] = True
        else:
            zygote.install_client(owner=True)


def pytest_unconfigure(config):
    zygote = sys.modules.get("tests.zygote")
    if zygote is not None:
        zygote.stop_zygotes()
        if config.stash.get(_SHARED_REGISTRY, False):   # after the workers, which end the zygotes
            zygote.remove_registry()
    if config.stash.get(_OWN_JAX_CACHE, None):
        shutil.rmtree(config.stash[_OWN_JAX_CACHE], ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test's body leaves os.environ as it found it (fixtures set and restore theirs). Code a
    test runs in-process may set variables for its own process (benchmarks/common.py
    `set_threads`: OMP_NUM_THREADS; reproduce/rtd_reference.py at import: OMP_WAIT_POLICY); left
    in the worker, they reach every later test's subprocesses, and, being import-time settings,
    give those a zygote of their own (tests/zygote.py: a TensorFlow import each) or, past its
    cap, fresh interpreters (measured: 3 more zygotes and 10 fresh interpreters in one worker)."""
    before = dict(os.environ)
    yield
    for key in [k for k in os.environ if k not in before]:
        del os.environ[key]
    for key, value in before.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With $CONVBERT_TEST_CPU_LOG set: one JSON line there per test, the CPU seconds of the
    worker's own process and of the subprocesses it waited for (bash scripts, fresh
    interpreters) during the test, and its wall time; tests/zygote.py adds one per zygote fork.
    `python -m tests.cpu_map LOG` sums them by file and by program."""
    path = os.environ.get("CONVBERT_TEST_CPU_LOG")
    if not path:
        yield
        return
    import resource
    import time

    def cpu(who):
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime
    before = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.time()
    yield
    with open(path, "a") as f:
        f.write(json.dumps({"kind": "test", "test": item.nodeid,
                            "self": cpu(resource.RUSAGE_SELF) - before[0],
                            "children": cpu(resource.RUSAGE_CHILDREN) - before[1],
                            "wall": time.time() - before[2]}) + "\n")


def pytest_collection_modifyitems(config, items):
    rank = {module: i for i, module in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


def shared_path(*parts) -> pathlib.Path:
    """Path under ../shared, or skip the calling test when that file is not there."""
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is absent)")
    return path


def made_once(name, scratch, make) -> pathlib.Path:
    """Directory `name` of the run's cache ($CONVBERT_TEST_CACHE; without it, under `scratch`),
    filled by `make(directory)` the first time any worker asks for it (the others wait for it)
    and only read after that: for inputs that depend on nothing but `name`."""
    root = pathlib.Path(os.environ.get(RUN_CACHE_ENV) or scratch)
    done = root / name
    done.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{done}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            work = pathlib.Path(f"{done}.tmp")
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            make(work)
            work.rename(done)
    return done


def hf_reference_dir(config, scratch, heads="mlm", seed=0) -> pathlib.Path:
    """`../shared/tools/hf_reference.py gen`: a random Hugging Face ConvBERT written by
    transformers (config.json, model.safetensors, inputs.npz, outputs.npz) for `config`, a size
    name or a config dict; made once per run (made_once)."""
    tool = shared_path("tools", "hf_reference.py")
    spec = config if isinstance(config, str) else json.dumps(config, sort_keys=True)
    key = hashlib.sha256(f"{spec}|{heads}|{seed}".encode()).hexdigest()[:16]

    def make(work):
        config_arg = spec
        if not isinstance(config, str):
            (work / "config.json").write_text(spec)
            config_arg = str(work / "config.json")
        # --no-check: the tool's own self-check (transformers reloads the directory it just
        # saved and recomputes) is about transformers, not about us; ~40% of each reference's
        # time (the small one 20 s -> 12 s). Our exports' loading in transformers is tested
        # (tests/model/test_checkpoints.py).
        subprocess.run([sys.executable, str(tool), "gen", "--config", config_arg, "--seed",
                        str(seed), "--out", str(work / "ref"), "--heads", heads, "--no-check"],
                       check=True, capture_output=True, timeout=600)

    return made_once(f"hf_reference/{key}", scratch, make) / "ref"


@pytest.fixture
def bert_vocab_file():
    return shared_path("data", "vocab", "bert-uncased-vocab.txt")


def tensorboard_series(run_dir, tag="train/loss"):
    """{step: value} of `tag` in a TensorBoard run directory, as TensorBoard reads it
    (EventAccumulator, which checks the records' CRCs)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray
    reader = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    reader.Reload()
    return {e.step: float(make_ndarray(e.tensor_proto)) for e in reader.Tensors(tag)}


def shapes_only(make):
    """`make()`, a Keras layer or model that builds itself, with its variables' shapes but no
    values (keras.StatelessScope without initialisation): all that counting parameters needs,
    without the random initialisation (on JAX each new shape compiles its initialiser: a paper
    row at full size 1-5 s -> 0.1 s). Its variables are taken off Keras' list of variables to
    initialise later; it must not be called."""
    import keras
    from keras.src.backend.common import global_state
    pending = list(global_state.get_global_attribute("uninitialized_variables") or [])
    with keras.StatelessScope(initialize_variables=False):
        built = make()
    global_state.set_global_attribute("uninitialized_variables", pending)
    return built


def keras_backend() -> str:
    import keras
    return keras.backend.backend()


# scripts/test.sh runs the suite on TensorFlow, then tests/model again on JAX, and says so
# (CONVBERT_TEST_TWO_PASSES=1). A test whose result cannot depend on the pytest process's backend
# then runs in the TensorFlow pass only (one that starts its backends in subprocesses of its own,
# counts a model's parameters or checks a file format). A plain `pytest` (either backend) runs
# every test.
TWO_PASSES = os.environ.get("CONVBERT_TEST_TWO_PASSES") == "1"
THIS_PASS = os.environ.get("KERAS_BACKEND", "tensorflow")
tensorflow_pass_only = pytest.mark.skipif(
    TWO_PASSES and THIS_PASS != "tensorflow",
    reason="backend-independent: the TensorFlow pass")


def run_jax_script(script, out_path, *args, env=None, timeout=600):
    """Run `script` (Python source) with KERAS_BACKEND=jax on the CPU in a fresh subprocess as
    `python -c script out_path *args`, the repository on its path; it writes JSON to out_path,
    which is returned parsed. Fails the test with the end of stderr if the script fails."""
    import json
    import subprocess
    import sys
    full_env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", script, str(out_path), *map(str, args)],
                          env=full_env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(pathlib.Path(out_path).read_text())
