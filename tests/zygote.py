"""Python subprocesses without the import bill: the test suite's zygote.

Most of the suite's time went into Python subprocesses of the toolkit's command-line tools (the
tests run them as a user does: `subprocess.run([sys.executable, "run_finetuning.py", ...])`), and
each one spent ~5 s of CPU importing TensorFlow and Keras before reading its first flag. Here a
server process (the zygote) imports them once, and every such `subprocess.Popen` of a test, or of a
tool a test runs (run_reproduction.py's stages), becomes a fork of it:

* the fork is a real process with its own pid, signals and exit status: a monitor process forked
  beside it waits on it and reports the status (`returncode`, `-9` after a SIGKILL, ...);
* it gets the caller's argv, working directory, environment and stdin/stdout/stderr (the caller's
  pipe ends pass over the Unix socket), and runs the script or `-m` module as `__main__` with
  runpy, on a `sys.path` that is the one `python script.py` would have; it ends as Python does
  (SystemExit codes, a traceback and status 1, thread joins and atexit handlers, stdout flushed);
* one zygote per set of import-time settings (every `TF_*`, `XLA_*`, `JAX_*`, `KERAS_*`, `CUDA*`,
  `PYTHON*`, `OMP_*`, `MKL_*`, `LD_*`, `COVERAGE_*` variable): a JAX-backend tool gets a zygote
  that imported Keras on JAX and never TensorFlow, and a program that blocks TensorFlow on JAX
  (`sys.modules["tensorflow"] = None`: the TensorFlow-free path) one that blocked it before its
  imports;
* the pytest-xdist workers of one run share their zygotes: the controller makes the registry
  (a directory of sockets, one per set of settings), the first worker to need a zygote starts it
  (a file lock keeps the other from starting it too) and ends it when it exits; a worker that
  finds it gone starts its own, and a fork asked of a zygote that is just ending becomes a real
  subprocess.

Left to a real subprocess: another interpreter, Python options other than -m / -c / -u, a
preexec_fn, pass_fds, user/group/umask changes, a checkout other than this one on the path,
a program that checks TensorFlow was not imported (`"tensorflow" not in sys.modules`) or blocks
it on the TensorFlow backend, and
`CONVBERT_TEST_ZYGOTE=0` in the environment (tests of what a fresh process prints before Python
runs: TensorFlow's C++ start-up lines).
Coverage follows the forks (`patch = fork, _exit` in .coveragerc).
"""
import atexit
import fcntl
import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
REGISTRY_ENV = "CONVBERT_TEST_ZYGOTES"      # the directory of this run's zygote sockets
SWITCH_ENV = "CONVBERT_TEST_ZYGOTE"         # "0": real subprocesses only
GRAPPLER_ENV = "CONVBERT_TEST_GRAPPLER"     # "0": TensorFlow's graph optimizer off (see below)
IMPORT_TIME_PREFIXES = ("TF_", "XLA_", "JAX_", "KERAS_", "CUDA", "PYTHON", "OMP_", "MKL_", "LD_",
                        "COVERAGE_")
# Read after start-up (the zygote initialises no device), so the child's own value applies.
RUN_TIME_VARIABLES = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "CUDA_VISIBLE_DEVICES",
                      "PYTHON")      # the scripts' interpreter (scripts/glue/*.sh), not Python's
LAUNCHER = os.path.join(REPO_ROOT, "tests", "zygote_python")
MAX_ZYGOTES = 6                # per owner; a further set of settings gets real subprocesses
START_TIMEOUT_S = 180
# A program that checks whether TensorFlow was imported needs a fresh interpreter; one that blocks
# it gets, on Keras-on-JAX, a zygote that blocked it before its own imports.
CHECKS_TENSORFLOW = re.compile(r"""["']tensorflow["']\s+(not\s+)?in\s+sys\.modules""")
BLOCKS_TENSORFLOW = re.compile(r"""sys\.modules\[["']tensorflow["']\]\s*=\s*None""")
BLOCK_ENV = "CONVBERT_TEST_ZYGOTE_BLOCKS_TENSORFLOW"   # in a zygote's key and environment only

