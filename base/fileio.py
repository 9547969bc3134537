"""File access on any filesystem TensorFlow knows, without needing TensorFlow.

The single home for reading and writing user-given paths, for every package of the toolkit
(config and hparams JSON, safetensors exports, checkpoints' side files, vocabularies):

* a `scheme://...` path (`gs://` bucket on a Cloud TPU, TensorFlow's in-memory `ram://` in tests,
  `s3://`, `hdfs://`, ...) goes through `tf.io.gfile`. TensorFlow is imported lazily, on the first
  such path, and only if `importlib.util.find_spec("tensorflow")` finds it; without it a URL is a
  `FileIOError` naming the path.
* a local path uses the builtins (`open`, `os.*`, `glob`), which is what `tf.io.gfile` does for
  it anyway: `base/` (and `model/`, whose checkpoints go through it) stays importable and usable
  without TensorFlow (the JAX backend on a GPU machine has none), and the JAX path never imports
  it for local paths.

Writes are atomic: `write_*_atomic` write a temporary file beside the target and rename it over
the target (`tf.io.gfile.rename(tmp, final, overwrite=True)` / `os.replace`), so a reader never
sees half a file. `rename` also moves directories; on a URL filesystem it moves file by file
(buckets have no directories; `ram://` renames only the directory entry itself), JSON and
`checkpoint` index files last so a reader that finds them finds the rest. `replace_dir` swaps a
finished temporary directory in for an older one. The one write that is not atomic is
`open_write`, a stream for a file that grows while it is read (TensorBoard's event files).
"""
import glob as _glob
import importlib.util
import os
import posixpath
import shutil
import uuid

_TF_GFILE = None


class FileIOError(OSError):
    """A path that cannot be handled here (a URL without TensorFlow installed)."""


def is_url(path) -> bool:
    """True for `scheme://...` paths (gs://, ram://, s3://, ...)."""
    return "://" in os.fspath(path)


def _gfile(path):
    """tf.io.gfile, imported on first use; FileIOError without TensorFlow."""
    global _TF_GFILE
    if _TF_GFILE is None:
        try:
            found = importlib.util.find_spec("tensorflow") is not None
        except (ImportError, ValueError):  # a blocked or half-installed TensorFlow
            found = False
        if not found:
            raise FileIOError(f"{path}: a {str(path).split('://')[0]}:// path needs TensorFlow "
                              "(tf.io.gfile), which is not installed; use a local path")
        import tensorflow as tf
        _TF_GFILE = tf.io.gfile
    return _TF_GFILE


def _not_found(path):
    return FileNotFoundError(2, "No such file or directory", path)


# ------------------------------------------------------------------------------------ queries
def _listed(gfile, path):
    """ram:// answers exists/isdir for any prefix of a name (`ram://d/check` "exists" beside
    `ram://d/checkpoints`): there a path exists only if its parent lists its name."""
    if not path.startswith("ram://"):
        return True
    parent, name = _split(path)
    if not parent:
        return True
    try:
        if name in {n.rstrip("/") for n in gfile.listdir(parent)}:
            return True
        # A directory that only exists through the files written below it (no makedirs) is
        # not listed by its parent; its children are real, a prefix's "children" are not.
        children = gfile.listdir(path)
    except Exception:  # noqa: BLE001 -- tf.errors.NotFoundError: no parent, no child
        return False
    return any(gfile.exists(posixpath.join(path, c.rstrip("/"))) for c in children[:3])


def exists(path) -> bool:
    path = os.fspath(path)
    if not is_url(path):
        return os.path.exists(path)
    gfile = _gfile(path)
    return gfile.exists(path) and _listed(gfile, path)


def isdir(path) -> bool:
    path = os.fspath(path)
    if not is_url(path):
        return os.path.isdir(path)
    gfile = _gfile(path)
    return gfile.isdir(path) and _listed(gfile, path)


def isfile(path) -> bool:
    path = os.fspath(path)
    if not is_url(path):
        return os.path.isfile(path)
    gfile = _gfile(path)
    return gfile.exists(path) and not gfile.isdir(path) and _listed(gfile, path)


def glob(pattern) -> list:
    """Sorted paths matching `pattern` (the URL form for URLs)."""
    pattern = os.fspath(pattern)
    return sorted(_gfile(pattern).glob(pattern) if is_url(pattern) else _glob.glob(pattern))


