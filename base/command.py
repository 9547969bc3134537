"""What every command shares: TensorFlow's C++ start-up lines kept off the console, and the
one-line error exit.

    from base.command import quiet_tensorflow
    quiet_tensorflow()        # first: before anything imports TensorFlow or Keras
    ...
    exit_with_error(e)        # `error: <one line>` on stderr, exit status 1 (or e.exit_code)
    sys.exit(run_command(run, argv, user_error_types))   # the same for a command's bad input

TensorFlow 2.21 prints, on every import and before its own log level applies, lines such as
`WARNING: All log messages before absl::InitializeLog() is called are written to STDERR`,
`I0000 ... port.cc] oneDNN custom operations are on ...` and `I0000 ... cudart_stub.cc] Could
not find cuda drivers ...`. With the TensorFlow Keras backend this imports TensorFlow once with
the process's stderr (file descriptor 2) captured, then writes back every captured line except
those start-up lines, and sets TF_CPP_MIN_LOG_LEVEL to 2 unless it is set (C++ INFO and WARNING
off; errors still show). Python warnings, absl logging and the toolkit's own messages are not
touched. `CONVBERT_TF_LOGS=1` turns all of this off: TensorFlow prints what it prints. With
another Keras backend (KERAS_BACKEND=jax) TensorFlow is not imported at all.

Lines that only say a device is absent, and only where it truly is (no NVIDIA device node, no
TPU on the PCI bus: `absent_devices()`), are start-up lines too:

* TensorFlow's `E0000 ... cuda_platform.cc] failed call to cuInit: ... CUDA error` comes when
  TensorFlow first looks for devices, after the import. On a machine without an NVIDIA device the
  import above also looks (`tf.config.list_physical_devices`, which fixes no logical device and
  no runtime setting), so the line is printed, and dropped, while stderr is captured. With a GPU
  present nothing is probed here and a failing cuInit shows as TensorFlow prints it.
* JAX's `Unable to initialize backend 'tpu': ... Failed to open libtpu.so` (Python logging, at
  INFO: absl's app.run shows it) is dropped by a filter on JAX's logger, on either backend,
  for a backend whose device is absent; JAX is not imported for that.

Two runtime lines that say nothing wrong are kept off the console the same way, each by making
it happen early while its file descriptor is captured (`kept_off_console`):

* TensorFlow's `E0000 ... util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512.
  Falling back to the default Eigen-based implementation if present.` (printed on any CPU, AVX-512
  or not) comes when oneDNN's graph pass first meets an int64 Transpose, which Keras's
  `take_along_axis` makes (pre-training's first step). TensorFlow prints that note once a
  process, so the import above has it printed, and dropped (`ONEDNN_NOTE`): the same one
  function, called through ctypes where the TensorFlow build has it. Its once also covers the
  same note for another type (bfloat16 or float16 on a CPU whose oneDNN lacks them), which then
  does not show either.
* gloo's `[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is
  : 1` (jaxlib's CPU collectives, on stdout), one for each device of each new set of devices that
  makes a collective across processes: training/jax_distribution.py `start_processes` makes
  the sets a run uses connect at once, dropping those lines (`GLOO_CONNECTED`; a line where the
  two counts differ is kept).
"""
import contextlib
import glob
import logging
import os
import re
import sys

