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
    if directory is None:
        if not problem:
            log(f"JAX compilation cache: off ({source})")
    else:
        where = "" if _is_url(directory) else f", {_count_programs(directory)} programs"
        log(f"JAX compilation cache: {directory}{where} ({source})")
    return directory


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