real_popen = subprocess.Popen

_owner = False                 # this process starts zygotes (the pytest process / xdist worker)
_own_registry = False          # and made the registry (not handed one by pytest-xdist's controller)
_zygotes = {}                  # key -> (socket path, real Popen of the zygote) in the owner
_failed = set()                # keys whose zygote did not start: real subprocesses for them
_start_lock = threading.Lock()


# ----------------------------------------------------------------------------------- the client
def _python_path(env, cwd):
    """PYTHONPATH's entries as absolute real paths, each once."""
    entries = []
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        p = p and os.path.realpath(os.path.join(cwd, p))
        if p and p not in entries:
            entries.append(p)
    return entries


def _import_key(env, cwd, blocks_tensorflow=False):
    key = {k: v for k, v in env.items()
           if k.startswith(IMPORT_TIME_PREFIXES) and k not in RUN_TIME_VARIABLES}
    if blocks_tensorflow:
        key[BLOCK_ENV] = "1"
    if "PYTHONPATH" in key:
        key["PYTHONPATH"] = os.pathsep.join(_python_path(env, cwd))
    key.setdefault("KERAS_BACKEND", "tensorflow")     # Keras' default
    return tuple(sorted(key.items()))


def _parse(args, env, cwd):
    """(mode, target, argv, unbuffered, blocks_tensorflow) when `args` is this interpreter
    running something of this checkout that a zygote can run; None otherwise."""
    if not args or os.path.realpath(str(args[0])) != os.path.realpath(sys.executable):
        return None
    rest = [str(a) for a in args[1:]]
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    while rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if not rest:
        return None
    if rest[0] in ("-m", "-c"):
        if len(rest) < 2:
            return None
        mode, target, argv = rest[0], rest[1], ["-m" if rest[0] == "-m" else "-c"] + rest[2:]
    elif rest[0].startswith("-"):
        return None
    else:
        mode, target = "script", os.path.join(cwd, rest[0])
        if not os.path.isfile(target):
            return None
        argv = [rest[0]] + rest[1:]
    try:
        text = target if mode == "-c" else (open(target, encoding="utf-8").read()
                                            if mode == "script" else "")
    except (OSError, UnicodeDecodeError):
        return None
    blocks_tensorflow = bool(BLOCKS_TENSORFLOW.search(text))
    if CHECKS_TENSORFLOW.search(text) or (
            blocks_tensorflow and env.get("KERAS_BACKEND", "tensorflow") != "jax"):
        return None
    # The zygote's modules are this checkout's: the child must be looking at the same one.
    roots = _python_path(env, cwd)
    here = {"script": os.path.dirname(os.path.realpath(target)), "-m": os.path.realpath(cwd),
            "-c": os.path.realpath(cwd)}[mode]
    if REPO_ROOT not in roots and here != REPO_ROOT:
        return None
    return mode, target, argv, unbuffered, blocks_tensorflow


def _socket_path(key):
    registry = os.environ.get(REGISTRY_ENV)
    if not registry:
        return None
    digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
    return os.path.join(registry, f"{digest}.sock")


def _start_zygote(key, path):
    """Start the zygote for `key` (the owner only); its socket path, or None."""
    registry = os.path.dirname(path)
    log = open(os.path.join(registry, os.path.basename(path)[:-5] + ".log"), "ab")
    zenv = {k: v for k, v in os.environ.items() if not k.startswith(IMPORT_TIME_PREFIXES)}
    zenv.update(dict(key))
    zenv["PYTHONPATH"] = os.pathsep.join(
        [p for p in zenv.get("PYTHONPATH", "").split(os.pathsep) if p] + [REPO_ROOT])
    code = "import sys; from tests.zygote import serve; serve(sys.argv[1])"
    proc = real_popen([sys.executable, "-c", code, path], cwd=REPO_ROOT, env=zenv,
                      stdin=subprocess.PIPE, stdout=log, stderr=log)
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            return None
        time.sleep(0.05)
    _zygotes[key] = (path, proc)
    return path


