"""training/compile_cache.py: where JAX's persistent compilation cache goes (the flag, then
$CONVBERT_JAX_CACHE_DIR, then $JAX_COMPILATION_CACHE_DIR, then ~/.cache/convbert/jax; `off`
values), and that it works: a second process training the same toy Task on the JAX core reads
every program the first one compiled, from a copy of its cache unpacked at another path (as
scripts/gpu_run.sh --compile_cache does), and compiles none. And what goes wrong with it never
stops a run: a torn, foreign or unsafe archive, a damaged entry, another program, a directory
that cannot be created or written: one line, and the run compiles."""
import io
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


# ------------------------------------------- what goes wrong with it: the run compiles instead
def _entry(payload=b"x" * 64):
    """A cache entry as JAX writes one without zstandard: zlib over 4 bytes of compile time and
    the executable."""
    import zlib
    return zlib.compress((1).to_bytes(4, "big") + payload)


def _tree(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


def _archive(path, entries, extra=None):
    """A packed cache as scripts/gpu_run.sh packs one (`tar -czf ... -C <cache> .`)."""
    source = path.parent / (path.name + ".src")
    source.mkdir()
    for name, data in entries.items():
        (source / name).write_bytes(data)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source, arcname=".")
        for info, data in extra or ():
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return path


@pytest.fixture
def cache_with_one_entry(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "jit_old-0a-cache").write_bytes(_entry(b"old"))
    return cache


def test_an_archive_is_moved_in_whole(tmp_path, cache_with_one_entry):
    from training.compile_cache import unpack_archive
    cache = cache_with_one_entry
    archive = _archive(tmp_path / "jax_cache.tar.gz",
                       {"jit_a-1b-cache": _entry(b"a"), "jit_b-2c-cache": _entry(b"b")})
    lines = []
    assert unpack_archive(str(archive), str(cache), log=lines.append) == 2
    assert lines == [f"compile cache: {archive} unpacked into {cache} (2 programs)"]
    assert sorted(_tree(cache)) == ["jit_a-1b-cache", "jit_b-2c-cache", "jit_old-0a-cache"]
    assert _tree(cache)["jit_a-1b-cache"] == _entry(b"a")


