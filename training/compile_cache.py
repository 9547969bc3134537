"""JAX's persistent compilation cache, on for every JAX command of the toolkit.

    from training.compile_cache import enable_compile_cache
    enable_compile_cache(FLAGS.jax_cache_dir, log=print)    # before the first compile

XLA writes every program it compiles into a directory; a later process that compiles the same
program (same code and shapes, same JAX / jaxlib, same device kind) reads it back instead. The
directory, first that is given: the command's `--jax_cache_dir`, `$CONVBERT_JAX_CACHE_DIR`,
JAX's own `$JAX_COMPILATION_CACHE_DIR` (the test suite sets it: scripts/test_env.sh), else
`$XDG_CACHE_HOME/convbert/jax` (`~/.cache/convbert/jax`). `off`, `none`, `0` or an empty value
turn the cache off. Pure Python: JAX is imported only when the cache is switched, TensorFlow
never.

What can go wrong with it never stops a run: it compiles instead, and says why in one line.
- An archive carried from another machine (scripts/gpu_run.sh --compile_cache) that is torn,
  not a tar.gz, or holds a path outside the cache: `unpack_archive` extracts it into a scratch
  folder inside the cache and moves it in only when all of it read cleanly (gzip's CRC
  included); else nothing of it. An entry in it that does not decompress whole (a program
  half-written by a killed process) is left out.
  `python -m training.compile_cache unpack ARCHIVE DIR` (what gpu_run.sh runs).
- An archive from another model, jax/jaxlib, GPU kind or XLA_FLAGS: its entries are never read.
  JAX names an entry `<program>-<sha256>` over the lowered program, the jaxlib version, the
  backend's platform and platform version (CUDA / driver), the XLA flags, the compile options,
  the devices' kind and the compression (jax/_src/cache_key.py `get`, jax 0.10.2); jax itself
  requires the jaxlib it was released with. A program differing in any of them has another
  name and is compiled (tests/training/test_compile_cache.py: a second program beside the
  first one's entries).
- An entry that JAX cannot read (a truncated or damaged file): JAX would warn on every run and
  never replace it (its cache writes only absent entries). `enable_compile_cache` makes that
  one line, removes the entry, and JAX writes the program it compiles in its place.
- A directory that cannot be created or written: off, in one line.

Several processes (jax.distributed) on the CPU: JAX writes process 0's programs alone, and there
a program's entry holds its process's devices, so the others would compile everything again in
every run; `enable_compile_cache` makes every process write its own there (elsewhere JAX's rule
stays: on GPUs its keys are the same in every process).
"""
import logging
import os

ENV = "CONVBERT_JAX_CACHE_DIR"
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"
OFF_VALUES = ("off", "none", "0", "")
FLAG_HELP = ("JAX's persistent compilation cache: a later run reads the programs an earlier one "
             "compiled (same jax/jaxlib, same device kind). Default: $CONVBERT_JAX_CACHE_DIR, "
             "else $JAX_COMPILATION_CACHE_DIR, else $XDG_CACHE_HOME/convbert/jax "
             "(~/.cache/convbert/jax); 'off' disables it. KERAS_BACKEND=jax only.")

_applied = None       # (directory or None) of the last call that switched JAX's settings