def _zygote_for(env, cwd, blocks_tensorflow=False):
    key = _import_key(env, cwd, blocks_tensorflow)
    path = _socket_path(key)
    if path is None or key in _failed:
        return None
    if os.path.exists(path):
        return path
    if not _owner or len(_zygotes) >= MAX_ZYGOTES:
        return None
    with _start_lock, open(path[:-5] + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # another worker may be starting the same one
        if os.path.exists(path):
            return path
        started = _start_zygote(key, path)
        if started is None:
            _failed.add(key)
        return started


def _recv_line(sock, buf, block):
    """The next b"...\\n" line from `sock` (buffer `buf`), or None when not (yet) there."""
    while b"\n" not in buf:
        if not block:
            ready, _, _ = select.select([sock], [], [], 0)
            if not ready:
                return None
        chunk = sock.recv(4096)
        if not chunk:
            raise ChildProcessError("the zygote's monitor went away")
        buf.extend(chunk)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _connect(path):
    """A socket connected to the zygote at `path`, or None: another worker's zygote may be
    ending as that worker exits (a real subprocess then)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


class ZygotePopen(real_popen):
    """subprocess.Popen whose Python children are forks of a zygote (see the module docstring)."""

    _zygote_sock = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, restore_signals, gid, gids, uid, umask,
                       start_new_session, *more):
        plain = (not shell and preexec_fn is None and not pass_fds and gid is None
                 and gids is None and uid is None and umask < 0
                 and all(m in (None, -1) for m in more)
                 and isinstance(args, (list, tuple)) and executable in (None, args[0]))
        environ = dict(os.environ if env is None else env)
        environ = {os.fsdecode(k): os.fsdecode(v) for k, v in environ.items()}
        where = os.path.abspath(os.fsdecode(cwd)) if cwd is not None else os.getcwd()
        parsed = plain and environ.get(SWITCH_ENV) != "0" and _parse(list(args), environ, where)
        path = parsed and _zygote_for(environ, where, parsed[4])
        sock = path and _connect(path)
        if not sock:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd,
                                          env, startupinfo, creationflags, shell, p2cread,
                                          p2cwrite, c2pread, c2pwrite, errread, errwrite,
                                          restore_signals, gid, gids, uid, umask,
                                          start_new_session, *more)
        mode, target, argv, unbuffered, _ = parsed
        request = json.dumps({"mode": mode, "target": target, "argv": argv, "cwd": where,
                              "env": environ, "unbuffered": unbuffered,
                              "new_session": bool(start_new_session)}).encode()
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        try:
            socket.send_fds(sock, [len(request).to_bytes(8, "big")], fds)
            sock.sendall(request)
            self._zygote_buf = bytearray()
            line = _recv_line(sock, self._zygote_buf, block=True)
        except BaseException:
            sock.close()
            raise
        self.pid = int(line[1:])
        self._zygote_sock = sock
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _zygote_status(self, block):
        """The child's wait status once the monitor has sent it, else None."""
        line = _recv_line(self._zygote_sock, self._zygote_buf, block)
        if line is None:
            return None
        self._zygote_sock.close()
        return int(line[1:])

    def _internal_poll(self, _deadstate=None, **_):
        if self._zygote_sock is None:
            return super()._internal_poll(_deadstate=_deadstate)
        if self.returncode is None:
            if not self._waitpid_lock.acquire(False):
                return None
            try:
                if self.returncode is None and self._zygote_sock.fileno() != -1:
                    status = self._zygote_status(block=False)
                    if status is not None:
                        self._handle_exitstatus(status)
            except OSError:
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _try_wait(self, wait_flags):
        if self._zygote_sock is None:
            return super()._try_wait(wait_flags)
        status = self._zygote_status(block=not (wait_flags & os.WNOHANG))
        return (0, 0) if status is None else (self.pid, status)


def script_python(env, cwd=REPO_ROOT):
    """The $PYTHON to hand a shell script the test runs with `env` (scripts/glue/run_all.sh):
    tests/zygote_python, which runs `python ARGS` as a fork of the zygote for `env` (started
    here if need be) — or this interpreter where there is none. Sets what the launcher needs in
    `env`."""
    environ = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
    if environ.get(SWITCH_ENV) == "0" or subprocess.Popen is not ZygotePopen or \
            not _zygote_for(environ, os.path.abspath(cwd)):
        return sys.executable
    env["CONVBERT_TEST_PYTHON"] = sys.executable
    return LAUNCHER


def launch(args):
    """tests/zygote_python: `python ARGS` as a fork of a running zygote, this process standing in
    for it (the same stdin/stdout/stderr and exit status; SIGINT/SIGTERM/SIGHUP passed on); a
    real interpreter where no zygote runs for this environment."""
    install_client(owner=False)
    proc = ZygotePopen([sys.executable, *args])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _: proc.send_signal(number))
    code = proc.wait()
    if code < 0:                    # killed by a signal: end the same way
        if -code not in (signal.SIGKILL, signal.SIGSTOP):    # (their handlers are fixed)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def tensorflow_test_settings():
    """Grappler, TensorFlow's graph optimizer, off where CONVBERT_TEST_GRAPPLER=0
    (scripts/test_env.sh): it rewrites every traced function before its first run, which on the
    suite's tiny models costs more than it saves (measured: three heavy test modules 146 s ->
    120 s, means of two runs). Called by the pytest workers and the zygotes on the TensorFlow
    backend (a zygote takes its owner's setting: a test that needs the graphs users run, the
    README demo's, runs a fresh interpreter)."""
    if os.environ.get(GRAPPLER_ENV) == "0":
        from base.command import quiet_tensorflow
        quiet_tensorflow()        # its C++ start-up lines are no test's output
        import tensorflow as tf
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def make_registry():
    """A new registry for this process and the processes it starts (pytest-xdist's controller:
    its workers share it); remove it with remove_registry."""
    os.environ[REGISTRY_ENV] = tempfile.mkdtemp(prefix="zyg-", dir="/tmp")