# Where the kernel shows an accelerator (JAX's own test, jax/_src/hardware_utils.py): NVIDIA's
# device nodes (WSL2's /dev/dxg), and a TPU chip on the PCI bus (Google's vendor id and a TPU
# device id; a newer TPU generation: its /dev/accel* or /dev/vfio/<n> node).
NVIDIA_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICES = ("0x0027", "0x0056", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076")


def _read(path):
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def absent_devices():
    """The accelerator kinds this machine has none of: a subset of {"gpu", "tpu"}."""
    absent = set()
    if not any(os.path.exists(node) for node in NVIDIA_DEVICE_NODES):
        absent.add("gpu")
    tpu = glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*") or any(
        _read(vendor) == GOOGLE_PCI_VENDOR
        and _read(os.path.join(os.path.dirname(vendor), "device")) in TPU_PCI_DEVICES
        for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"))
    if not tpu:
        absent.add("tpu")
    return absent


def start_up_lines(absent):
    """The start-up lines of TensorFlow to keep off the console on a machine that has none of
    the device kinds `absent` (the cuInit failure only where "gpu" is among them)."""
    return re.compile(
        r"^(WARNING: All log messages before absl::InitializeLog\(\)"
        r"|[IW]0000 \S+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_\w+)\.cc:\d+\]"
        + (r"|E0000 \S+ +\d+ cuda_\w+\.cc:\d+\] failed call to cuInit" if "gpu" in absent
           else "")
        + r"|To enable the following instructions:)")


_ABSENT = absent_devices()
START_UP_LINES = start_up_lines(_ABSENT)
# Runtime lines that say nothing wrong (module doc): oneDNN's DT_INT64 note (stderr) and gloo's
# connection lines (stdout) where every expected peer is connected.
ONEDNN_NOTE = re.compile(r"^E0000 \S+ +\d+ util\.cc:\d+\] oneDNN supports DT_INT64 only on "
                         r"platforms with AVX-512\.")


class GlooConnectedLines:
    """gloo's `[Gloo] Rank r is connected to n peer ranks. Expected number of connected peer
    ranks is : n` lines (every expected peer connected), for `kept_off_console`: `kept(text)` is
    `text` without them. gloo prints one per device from that device's thread, a C++ `<<` (one
    write) per piece, so two devices' lines can come interleaved piece by piece (`[Gloo] Rank
    [Gloo] Rank 0 is connected to 1 peer ranks. 0Expected ...`): a run of lines made of nothing
    but such pieces is dropped when it reads as whole lines of that kind interleaved, and kept
    as written otherwise (a line where fewer peers are connected than expected shows)."""

    _PIECES = ("[Gloo] Rank ", None, " is connected to ", None, " peer ranks. ",
               "Expected number of connected peer ranks is : ", None, "\n")
    _TOKEN = re.compile(r"\[Gloo\] Rank | is connected to | peer ranks\. |Expected number of "
                        r"connected peer ranks is : |\d+|\n")
    _LINE = re.compile(r"^\[Gloo\] Rank \d+ is connected to (\d+) peer ranks\. Expected "
                       r"number of connected peer ranks is : \1\s*$")

    def match(self, line):
        """Whether `line` alone is one such line."""
        return self._LINE.match(line)

    def kept(self, text):
        out, run = [], []
        for line in text.splitlines(keepends=True) + [None]:
            if line is not None and self._tokens(line):
                run.append(line)          # gloo's pieces only: whole lines or interleaved ones
                continue
            if run and not self._all_connected(self._tokens("".join(run))):
                out.extend(kept for kept in run if not self._LINE.match(kept))
            run = []
            if line is not None:
                out.append(line)
        return "".join(out)

    def _tokens(self, text):
        """`text` as gloo's pieces (digit runs whole), or None where anything else is in it."""
        tokens = self._TOKEN.findall(text)
        return tokens if tokens and "".join(tokens) == text else None

    def _all_connected(self, tokens):
        """Whether `tokens` are whole lines, interleaved, each with as many peers connected as
        expected: a search over which line each piece belongs to (digits of two lines can run
        together: a digit run may be split)."""
        if not tokens:
            return False
        pieces, number_at = self._PIECES, (1, 3, 6)
        seen = set()

        def search(i, offset, open_lines):
            # open_lines: sorted tuple of (next piece index, connected count or None)
            key = (i, offset, open_lines)
            if key in seen:
                return False
            seen.add(key)
            if i == len(tokens):
                return not open_lines
            token = tokens[i]
            if token == pieces[0]:
                return search(i + 1, 0, tuple(sorted(open_lines + ((1, None),))))
            for at, count in dict.fromkeys(open_lines):       # each distinct open line
                rest = list(open_lines)
                rest.remove((at, count))
                rest = tuple(rest)
                if at in number_at and token[0].isdigit():
                    for end in range(offset + 1, len(token) + 1):
                        value = token[offset:end]
                        if at == 6 and value != count:
                            continue
                        line = (at + 1, value if at == 3 else count)
                        more = (i + 1, 0) if end == len(token) else (i, end)
                        if search(*more, tuple(sorted(rest + (line,)))):
                            return True
                elif offset == 0 and token == pieces[at]:
                    line = () if at == len(pieces) - 1 else ((at + 1, count),)
                    if search(i + 1, 0, tuple(sorted(rest + line))):
                        return True
            return False

        return search(0, 0, ())


GLOO_CONNECTED = GlooConnectedLines()
# tensorflow::DataTypeUnsupportedWarning(const DataType&), which prints the note once a process
# (tensorflow/core/util/util.cc).
_ONEDNN_NOTE_FUNCTION = "_ZN10tensorflow26DataTypeUnsupportedWarningERKNS_8DataTypeE"
# JAX's backend names -> the device kind each needs.
_JAX_BACKEND_DEVICES = {"tpu": "tpu", "cuda": "gpu", "gpu": "gpu"}
_JAX_UNAVAILABLE = re.compile(r"Unable to initialize backend '(\w+)'")


class _AbsentJaxBackend(logging.Filter):
    """Drops JAX's `Unable to initialize backend 'tpu': ...` where no TPU is present (the same for
    a GPU backend without an NVIDIA device); any other record passes. `absent`: the device kinds
    the machine lacks (default: this machine's)."""

    def __init__(self, absent=None):
        super().__init__()
        self.absent = _ABSENT if absent is None else set(absent)

    def filter(self, record):
        try:
            found = _JAX_UNAVAILABLE.match(record.getMessage())
        except (TypeError, ValueError):   # a malformed record is shown as logging shows it
            return True
        return not (found and _JAX_BACKEND_DEVICES.get(found.group(1)) in self.absent)


def quiet_jax():
    """JAX's lines about an absent device kept off the console (see the module doc); JAX is not
    imported. A no-op with CONVBERT_TF_LOGS=1."""
    if os.environ.get("CONVBERT_TF_LOGS") == "1":
        return
    logger = logging.getLogger("jax._src.xla_bridge")
    if not any(isinstance(f, _AbsentJaxBackend) for f in logger.filters):
        logger.addFilter(_AbsentJaxBackend())


def quiet_tensorflow():
    """Import TensorFlow without its start-up lines (see the module doc), and `quiet_jax()`; a
    no-op with CONVBERT_TF_LOGS=1, TensorFlow's part also with another Keras backend, TensorFlow
    already imported or not installed."""
    if os.environ.get("CONVBERT_TF_LOGS") == "1":
        return
    quiet_jax()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow" or "tensorflow" in sys.modules:
        return
    with kept_off_console(2, (START_UP_LINES, ONEDNN_NOTE)):
        try:
            import tensorflow
        except ImportError:
            return             # the JAX-only install: nothing to quiet
        if "gpu" in _ABSENT:   # its cuInit failure now, while captured (module doc)
            tensorflow.config.list_physical_devices("GPU")
        _onednn_note_now(tensorflow)


def _onednn_note_now(tensorflow):
    """oneDNN's once-a-process DT_INT64 note printed now (module doc), by TensorFlow's own
    function; nothing where this build lacks it. Fixes no device and no runtime setting."""
    import ctypes
    try:
        library = ctypes.CDLL(os.path.join(tensorflow.sysconfig.get_lib(),
                                           "libtensorflow_framework.so.2"))
        note = getattr(library, _ONEDNN_NOTE_FUNCTION)
    except (OSError, AttributeError):
        return
    note.restype = None
    note(ctypes.byref(ctypes.c_int(tensorflow.int64.as_datatype_enum)))


@contextlib.contextmanager
def kept_off_console(fd, lines):
    """Around a call: what the process writes on file descriptor `fd` (1: stdout, 2: stderr), a
    library's C++ included, is captured, then written back (to sys.stdout or sys.stderr) when the
    call ends, however it ends, except the lines that `lines` (a compiled pattern, or several)
    match, and what a pattern with a `kept(text)` method leaves out (GlooConnectedLines). A
    plain call with CONVBERT_TF_LOGS=1."""
    if os.environ.get("CONVBERT_TF_LOGS") == "1":
        yield
        return
    import tempfile
    patterns = (lines,) if hasattr(lines, "match") else tuple(lines)
    stream = sys.stdout if fd == 1 else sys.stderr
    _flush_all(stream)
    saved = os.dup(fd)
    captured = tempfile.TemporaryFile()
    try:
        os.dup2(captured.fileno(), fd)
        yield
    finally:
        _flush_all(stream)
        os.dup2(saved, fd)
        os.close(saved)
        captured.seek(0)
        text = captured.read().decode("utf-8", errors="replace")
        captured.close()
        for pattern in patterns:           # those that read across lines (GlooConnectedLines)
            if hasattr(pattern, "kept"):
                text = pattern.kept(text)
        kept = [line for line in text.splitlines(keepends=True)
                if not any(pattern.match(line) for pattern in patterns)]
        if kept:
            stream.write("".join(kept))
            stream.flush()


def _flush_all(stream):
    """Python's buffer of `stream`, and C's stdio buffers (C++'s std::cout writes through them)."""
    stream.flush()
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def error_line(error):
    """`error: <message on one line>` on stderr (an exception's message, or a string)."""
    text = " ".join(str(error).split()) or type(error).__name__
    print(f"error: {text}", file=sys.stderr, flush=True)


def exit_with_error(error, code=None):
    """The one-line error exit of every command: `error_line(error)`, then exit with `code`
    (default: the exception's `exit_code`, else 1; 128 + signal after SIGTERM/SIGINT)."""
    error_line(error)
    sys.exit(code if code is not None else getattr(error, "exit_code", 1))


def run_command(run_fn, argv, error_types):
    """A command's exit status: `run_fn(argv)`, or, for an exception of one of `error_types()`
    (called when it is raised: only the bad-input classes of modules loaded by then), one line
    `error: ...` on stderr and its `exit_code` (1; 128 + signal after SIGTERM/SIGINT)."""
    try:
        return run_fn(sys.argv[1:] if argv is None else list(argv))
    except Exception as e:  # noqa: BLE001 -- user errors become one line, the rest propagate
        if not isinstance(e, error_types()):
            raise
        error_line(e)
        return getattr(e, "exit_code", 1)


def parse_known_flags(flag_values, argv):
    """absl's parse of the flags `flag_values` defines; what it does not know is returned (a
    builder hands it to Beam as pipeline options). A bad flag value: the one-line error exit."""
    from absl import flags
    try:
        return flag_values(argv, known_only=True)
    except flags.Error as e:
        exit_with_error(e, 1)