def default_cache_dir(environ=None):
    """`$XDG_CACHE_HOME/convbert/jax`, or `~/.cache/convbert/jax` without it."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "convbert", "jax")


def is_off(value):
    """Whether a --jax_cache_dir / $CONVBERT_JAX_CACHE_DIR value turns the cache off."""
    return value is not None and value.strip().lower() in OFF_VALUES


def resolve_cache_dir(path=None, environ=None):
    """(directory or None when off, where it came from): the explicit `path`, then
    $CONVBERT_JAX_CACHE_DIR, then a non-empty $JAX_COMPILATION_CACHE_DIR, then the default.
    Local paths come back absolute; URLs (gs://...) as given."""
    environ = os.environ if environ is None else environ
    if path is not None:
        value, source = path, "--jax_cache_dir"
    elif ENV in environ:
        value, source = environ[ENV], f"${ENV}"
    elif environ.get(JAX_ENV):
        value, source = environ[JAX_ENV], f"${JAX_ENV}"
    else:
        value, source = default_cache_dir(environ), "default"
    if is_off(value):
        return None, source
    value = value.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    if not _is_url(value):
        value = os.path.abspath(os.path.expanduser(value))
    return value, source


def _is_url(path):
    return "://" in path and not path.startswith("file://")


def _count_programs(directory):
    try:
        return sum(1 for name in os.listdir(directory) if name.endswith("-cache"))
    except OSError:
        return 0


def _write_problem(directory):
    """Why a file cannot be written in `directory` (a file made and removed), or None."""
    import tempfile
    try:
        fd, probe = tempfile.mkstemp(prefix=".write_probe.", dir=directory)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return f"cannot be written ({e.strerror or e})"
    return None


def enable_compile_cache(path=None, log=print, environ=None):
    """Turn JAX's persistent compilation cache on at the directory `resolve_cache_dir` picks
    (or off); the directory used, None when off. Logs one line when it changes JAX's settings;
    a repeated call with the same outcome does nothing. Call it before the first compile: JAX
    opens the cache once, at the first compile after it is set."""
    global _applied
    environ = os.environ if environ is None else environ
    directory, source = resolve_cache_dir(path, environ)
    problem = None
    if directory is not None and _is_url(directory):
        try:
            from etils import epath  # noqa: F401  (what JAX writes a non-local cache with)
        except ImportError:
            problem = "unsupported here (a non-local cache needs the etils[epath] package)"
    elif directory is not None:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            problem = f"cannot be created ({e.strerror or e})"
        else:
            problem = _write_problem(directory)
    if problem:
        log(f"JAX compilation cache: {directory} ({source}) {problem}: compiling without it")
        directory = None
    if _applied is not None and _applied[0] == directory:
        return directory

    import jax
    from jax.experimental.compilation_cache import compilation_cache
    if directory is None:
        jax.config.update("jax_enable_compilation_cache", False)
    else:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", directory)
        # Every program, however quick to compile: JAX's default (1 s) would leave out the many
        # small ones (the eager initialisation's, held-out and predict functions on a fast GPU),
        # which every process would compile again. -1: no size floor, and JAX may not raise it.
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in environ:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        # XLA's own sub-caches off (the GPU autotuning one is on by default): JAX puts their
        # directory, <cache>/xla_gpu_per_fusion_autotune_cache_dir, into the compile options it
        # hashes, so every key would depend on the cache's absolute path and a cache unpacked
        # elsewhere (scripts/gpu_run.sh --compile_cache) would miss every program (measured on
        # the CPU, jax 0.10.2). The cached executables hold the autotuned choices already; and XLA cannot
        # write a gs:// sub-cache.
        if "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES" not in environ:
            jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    # A cache JAX opened already (a forked process, an earlier call) is opened again at the new
    # directory on the next compile.
    # (quietly: its INFO line would reach the console of a driver that logs at INFO)
    logger = logging.getLogger(compilation_cache.reset_cache.__module__)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        compilation_cache.reset_cache()
    finally:
        logger.setLevel(level)
    _applied = (directory,)
    if directory is not None:
        _guard_cache_reads(log)
        _write_from_every_cpu_process()
    if directory is None:
        if not problem:
            log(f"JAX compilation cache: off ({source})")
    else:
        where = "" if _is_url(directory) else f", {_count_programs(directory)} programs"
        log(f"JAX compilation cache: {directory}{where} ({source})")
    return directory


def _guard_cache_reads(log):
    """JAX's reading of one entry, wrapped: an entry it cannot read (JAX would warn in two lines
    on every run and never replace it) is one line and removed, so that the program compiled
    in its place is written. JAX's own handling otherwise: `raise_persistent_cache_errors` and a
    verification error still raise."""
    global _read_log
    _read_log = log
    try:
        from jax._src import compilation_cache as jax_cache
    except ImportError:          # another JAX layout: its own warning, as before
        return
    read = getattr(jax_cache, "get_executable_and_time", None)
    if read is None or getattr(read, "_convbert_guarded", False):
        return

    def get_executable_and_time(cache_key, *args, **kwargs):
        try:
            return read(cache_key, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - what JAX's caller catches too
            import jax
            if (isinstance(e, getattr(jax_cache, "CacheVerificationError", ())) or
                    jax.config.jax_raise_persistent_cache_errors):
                raise
            _damaged_entry(cache_key, e)
            return None, None

    get_executable_and_time._convbert_guarded = True
    jax_cache.get_executable_and_time = get_executable_and_time


_read_log = print


def _write_from_every_cpu_process():
    """JAX's writing of one entry, wrapped: on the CPU, every process of a multi-process run
    writes the programs it compiled, not process 0 alone. JAX keeps the others from writing so
    that they do not contend for the same entries (on GPUs every process's key is process 0's);
    on the CPU each process's key holds its own devices' topology (jax 0.10.2
    `_hash_accelerator_config`), so process 0's entries are never another process's and, unless
    it writes its own, every later run of that process compiles everything again (measured: the
    tiny pre-training step, 7-8 s of CPU on each rerun of process 1 of 2). JAX's own rules
    otherwise (no program with host callbacks, the minimum compile time and entry size)."""
    try:
        from jax._src import compiler, distributed
        from jax._src import compilation_cache as jax_cache
    except ImportError:          # another JAX layout: JAX's own behaviour
        return
    write = getattr(compiler, "_cache_write", None)
    if write is None or getattr(write, "_convbert_every_cpu_process", False):
        return

    def _cache_write(*args, **kwargs):
        # Any call that is not jax 0.10's six positional arguments goes to JAX's own write
        # untouched (another JAX version's signature never breaks a run).
        import jax
        if len(args) != 6 or kwargs:
            return write(*args, **kwargs)
        cache_key, compile_time_secs, module_name, backend, executable, host_callbacks = args
        process = getattr(distributed.global_state, "process_id", 0)
        if (process == 0 or getattr(backend, "platform", None) != "cpu" or host_callbacks or
                compile_time_secs < jax.config.jax_persistent_cache_min_compile_time_secs):
            return write(*args)
        try:
            jax_cache.put_executable_and_time(cache_key, module_name, executable, backend,
                                              int(compile_time_secs))
        except Exception as e:  # noqa: BLE001 - JAX's own write warns and goes on likewise
            if jax.config.jax_raise_persistent_cache_errors:
                raise
            import warnings
            warnings.warn(f"Error writing persistent compilation cache entry for "
                          f"'{module_name}': {type(e).__name__}: {e}")

    _cache_write._convbert_every_cpu_process = True
    compiler._cache_write = _cache_write


def _damaged_entry(cache_key, error):
    directory = _applied[0] if _applied else None
    removed = False
    if directory is not None and not _is_url(directory):
        for suffix in ("-cache", "-atime"):
            try:
                os.remove(os.path.join(directory, cache_key + suffix))
                removed = removed or suffix == "-cache"
            except OSError:
                pass
    name, _, digest = cache_key.rpartition("-")
    why = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
    _read_log(f"compile cache: the entry for {name or cache_key} ({digest[:12]}…) could not be "
              f"read ({type(error).__name__}{': ' + why if why else ''}); compiling it"
              + ("; the damaged entry removed" if removed else ""))


# ------------------------------------------------------------- archives between machines
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def entry_is_whole(path):
    """Whether a JAX cache entry decompresses whole (zstd, or zlib without the zstandard
    package, as JAX writes them): False for a truncated or damaged file, None where it cannot
    be told here (a zstd entry without a zstd module). A bit flipped inside a zstd frame can
    pass (JAX writes no checksum); the archive's gzip CRC covers the carrying."""
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    try:
        if data[:4] == ZSTD_MAGIC:
            try:
                from compression import zstd          # Python 3.14+
                out = zstd.decompress(data)
            except ImportError:
                try:
                    import zstandard
                except ImportError:
                    return None
                out = zstandard.ZstdDecompressor().decompress(data)
        else:
            out = zlib.decompress(data)
    except Exception:  # noqa: BLE001 - zstd's, zlib's errors: the entry is damaged
        return False
    return len(out) > 4                     # 4 bytes of compile time, then the executable


def _member_problem(member):
    name = member.name
    parts = name.replace("\\", "/").split("/")
    if name.startswith("/") or os.path.isabs(name) or ".." in parts:
        return f"member {name!r} lies outside the cache"
    if not (member.isfile() or member.isdir()):
        return f"member {name!r} is a link or a special file"
    return None


def _move_in(source, target):
    """Every entry of `source` into `target`, folders merged, files replaced."""
    for name in os.listdir(source):
        src, dst = os.path.join(source, name), os.path.join(target, name)
        if os.path.isdir(src) and os.path.isdir(dst):
            _move_in(src, dst)
        else:
            if os.path.isdir(dst):
                import shutil
                shutil.rmtree(dst)
            os.replace(src, dst)


def unpack_archive(archive, cache_dir, log=print):
    """Unpack a packed cache (`tar -czf ... -C <cache> .`, scripts/gpu_run.sh) into `cache_dir`:
    into a scratch folder inside it first, moved in only when the whole archive read cleanly;
    else nothing of it, in one line, and the cache stays as it was. Members with an absolute
    path, `..`, links or special files refuse the archive. Entries that do not decompress whole
    are left out. Never raises; the number of programs brought in."""
    import shutil
    import tarfile
    import tempfile
    import zlib
    scratch = None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        for name in os.listdir(cache_dir):          # a killed unpack's scratch folder
            if name.startswith(".unpack."):
                shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)
        scratch = tempfile.mkdtemp(prefix=".unpack.", dir=cache_dir)
        try:
            tar = tarfile.open(archive, "r:*")
        except tarfile.ReadError:
            raise ValueError("not a .tar.gz, nor another tar archive") from None
        with tar:
            for member in tar:
                problem = _member_problem(member)
                if problem:
                    raise ValueError(problem)
                path = os.path.join(scratch, os.path.normpath(member.name))
                if member.isdir():
                    os.makedirs(path, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with tar.extractfile(member) as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                if member.size != os.path.getsize(path):
                    raise EOFError(f"member {member.name!r} is cut short")
            while tar.fileobj.read(1 << 20):         # to the end: gzip's CRC and length
                pass
        entries, damaged = [], 0
        for root, _, files in os.walk(scratch):
            for name in files:
                if name.endswith("-cache"):
                    path = os.path.join(root, name)
                    if entry_is_whole(path) is False:
                        os.remove(path)
                        damaged += 1
                    else:
                        entries.append(path)
        _move_in(scratch, cache_dir)
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as e:
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if isinstance(e, OSError) and e.strerror:
            why = e.strerror + (f": {e.filename}" if e.filename else "")
        log(f"compile cache: {archive} could not be unpacked ({why}); the cache in {cache_dir} "
            "is used as it was")
        return 0
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    left_out = f", {damaged} damaged left out" if damaged else ""
    log(f"compile cache: {archive} unpacked into {cache_dir} ({len(entries)} programs{left_out})")
    return len(entries)


def main(argv=None):
    """`python -m training.compile_cache unpack ARCHIVE DIR`: one line on stdout, status 0
    whether or not it could be unpacked (the run goes on compiling); 2 for a wrong call."""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "unpack":
        print("usage: python -m training.compile_cache unpack ARCHIVE DIR", file=sys.stderr)
        return 2
    unpack_archive(argv[1], argv[2], log=print)
    return 0


# JAX's monitoring events: one per program XLA compiles (or reads from the persistent cache,
# which also raises CACHE_HIT_EVENT first), with the program's name.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_watches = []


def _on_duration(event, duration_secs, **kwargs):
    if event == BACKEND_COMPILE_EVENT:
        for watch in list(_watches):
            watch._compiled(str(kwargs.get("fun_name", "?")), duration_secs)


def _on_event(event, **kwargs):
    if event == CACHE_HIT_EVENT:
        for watch in list(_watches):
            watch._hits += 1


class CompileWatch:
    """Every program XLA compiles in this process between `start()` and `stop()` (a persistent
    cache read counts: it is a program that was not ready in the process): `compiles`, a list of
    {"program", "seconds", "from_cache"}. The GPU run starts one after its compile stage, where
    nothing should compile any more (reproduce/gpu_budget.py)."""

    def __init__(self):
        self.compiles = []
        self._hits = 0

    def start(self):
        import jax.monitoring as monitoring
        if not _watches:
            monitoring.register_event_duration_secs_listener(_on_duration)
            monitoring.register_event_listener(_on_event)
        if self not in _watches:
            _watches.append(self)
        return self

    def stop(self):
        import jax.monitoring as monitoring
        if self in _watches:
            _watches.remove(self)
            if not _watches:
                monitoring.unregister_event_duration_listener(_on_duration)
                monitoring.unregister_event_listener(_on_event)
        return self

    def _compiled(self, name, seconds):
        self.compiles.append({"program": name, "seconds": round(float(seconds), 3),
                              "from_cache": self._hits > 0})
        self._hits = 0

    def seconds(self):
        return round(sum(c["seconds"] for c in self.compiles), 3)

    def summary(self):
        """One line: how many programs compiled, which, and their seconds."""
        if not self.compiles:
            return "no program compiled"
        names = {}
        for c in self.compiles:
            names[c["program"]] = names.get(c["program"], 0) + 1
        return (f"{len(self.compiles)} program(s) compiled in {self.seconds():.1f}s: "
                + ", ".join(f"{n}" + (f" x{k}" if k > 1 else "") for n, k in names.items()))


if __name__ == "__main__":
    raise SystemExit(main())