def listdir(path) -> list:
    """Sorted names in directory `path` (FileNotFoundError if it is none)."""
    path = os.fspath(path)
    if not is_url(path):
        return sorted(os.listdir(path))
    if not isdir(path):
        raise _not_found(path)
    return sorted(name.rstrip("/") for name in _gfile(path).listdir(path))


# ------------------------------------------------------------------------------------ reading
def read_bytes(path) -> bytes:
    """The file's bytes; FileNotFoundError when there is none (as `open` raises it)."""
    path = os.fspath(path)
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    if not isfile(path):
        raise _not_found(path)
    with _gfile(path).GFile(path, "rb") as f:
        return f.read()


def read_text(path, encoding="utf-8") -> str:
    return read_bytes(path).decode(encoding)


def open_read(path):
    """A binary file object to stream `path` (large shards on a bucket are not read whole)."""
    path = os.fspath(path)
    if not is_url(path):
        return open(path, "rb")
    if not isfile(path):
        raise _not_found(path)
    return _gfile(path).GFile(path, "rb")


# ------------------------------------------------------------------------------------ writing
def makedirs(path) -> None:
    """Create `path` and its parents; nothing if it exists."""
    path = os.fspath(path)
    if is_url(path):
        _gfile(path).makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def _split(path):
    """(parent directory, name) of `path`; the parent of `ram://x` is "" (no local `ram:`)."""
    if not is_url(path):
        return os.path.split(path)
    scheme, rest = path.split("://", 1)
    head, name = posixpath.split(rest.rstrip("/"))
    return (f"{scheme}://{head}" if head else ""), name


def _sibling(path, name):
    """`name` in the directory of `path`."""
    parent, _ = _split(path)
    if is_url(path):
        return posixpath.join(parent, name) if parent else f"{path.split('://', 1)[0]}://{name}"
    return os.path.join(parent, name)


def write_bytes_atomic(path, data: bytes) -> None:
    """`data` to `path` via a temporary file in the same directory + rename (parents created)."""
    path = os.fspath(path)
    parent, _ = _split(path)
    if parent:
        makedirs(parent)
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        if is_url(path):
            gfile = _gfile(path)
            with gfile.GFile(tmp, "wb") as f:
                f.write(data)
            gfile.rename(tmp, path, overwrite=True)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
    except BaseException:
        try:
            remove(tmp)
        except OSError:
            pass
        raise


def write_text_atomic(path, text: str, encoding="utf-8") -> None:
    write_bytes_atomic(path, text.encode(encoding))


def open_write(path):
    """A new binary file object to stream into `path` (parents created); not atomic: for a file
    that grows while it is read, a TensorBoard event file (training/summaries.py). `flush()`
    makes what was written visible (on a bucket, uploaded)."""
    path = os.fspath(path)
    parent, _ = _split(path)
    if parent:
        makedirs(parent)
    if is_url(path):
        return _gfile(path).GFile(path, "wb")
    return open(path, "wb")


def remove(path) -> None:
    """Delete the file `path` (FileNotFoundError if there is none)."""
    path = os.fspath(path)
    if not is_url(path):
        os.remove(path)
        return
    if not exists(path):
        raise _not_found(path)
    _gfile(path).remove(path)


