"""training/compile_cache.py: where JAX's persistent compilation cache goes (the flag, then
$CONVBERT_JAX_CACHE_DIR, then $JAX_COMPILATION_CACHE_DIR, then ~/.cache/convbert/jax; `off`
values), and that it works: a second process training the same toy Task on the JAX core reads
every program the first one compiled, from a copy of its cache unpacked at another path (as
scripts/gpu_run.sh --compile_cache does), and compiles none."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO_ROOT

# ------------------------------------------------------------------------ where the cache goes
CLEAN = {"HOME": "/home/u"}


def test_resolution_order():
    from training.compile_cache import resolve_cache_dir
    env = {**CLEAN, "CONVBERT_JAX_CACHE_DIR": "/c", "JAX_COMPILATION_CACHE_DIR": "/j"}
    assert resolve_cache_dir("/flag", env) == ("/flag", "--jax_cache_dir")
    assert resolve_cache_dir(None, env) == ("/c", "$CONVBERT_JAX_CACHE_DIR")
    env.pop("CONVBERT_JAX_CACHE_DIR")
    assert resolve_cache_dir(None, env) == ("/j", "$JAX_COMPILATION_CACHE_DIR")
    env["JAX_COMPILATION_CACHE_DIR"] = ""          # JAX's variable empty: as if unset
    assert resolve_cache_dir(None, env) == ("/home/u/.cache/convbert/jax", "default")
    env["XDG_CACHE_HOME"] = "/xdg"
    assert resolve_cache_dir(None, env) == ("/xdg/convbert/jax", "default")
    # local paths absolute, URLs as given
    assert resolve_cache_dir("rel/dir", env)[0] == os.path.join(os.getcwd(), "rel", "dir")
    assert resolve_cache_dir("gs://b/c", env)[0] == "gs://b/c"
    assert resolve_cache_dir("file:///tmp/c", env)[0] == "/tmp/c"


def test_resolution_reads_the_process_environment(monkeypatch, tmp_path):
    from training.compile_cache import resolve_cache_dir
    for name in ("CONVBERT_JAX_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert resolve_cache_dir() == (str(tmp_path / "convbert" / "jax"), "default")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/j")
    monkeypatch.setenv("CONVBERT_JAX_CACHE_DIR", "~/c")
    assert resolve_cache_dir() == (os.path.expanduser("~/c"), "$CONVBERT_JAX_CACHE_DIR")


@pytest.mark.parametrize("value", ["off", "OFF", "none", "0", "", " off "])
def test_off_values(value):
    from training.compile_cache import resolve_cache_dir
    env = {**CLEAN, "JAX_COMPILATION_CACHE_DIR": "/j"}
    assert resolve_cache_dir(value, env) == (None, "--jax_cache_dir")
    assert resolve_cache_dir(None, {**env, "CONVBERT_JAX_CACHE_DIR": value}) == (
        None, "$CONVBERT_JAX_CACHE_DIR")


@pytest.fixture
def jax_cache_state():
    """JAX's cache settings and compile_cache's memory as they were, after the test."""
    jax = pytest.importorskip("jax")
    from jax.experimental.compilation_cache import compilation_cache
    from training import compile_cache
    names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
             "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes", "jax_persistent_cache_enable_xla_caches")
    saved = {n: getattr(jax.config, n) for n in names}
    applied = compile_cache._applied
    yield jax
    for name, value in saved.items():
        jax.config.update(name, value)
    compile_cache._applied = applied
    compilation_cache.reset_cache()


def test_enable_sets_jax_and_logs_once(jax_cache_state, tmp_path):
    jax = jax_cache_state
    from training.compile_cache import enable_compile_cache
    lines = []
    target = tmp_path / "cache"
    assert enable_compile_cache(str(target), log=lines.append, environ=CLEAN) == str(target)
    assert target.is_dir() and jax.config.jax_compilation_cache_dir == str(target)
    assert jax.config.jax_enable_compilation_cache
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == -1
    assert jax.config.jax_persistent_cache_enable_xla_caches == "none"
    assert lines == [f"JAX compilation cache: {target}, 0 programs (--jax_cache_dir)"]
    enable_compile_cache(str(target), log=lines.append, environ=CLEAN)      # idempotent
    assert len(lines) == 1
    assert enable_compile_cache("off", log=lines.append, environ=CLEAN) is None
    assert lines[-1] == "JAX compilation cache: off (--jax_cache_dir)"
    assert not jax.config.jax_enable_compilation_cache


def test_a_remote_cache_without_etils_is_off_in_one_line(jax_cache_state):
    try:
        import etils.epath  # noqa: F401
        pytest.skip("etils[epath] installed: JAX writes the gs:// cache itself")
    except ImportError:
        pass
    from training.compile_cache import enable_compile_cache
    lines = []
    assert enable_compile_cache("gs://bucket/jax", log=lines.append, environ=CLEAN) is None
    assert len(lines) == 1 and lines[0].startswith("JAX compilation cache: gs://bucket/jax")
    assert "etils[epath]" in lines[0] and "without it" in lines[0]
    assert not jax_cache_state.config.jax_enable_compilation_cache


# ------------------------------------------------------------------ a second process reads it
RUN = r"""
import json, sys
sys.modules["tensorflow"] = None
from jax import monitoring
events = {}
monitoring.register_event_listener(
    lambda name, **_: events.__setitem__(name, events.get(name, 0) + 1))
from training.compile_cache import enable_compile_cache
enable_compile_cache(log=lambda line: print(line, file=sys.stderr))
import numpy as np
import keras
from training.jax_core import JaxTrainingCore
from training.settings import TrainSettings
from tests.training.toy_task import ToyTask, toy_batches


settings = TrainSettings(total_steps=3, batch_size=4, learning_rate=0.05, warmup_steps=1,
                         log_every=3, save_every=3)
core = JaxTrainingCore(settings, log=lambda *_: None).build(ToyTask(toy_batches(3)))
summary = core.fit_task()
json.dump({"events": {k.rsplit("/", 1)[-1]: v for k, v in events.items()
                      if k.startswith("/jax/compilation_cache/")},
           "loss": summary["history"][-1]["loss"]}, open(sys.argv[1], "w"))
"""


def _run(cache_dir, result):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                "CONVBERT_JAX_CACHE"))}
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT),
               CONVBERT_JAX_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", RUN, str(result)], env=env, cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"JAX compilation cache: {cache_dir}" in done.stderr
    return json.loads(result.read_text())


def test_a_second_process_reads_every_program_from_the_cache(tmp_path):
    pytest.importorskip("jax")
    first_dir, second_dir = tmp_path / "first", tmp_path / "elsewhere" / "second"
    first = _run(first_dir, tmp_path / "first.json")
    written = sorted(p.name for p in first_dir.iterdir() if p.name.endswith("-cache"))
    assert first["events"].get("cache_misses", 0) == len(written) > 0
    # carried as gpu_run.sh carries it: packed, unpacked into another directory
    with tarfile.open(tmp_path / "jax_cache.tar.gz", "w:gz") as tar:
        tar.add(first_dir, arcname=".")
    with tarfile.open(tmp_path / "jax_cache.tar.gz") as tar:
        tar.extractall(second_dir)
    second = _run(second_dir, tmp_path / "second.json")
    assert second["events"].get("cache_misses", 0) == 0
    assert second["events"]["cache_hits"] == (first["events"]["cache_misses"]
                                              + first["events"].get("cache_hits", 0))
    assert sorted(p.name for p in second_dir.iterdir() if p.name.endswith("-cache")) == written
    assert second["loss"] == first["loss"]