def _symlink(name, target):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def _file(name, data=b"evil"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


TORN = {   # name: (what the archive's bytes become, the reason the line gives)
    "truncated": (lambda b: b[: len(b) // 2], "ended before the end-of-stream"),
    "crc": (lambda b: b[:-6] + bytes([b[-6] ^ 0xFF]) + b[-5:], "CRC check failed"),
    "not_gzip": (lambda b: b"just text, not an archive\n" * 40, "not a .tar.gz"),
    "parent_path": ([_file("../escaped-cache")], "lies outside the cache"),
    "absolute_path": ([_file("/tmp/convbert_escaped-cache")], "lies outside the cache"),
    "symlink": ([_symlink("./jit_link-cache", "/etc/passwd")], "is a link"),
}


@pytest.mark.parametrize("case", sorted(TORN))
def test_a_torn_or_unsafe_archive_leaves_the_cache_as_it_was(tmp_path, cache_with_one_entry, case):
    """Nothing of it moves in (the entries it read before the fault included), one line, no
    exception, nothing written outside the cache, no scratch folder left."""
    from training.compile_cache import unpack_archive
    cache = cache_with_one_entry
    before = _tree(cache)
    change, reason = TORN[case]
    entries = {f"jit_{i}-{i}f-cache": _entry(os.urandom(4096)) for i in range(8)}
    archive = _archive(tmp_path / "jax_cache.tar.gz", entries,
                       extra=change if isinstance(change, list) else None)
    if callable(change):
        archive.write_bytes(change(archive.read_bytes()))
    lines = []
    assert unpack_archive(str(archive), str(cache), log=lines.append) == 0
    assert len(lines) == 1 and lines[0].startswith(f"compile cache: {archive} could not be "
                                                   "unpacked (")
    assert reason in lines[0] and lines[0].endswith(f"the cache in {cache} is used as it was")
    assert sorted(os.listdir(cache)) == sorted(before) and _tree(cache) == before
    assert not (tmp_path / "escaped-cache").exists()
    assert not os.path.exists("/tmp/convbert_escaped-cache")


def test_a_damaged_entry_in_a_whole_archive_is_left_out(tmp_path, cache_with_one_entry):
    """A program half-written by a killed process, packed as it was: the rest comes in."""
    from training.compile_cache import entry_is_whole, unpack_archive
    cache = cache_with_one_entry
    whole = _entry(os.urandom(2048))
    archive = _archive(tmp_path / "jax_cache.tar.gz",
                       {"jit_a-1b-cache": whole, "jit_cut-3d-cache": whole[: len(whole) // 2]})
    lines = []
    assert unpack_archive(str(archive), str(cache), log=lines.append) == 1
    assert lines == [f"compile cache: {archive} unpacked into {cache} "
                     "(1 programs, 1 damaged left out)"]
    assert sorted(_tree(cache)) == ["jit_a-1b-cache", "jit_old-0a-cache"]
    assert entry_is_whole(str(cache / "jit_a-1b-cache"))


def test_the_command_gpu_run_calls_never_fails_the_run(tmp_path):
    """`python -m training.compile_cache unpack` (scripts/gpu_run.sh): one line, status 0, for a
    missing archive and a cache folder that cannot be made (its parent a file); no TensorFlow,
    no JAX imported."""
    (tmp_path / "a_file").write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CONVBERT_TEST_ZYGOTE": "0"}  # ~0.2 s
    code = ("import runpy, sys; sys.modules['tensorflow'] = sys.modules['jax'] = None; "
            "sys.argv = ['x'] + sys.argv[1:]; runpy.run_module('training.compile_cache', "
            "run_name='__main__')")
    for archive, cache, why in [(tmp_path / "none.tar.gz", tmp_path / "c", "No such file"),
                                (_archive(tmp_path / "a.tar.gz", {"jit_a-1-cache": _entry()}),
                                 tmp_path / "a_file" / "c", "Not a directory")]:
        done = subprocess.run([sys.executable, "-c", code, "unpack", str(archive), str(cache)],
                              env=env, cwd=str(REPO_ROOT), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.count("\n") == 1 and why in done.stdout
        assert done.stdout.startswith(f"compile cache: {archive} could not be unpacked (")


def test_a_cache_directory_that_cannot_be_created_or_written_is_off_in_one_line(
        jax_cache_state, tmp_path, monkeypatch):
    """Under a regular file it cannot be created. An existing one that cannot be written: the
    tests run as root, whom chmod does not stop, and a read-only bind mount needs privileges
    they lack, so the write probe is made to fail."""
    from training.compile_cache import enable_compile_cache
    (tmp_path / "a_file").write_text("")
    lines = []
    target = tmp_path / "a_file" / "cache"
    assert enable_compile_cache(str(target), log=lines.append, environ=CLEAN) is None
    assert lines == [f"JAX compilation cache: {target} (--jax_cache_dir) cannot be created "
                     "(Not a directory): compiling without it"]
    assert not jax_cache_state.config.jax_enable_compilation_cache

    import tempfile

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    target = tmp_path / "read_only"
    target.mkdir()
    assert enable_compile_cache(str(target), log=lines.append, environ=CLEAN) is None
    assert lines[1:] == [f"JAX compilation cache: {target} (--jax_cache_dir) cannot be written "
                         "(Permission denied): compiling without it"]


DAMAGED_RUN = r"""
import sys
sys.modules["tensorflow"] = None
from jax import monitoring
events = {}
monitoring.register_event_listener(
    lambda name, **_: events.__setitem__(name, events.get(name, 0) + 1))
from training.compile_cache import enable_compile_cache
enable_compile_cache(log=print)
import jax, jax.numpy as jnp

def program_a(x):
    return jnp.sin(x) * 2.0 + 1.0

def program_b(x):      # another model, or the same under another jax: another key
    return jnp.cos(x) * 3.0 - 1.0

x = jnp.arange(8.0)
for name in sys.argv[1:]:
    print(name, float(jax.jit({"a": program_a, "b": program_b}[name])(x).sum()))
print({k.rsplit("/", 1)[-1]: v for k, v in events.items() if "/compilation_cache/" in k})
"""


def test_another_program_misses_and_a_damaged_entry_is_compiled_again_in_one_line(tmp_path):
    """An entry cut short (a process killed while JAX wrote it): one line, the program compiled
    and its entry written whole in its place (JAX alone warns in two lines on every run and
    never replaces it). Another program beside the first one's entries (another model, or the
    first one under another jax/jaxlib, whose version is part of every key) reads none of
    them: it compiles, and gives the result it gives without a cache."""
    pytest.importorskip("jax")
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                "CONVBERT_JAX_CACHE"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT), CONVBERT_JAX_CACHE_DIR=str(cache))

    def run(*programs):
        done = subprocess.run([sys.executable, "-c", DAMAGED_RUN, *programs], env=env,
                              cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.splitlines()[1:]             # after the cache's own line
        return ([line for line in lines if not line.startswith("compile cache:")],
                [line for line in lines if line.startswith("compile cache:")], done.stderr)

    out, _, _ = run("a")
    (entry,) = cache.glob("jit_program_a-*-cache")
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])
    out2, damaged, err = run("a", "b")
    assert out2[0] == out[0]                                  # program a: the same result
    digest = entry.name.split("-")[1][:12]
    assert len(damaged) == 1, out2
    assert damaged[0].startswith(f"compile cache: the entry for jit_program_a ({digest}…) could "
                                 "not be read (")
    assert damaged[0].endswith("); compiling it; the damaged entry removed")
    assert "Warning" not in err and "Traceback" not in err, err
    from training.compile_cache import entry_is_whole
    assert entry.exists() and entry_is_whole(str(entry)) is not False    # written anew, whole
    assert eval(out2[-1])["cache_misses"] == 2                # program a again, program b
    out3, damaged, _ = run("b")
    assert out3[0] == out2[1] and "cache_misses" not in eval(out3[-1]) and not damaged