def remove_tree(path) -> None:
    """Delete the directory (or file) `path` with everything below it; nothing if absent."""
    path = os.fspath(path)
    if is_url(path):
        gfile = _gfile(path)
        if isdir(path):
            _rmtree_url(gfile, path)
        elif exists(path):
            gfile.remove(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _rmtree_url(gfile, path):
    try:
        gfile.rmtree(path)
    except Exception:  # noqa: BLE001 -- tf.errors.*, TensorFlow not imported at module level
        # ram:// deletes the tree and then raises NotFound when a sibling's name starts with
        # this one's (`e` beside `e.old`): an error only if something is left.
        if exists(path):
            raise


def _last(name):
    return name.endswith(".json") or name == "checkpoint"


def rename(src, dst, overwrite=True) -> None:
    """Move the file or directory `src` to `dst` (a file `dst` is replaced when `overwrite`)."""
    src, dst = os.fspath(src), os.fspath(dst)
    if not is_url(src) and not is_url(dst):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(17, "File exists", dst)
        os.replace(src, dst)
        return
    gfile = _gfile(src if is_url(src) else dst)
    if not isdir(src):
        gfile.rename(src, dst, overwrite=overwrite)
        return
    if not overwrite and exists(dst):
        raise FileExistsError(17, "File exists", dst)
    src, dst, files = src.rstrip("/"), dst.rstrip("/"), []
    for root, _, names in gfile.walk(src):
        rel = root[len(src):].strip("/")
        gfile.makedirs(posixpath.join(dst, rel) if rel else dst)
        files += [(rel, name) for name in names]
    for rel, name in sorted(files, key=lambda item: (_last(item[1]), item)):
        gfile.rename(posixpath.join(src, rel, name), posixpath.join(dst, rel, name),
                     overwrite=True)
    _rmtree_url(gfile, src)


def replace_dir(tmp_dir, final_dir) -> None:
    """Move a finished `tmp_dir` to `final_dir`, replacing an older one (the old one is moved
    aside first and removed last, so `final_dir` is never a mix of both)."""
    tmp_dir, final_dir = os.fspath(tmp_dir), os.fspath(final_dir)
    old = None
    if exists(final_dir):
        final_dir = final_dir.rstrip("/") or final_dir
        # A hidden sibling: no name that `final_dir` is a prefix of (see _rmtree_url).
        old = _sibling(final_dir, f".{_split(final_dir)[1]}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        rename(final_dir, old)
    rename(tmp_dir, final_dir)
    if old:
        remove_tree(old)


# ------------------------------------------------------------------------------------ paths
# Path arithmetic that works for both kinds (fine-tuning's outputs and inputs use these).
def norm(path) -> str:
    """The path as a string: local paths as pathlib writes them, URLs unchanged."""
    import pathlib
    text = os.fspath(path)
    return text if is_url(text) else str(pathlib.Path(text))


def as_path(path):
    """pathlib.Path for a local path, the string itself for a URL (return values)."""
    import pathlib
    text = norm(path)
    return text if is_url(text) else pathlib.Path(text)


def join(base, *parts) -> str:
    text = norm(base)
    return posixpath.join(text, *parts) if is_url(text) else os.path.join(text, *parts)


def dirname(path) -> str:
    text = norm(path)
    return posixpath.dirname(text.rstrip("/")) if is_url(text) else os.path.dirname(text)


def basename(path) -> str:
    text = norm(path)
    return posixpath.basename(text.rstrip("/")) if is_url(text) else os.path.basename(text)


def not_a_directory(path):
    """Where makedirs(path) would fail: `path` itself, or the nearest of its parents that exists,
    when that is not a directory (an output path that is a file or lies under one); else None.
    For a URL only `path` itself is looked at."""
    text = norm(path)
    while text:
        if exists(text):
            return None if isdir(text) else text
        parent = dirname(text)
        if is_url(text) or parent == text:
            return None
        text = parent
    return None


def output_dir_error(path, flag):
    """One-line message when `path` cannot be made an output directory (`not_a_directory`), or
    None: `<flag> <path>: is a file, not a directory` (or names the parent that is a file)."""
    blocked = not_a_directory(path)
    if blocked is None:
        return None
    where = "is a file" if norm(blocked) == norm(path) else f"{blocked} is a file"
    return f"{flag} {path}: {where}, not a directory"


def absolute_parent(path) -> str:
    """The parent of `path` made absolute (local paths; URLs are absolute already)."""
    text = norm(path)
    return dirname(text) if is_url(text) else os.path.dirname(os.path.abspath(text))


def write_atomic(path, data) -> None:
    """`data` (str: UTF-8, or bytes) to `path`, atomically (write_bytes_atomic)."""
    write_bytes_atomic(path, data.encode("utf-8") if isinstance(data, str) else data)


def mtime(path):
    """Modification time in seconds since the epoch, or None where the filesystem has none."""
    path = os.fspath(path)
    try:
        if not is_url(path):
            return os.path.getmtime(path)
        nsec = _gfile(path).stat(path).mtime_nsec
    except Exception:   # noqa: BLE001 -- an unknown time is not an error
        return None
    return nsec / 1e9 if nsec else None


def list_files(directory, pattern: str = "*") -> list:
    """Sorted paths of the entries of `directory` whose names match `pattern` (fnmatch); []
    when the directory does not exist."""
    import fnmatch
    directory = norm(directory)
    if not isdir(directory):
        return []
    return [join(directory, name) for name in listdir(directory)
            if fnmatch.fnmatchcase(name, pattern)]