def remove_registry():
    shutil.rmtree(os.environ.pop(REGISTRY_ENV, ""), ignore_errors=True)


def install_client(owner):
    """Route this process's Python subprocesses through zygotes (`owner`: may start them, in the
    registry it was handed, or else in one of its own)."""
    global _owner, _own_registry
    _owner = owner
    if owner:
        if not os.path.isdir(os.environ.get(REGISTRY_ENV, "")):
            make_registry()
            _own_registry = True
        atexit.register(stop_zygotes)
    subprocess.Popen = ZygotePopen


def stop_zygotes():
    """End this owner's zygotes: closing their stdin ends their loop and they exit on their own
    (saving coverage data under scripts/coverage.sh). Not waited for: pytest-xdist kills a
    worker that takes over 10 s to exit, and with it the worker's own coverage data."""
    if not _owner:
        return
    for _, proc in list(_zygotes.values()):
        try:
            proc.stdin.close()
        except OSError:
            pass
    _zygotes.clear()
    if _own_registry:      # a shared one is the controller's to remove (its sockets: see serve)
        remove_registry()


# ----------------------------------------------------------------------------------- the server
# What every child would import itself: no module that defines absl flags (a driver's flags
# would clash with the next driver's) or sets environment variables at import.
PRELOAD = {
    "tensorflow": ("tensorflow", "keras", "numpy", "sklearn.metrics", "absl.app", "base.command",
                   "base.fileio", "model.encoder", "training.loop", "training.core",
                   "finetune.run", "finetune.glue_task", "pretrain.electra_pretrainer",
                   "data.tokenization", "data.pretraining_builder", "data.pretraining_input"),
    "jax": ("jax", "keras", "numpy", "model.encoder"),
}


def serve(path):
    """The zygote: import what every child needs, then fork a monitor per connection."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if os.environ.pop(BLOCK_ENV, None):
        sys.modules["tensorflow"] = None     # as its programs do before their first import
    for name in PRELOAD.get(backend, ("keras",)):
        try:
            __import__(name)
        except Exception as e:   # the child meets the same error when it imports it itself
            print(f"zygote: preloading {name} failed: {e}", file=sys.stderr)
    if backend == "tensorflow":
        tensorflow_test_settings()
    install_client(owner=False)
    own = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    base_path = [p for p in sys.path[1:] if p not in own]   # [0] is "" (python -c); the site
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)         # clients see the socket only once it listens
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)        # monitors reap themselves
    lifeline = sys.stdin.buffer

    def accept():
        conn, _ = listener.accept()
        conn.setblocking(True)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            _monitor(conn, base_path)
        conn.close()

    while True:
        ready, _, _ = select.select([listener, lifeline], [], [])
        if lifeline in ready and not os.read(lifeline.fileno(), 4096):
            break                           # the owner closed our stdin (or died)
        if listener in ready:
            accept()
    # Ending: no new client finds the socket; one that connected already (another worker's) is
    # still served.
    try:
        os.unlink(path)
    except FileNotFoundError:       # the owner removed the registry already
        pass
    time.sleep(0.1)
    listener.setblocking(False)
    while True:
        try:
            accept()
        except BlockingIOError:
            break
    listener.close()


def _recv_exact(sock, n, buf=b""):
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _monitor(conn, base_path):
    """Fork the child, send its pid, wait for it, send its status."""
    import posix
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        head = _recv_exact(conn, 8, head)
        request = json.loads(_recv_exact(conn, int.from_bytes(head, "big")))
        pid = os.fork()
        if pid == 0:
            conn.close()
            _child(request, fds, base_path)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"P{pid}\n".encode())
        started = time.time()
        _, status, usage = os.wait4(pid, 0)
        _log_cpu(request, usage, time.time() - started)
        conn.sendall(f"S{status}\n".encode())
    except BaseException:
        traceback.print_exc()
    finally:
        posix._exit(0)      # not os._exit (patched under coverage): nothing here is to be saved


def _log_cpu(request, usage, wall):
    """With $CONVBERT_TEST_CPU_LOG set in the child's environment: one JSON line there per fork,
    its CPU seconds (its own and its waited-for children's), its wall time, the test that
    started it, its program (script, module or -c) and first arguments (tests/cpu_map.py reads
    them)."""
    path = request["env"].get("CONVBERT_TEST_CPU_LOG")
    if path:
        with open(path, "a") as f:   # one short O_APPEND write per line: whole lines
            f.write(json.dumps({"kind": "fork", "test": request["env"].get(
                "PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
                "program": "-c" if request["mode"] == "-c" else request["target"],
                "argv": request["argv"][:3],
                "cpu": usage.ru_utime + usage.ru_stime, "wall": wall}) + "\n")


def _child(request, fds, base_path):
    """Become `python [-u] script|-m mod|-c code args...` and never return."""
    code = 1
    try:
        if request["new_session"]:
            os.setsid()
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        encoding = sys.stdout.encoding or "utf-8"
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.open(0, "rb", closefd=False),
                                                     encoding=encoding)
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.open(1, "wb", buffering=0 if request["unbuffered"] else -1, closefd=False),
            encoding=encoding, write_through=request["unbuffered"])
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.open(2, "wb", buffering=0 if request["unbuffered"] else -1, closefd=False),
            encoding=encoding, errors="backslashreplace", line_buffering=True,
            write_through=request["unbuffered"])
        mode, target = request["mode"], request["target"]
        first = {"script": os.path.dirname(os.path.abspath(target)), "-m": os.getcwd(),
                 "-c": ""}[mode]
        python_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p]
        sys.path[:] = [first] + python_path + [p for p in base_path if p not in python_path]
        sys.argv[:] = request["argv"]
        code = _run(mode, target)
    except BaseException:
        traceback.print_exc()
    os._exit(code)


def _run(mode, target):
    """Run the program as `__main__`; the exit status Python would give."""
    import runpy
    try:
        try:
            if mode == "script":
                runpy.run_path(target, run_name="__main__")
            elif mode == "-m":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code & 0xFF
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 128 + signal.SIGINT
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    return code


if __name__ == "__main__":
    launch(sys.argv[1:])
