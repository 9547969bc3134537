"""Tokenized GLUE and SQuAD features on disk, readable without TensorFlow.

`python -m finetune.features ... --output_dir DIR` (finetune/features.py) tokenizes the splits
once and writes them here; a fine-tuning process then reads the arrays back with numpy alone
(the JAX path, where `import tensorflow` fails). Layout of DIR:

* `<task>_<split>.npz` (`np.savez_compressed`): `input_ids` (uint16 when the vocabulary has at
  most 65536 tokens, else int32), `input_mask` and `segment_ids` (uint8), `label_ids` (int32;
  float32 for STS-B) and `guids` (a numpy unicode array of the example ids). No pickled objects:
  every file loads with `np.load(..., allow_pickle=False)`.
* SQuAD (`squad_<split>.npz`, `squadv1_<split>.npz`): one row per window, the arrays of
  finetune/qa/squad_data.py `SquadFeatures` (`SQUAD_ARRAYS`; ids uint16 / int32 as above, token
  -> context character offsets int32, masks uint8), and for the dev split `dataset`: the SQuAD
  JSON the windows were made from (UTF-8 bytes as uint8), which gives post-processing its
  examples (`read_squad_examples` in the same order, so `example_index` points into them) and
  scoring its gold answers. Its manifest entry also has `"kind": "squad"` and `"questions"`.
* `manifest.json`, written last: `{"format": 1, "vocab_file", "vocab_sha256", "vocab_size",
  "do_lower_case", "max_seq_length", "double_unordered", "max_train_examples", "doc_stride",
  "max_query_length", "files": {"<task>_<split>": {"task", "split", "examples", "file",
  "sha256", "bytes"}}}` (vocab_file is the SentencePiece model for features made with
  `--sp_model`; doc_stride / max_query_length shape SQuAD windows: only in manifests with SQuAD
  files; "bytes", the npz's size, is absent from manifests written before it was recorded, which
  stay readable: their sha256 alone is checked).

Every file goes through base/fileio.py (local paths, gs://, ram://), each written atomically, so
a reader never sees half a file. `load_split` checks the file's size and sha256 against the
manifest (a file cut short, or changed after the manifest was written, is one line naming it)
and gives the arrays back as `convert_examples_to_features` made them (int32 ids, mask and
segments).
`check_compatible` lets a run refuse features made with another vocabulary, length or casing.
Errors are `FeatureFileError` (a `data.errors.DataError`): one line naming the file.

This module imports no TensorFlow: only numpy, json, hashlib, data.errors and base.fileio (which
imports TensorFlow only for a URL path, and needs no Keras).
"""
from __future__ import annotations

import hashlib
import io
import json

import numpy as np

from data.errors import DataError
from base import fileio

FORMAT = 1
MANIFEST_NAME = "manifest.json"
ID_ARRAYS = ("input_ids", "input_mask", "segment_ids")
ARRAY_NAMES = ID_ARRAYS + ("label_ids", "guids")
# What every manifest holds besides "format" and "files" (check_compatible reads them).
MANIFEST_KEYS = ("vocab_file", "vocab_sha256", "vocab_size", "do_lower_case", "max_seq_length",
                 "double_unordered", "max_train_examples")
# SQuAD windows: finetune/qa/squad_data.py SquadFeatures fields -> stored type.
SQUAD_ARRAYS = {"input_ids": None, "input_mask": np.uint8, "segment_ids": np.uint8,
                "start_positions": np.int32, "end_positions": np.int32,
                "is_impossible": np.uint8, "answer_in_window": np.uint8,
                "example_index": np.int32, "doc_span_index": np.int32,
                "token_char_start": np.int32, "token_char_end": np.int32,
                "token_is_max_context": np.uint8}
UINT16_VOCAB_SIZE = 65536   # ids 0..65535 fit uint16
UNCHECKED = object()        # check_compatible: a setting the caller does not check


class FeatureFileError(DataError):
    """Missing, damaged or mismatched feature files (one line naming the file)."""


# ------------------------------------------------------------------------------------ helpers
def manifest_path(features_dir) -> str:
    return fileio.join(features_dir, MANIFEST_NAME)


def file_key(task: str, split: str) -> str:
    """'cola', 'train' -> 'cola_train' (the manifest key and the npz name without .npz)."""
    return f"{task}_{split}"


def vocab_sha256(vocab_file) -> str:
    """sha256 (hex) of the vocabulary file's bytes."""
    try:
        data = fileio.read_bytes(vocab_file)
    except FileNotFoundError:
        raise FeatureFileError(f"vocab file {vocab_file}: not found") from None
    return hashlib.sha256(data).hexdigest()


def ids_dtype(vocab_size: int):
    """uint16 for vocabularies of at most 65536 tokens, else int32."""
    return np.uint16 if vocab_size <= UINT16_VOCAB_SIZE else np.int32


def format_size(num_bytes: int) -> str:
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{num_bytes} B"   # not reached


def _cast_exact(array, dtype, name, where):
    """`array` as `dtype`, refusing integers that would change (ids out of range, ...)."""
    array = np.asarray(array)
    cast = array.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer) and not np.array_equal(cast.astype(array.dtype), array):
        raise FeatureFileError(f"{where}: {name} has values outside {np.dtype(dtype).name} "
                               f"(min {array.min()}, max {array.max()})")
    return cast


# ------------------------------------------------------------------------------------ writing
def _encode_features(arrays, guids, vocab_size, where):
    missing = [name for name in ID_ARRAYS + ("label_ids",) if name not in arrays]
    if missing:
        raise FeatureFileError(f"{where}: no array(s) {', '.join(missing)} to write")
    ids = np.asarray(arrays["input_ids"])
    if vocab_size is None:   # the smallest type that holds the ids
        vocab_size = int(ids.max()) + 1 if ids.size else 0
    labels = np.asarray(arrays["label_ids"])
    label_type = np.float32 if np.issubdtype(labels.dtype, np.floating) else np.int32
    guids = [str(g) for g in guids]
    out = {"input_ids": _cast_exact(ids, ids_dtype(vocab_size), "input_ids", where),
           "input_mask": _cast_exact(arrays["input_mask"], np.uint8, "input_mask", where),
           "segment_ids": _cast_exact(arrays["segment_ids"], np.uint8, "segment_ids", where),
           "label_ids": _cast_exact(labels, label_type, "label_ids", where),
           "guids": np.array(guids, dtype=np.str_)}
    rows = {name: len(value) for name, value in out.items()}
    if len(set(rows.values())) != 1:
        raise FeatureFileError(f"{where}: arrays differ in their number of examples "
                               f"({', '.join(f'{k} {v}' for k, v in rows.items())})")
    return out


def write_features_file(output_dir, task, split, arrays, guids, vocab_size=None):
    """Like `write_features`, also returning the npz size: (entry, num_bytes)."""
    name = file_key(task, split) + ".npz"
    path = fileio.join(output_dir, name)
    encoded = _encode_features(arrays, guids, vocab_size, path)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **encoded)
    data = buffer.getvalue()
    fileio.write_bytes_atomic(path, data)
    entry = {"task": task, "split": split, "examples": int(len(encoded["guids"])), "file": name,
             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    return entry, len(data)


def write_features(output_dir, task, split, arrays, guids, vocab_size=None) -> dict:
    """`<output_dir>/<task>_<split>.npz` from `convert_examples_to_features` arrays and the example
    guids, atomically; returns its manifest entry {"task", "split", "examples", "file", "sha256"}.
    vocab_size sets the id type (uint16 up to 65536 tokens); None: the smallest that holds the
    ids. Values that do not fit their stored type are an error, never wrapped."""
    return write_features_file(output_dir, task, split, arrays, guids, vocab_size)[0]


def make_manifest(files, *, vocab_file, vocab_sha256, vocab_size, do_lower_case, max_seq_length,
                  double_unordered, max_train_examples, doc_stride=None,
                  max_query_length=None) -> dict:
    """The manifest dict (format 1) for `files` ({key: entry from write_features})."""
    manifest = {"format": FORMAT, "vocab_file": str(vocab_file), "vocab_sha256": vocab_sha256,
                "vocab_size": int(vocab_size), "do_lower_case": bool(do_lower_case),
                "max_seq_length": int(max_seq_length),
                "double_unordered": bool(double_unordered),
                "max_train_examples": None if max_train_examples is None
                else int(max_train_examples)}
    for key, value in (("doc_stride", doc_stride), ("max_query_length", max_query_length)):
        if value is not None:
            manifest[key] = int(value)
    manifest["files"] = dict(files)
    return manifest


def write_manifest(output_dir, manifest) -> str:
    """`<output_dir>/manifest.json`, atomically (write it after every npz); returns its path."""
    path = manifest_path(output_dir)
    fileio.write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")
    return path


# ------------------------------------------------------------------------------------ reading
def read_manifest(features_dir) -> dict:
    """The manifest of a features directory; FeatureFileError naming it if it is missing,
    unparseable or of an unknown format."""
    from model.config import ConfigError, read_json_object
    path = manifest_path(features_dir)
    if not fileio.isfile(path):
        raise FeatureFileError(f"{path}: features manifest not found (make the features with "
                               f"python -m finetune.features)")
    try:
        manifest, _ = read_json_object(path, what="features manifest")
    except ConfigError as e:   # names the file: "<path>: invalid JSON at line ..."
        raise FeatureFileError(str(e)) from None
    if manifest.get("format") != FORMAT:
        raise FeatureFileError(f"{path}: unknown features format {manifest.get('format')!r} "
                               f"(this toolkit reads format {FORMAT})")
    missing = [key for key in MANIFEST_KEYS + ("files",) if key not in manifest]
    if missing:
        raise FeatureFileError(f"{path}: features manifest lacks {', '.join(missing)}")
    files = manifest["files"]
    if not isinstance(files, dict) or not all(
            isinstance(e, dict) and {"file", "sha256", "examples"} <= set(e)
            and isinstance(e["file"], str) and isinstance(e["sha256"], str)
            and (e.get("bytes") is None or _is_count(e["bytes"])) for e in files.values()):
        raise FeatureFileError(f"{path}: features manifest 'files' is malformed (expected "
                               f"{{key: {{task, split, examples, file, sha256, bytes}}}})")
    return manifest


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _find_entry(manifest, task, split, where):
    files = manifest["files"]
    key = file_key(task, split)
    if key not in files:
        try:   # GLUE spellings (STS-B, SST-2): finetune.glue.tasks is loaded only for them
            from finetune.glue.tasks import normalize_task_name
            key = file_key(normalize_task_name(task), split)
        except Exception:   # noqa: BLE001 -- an unknown name is reported below
            pass
    if key not in files:
        present = ", ".join(sorted(files)) or "none"
        raise FeatureFileError(f"{where}: no features for {task} {split}; the manifest has: "
                               f"{present}")
    return files[key]


def _read_npz(features_dir, manifest, task, split, names):
    """{name: array} of one listed file, its size (where the manifest has it) and sha256 checked
    against the manifest; with its path and manifest entry."""
    where = manifest_path(features_dir)
    entry = _find_entry(manifest, task, split, where)
    path = fileio.join(features_dir, entry["file"])
    try:
        data = fileio.read_bytes(path)
    except (FileNotFoundError, IsADirectoryError):
        raise FeatureFileError(f"{path}: features file not found (listed in {where})") from None
    size = entry.get("bytes")   # None: a manifest written before sizes were recorded
    sizes = "" if size is None or len(data) == size else (
        f"; {len(data):,} bytes where it lists {size:,}"
        + (", the file cut short" if len(data) < size else ""))
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise FeatureFileError(f"{path}: sha256 {digest} does not match {entry['sha256']} in "
                               f"{where}{sizes} (the file changed after the manifest was "
                               f"written; make the features again)")
    if sizes:   # the bytes hash as listed, their size does not: the manifest was changed
        raise FeatureFileError(f"{path}: {len(data):,} bytes, {where} lists {size:,} (the "
                               f"manifest changed after the features were written; make the "
                               f"features again)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            missing = [name for name in names if name not in npz.files]
            if missing:
                raise FeatureFileError(f"{path}: missing array(s) {', '.join(missing)} "
                                       f"(has: {', '.join(npz.files) or 'none'})")
            raw = {name: npz[name] for name in npz.files}
    except FeatureFileError:
        raise
    except Exception as e:   # noqa: BLE001 -- BadZipFile, pickled objects, truncated data
        raise FeatureFileError(f"{path}: unreadable features file ({' '.join(str(e).split())})"
                               ) from None
    return raw, path, entry


def load_split(features_dir, task, split, manifest=None):
    """(arrays, guids) of one split: arrays `input_ids`, `input_mask`, `segment_ids` (int32
    [N, max_seq_length]) and `label_ids` (int32 [N], float32 for STS-B), exactly as
    `convert_examples_to_features` made them; guids a list of str. The file's sha256 must match
    the manifest's (read from `features_dir` unless given)."""
    if manifest is None:
        manifest = read_manifest(features_dir)
    raw, path, entry = _read_npz(features_dir, manifest, task, split, ARRAY_NAMES)
    if raw["guids"].dtype.kind != "U":
        raise FeatureFileError(f"{path}: guids are {raw['guids'].dtype}, expected unicode")
    arrays = {name: raw[name].astype(np.int32) for name in ID_ARRAYS}
    labels = raw["label_ids"]
    arrays["label_ids"] = labels.astype(np.float32 if labels.dtype.kind == "f" else np.int32)
    _check_shapes(arrays, raw["guids"], entry, manifest, path)
    return arrays, [str(g) for g in raw["guids"].tolist()]


# ------------------------------------------------------------------------------------ SQuAD
def write_squad_features_file(output_dir, task, split, features, dataset_text=None,
                              vocab_size=None):
    """`<output_dir>/<task>_<split>.npz` from a finetune/qa/squad_data.py `SquadFeatures` and,
    for an evaluated split, the SQuAD JSON text its examples were read from; atomically.
    Returns (manifest entry, num_bytes)."""
    name = file_key(task, split) + ".npz"
    path = fileio.join(output_dir, name)
    ids = np.asarray(features.input_ids)
    if vocab_size is None:
        vocab_size = int(ids.max()) + 1 if ids.size else 0
    out = {}
    for key, dtype in SQUAD_ARRAYS.items():
        out[key] = _cast_exact(getattr(features, key), dtype or ids_dtype(vocab_size), key,
                               path)
    if dataset_text is not None:
        out["dataset"] = np.frombuffer(dataset_text.encode("utf-8"), np.uint8)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **out)
    data = buffer.getvalue()
    fileio.write_bytes_atomic(path, data)
    questions = len(set(int(i) for i in features.example_index))
    entry = {"task": task, "split": split, "kind": "squad", "examples": len(features),
             "questions": questions, "file": name, "sha256": hashlib.sha256(data).hexdigest(),
             "bytes": len(data)}
    return entry, len(data)


def load_squad_split(features_dir, task, split, manifest=None, with_dataset=False):
    """(SquadFeatures, dataset) of one SQuAD split, the arrays as `convert_examples_to_features`
    made them; dataset: the parsed SQuAD JSON stored with the windows (None unless
    `with_dataset`; FeatureFileError if the file has none). sha256 checked as `load_split`."""
    from finetune.qa.squad_data import SquadFeatures
    if manifest is None:
        manifest = read_manifest(features_dir)
    names = tuple(SQUAD_ARRAYS) + (("dataset",) if with_dataset else ())
    raw, path, entry = _read_npz(features_dir, manifest, task, split, names)
    arrays = {k: raw[k].astype(bool if k == "token_is_max_context" else np.int32)
              for k in SQUAD_ARRAYS}
    n, length = entry["examples"], manifest["max_seq_length"]
    for key, value in arrays.items():
        want = (n, length) if key in ID_ARRAYS or key.startswith("token_") else (n,)
        if value.shape != want:
            raise FeatureFileError(f"{path}: {key} has shape {value.shape}, the manifest says "
                                   f"{want}")
    dataset = None
    if with_dataset:
        try:
            dataset = json.loads(raw["dataset"].tobytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FeatureFileError(f"{path}: its SQuAD dataset is not valid JSON ({e})"
                                   ) from None
    return SquadFeatures(**arrays), dataset


def _check_shapes(arrays, guids, entry, manifest, path):
    n = entry["examples"]
    length = manifest["max_seq_length"]
    for name in ID_ARRAYS:
        if arrays[name].shape != (n, length):
            raise FeatureFileError(f"{path}: {name} has shape {arrays[name].shape}, the manifest "
                                   f"says ({n}, {length})")
    for name, value in (("label_ids", arrays["label_ids"]), ("guids", guids)):
        if value.shape != (n,):
            raise FeatureFileError(f"{path}: {name} has shape {value.shape}, the manifest says "
                                   f"({n},)")


def _flag(value):
    """true / false / none, as on the command line."""
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def check_compatible(manifest, manifest_path, vocab_sha256=None, max_seq_length=None,
                     do_lower_case=None, *, double_unordered=None, max_train_examples=UNCHECKED,
                     doc_stride=None, max_query_length=None):
    """FeatureFileError unless the features match what the run asks for; None = not checked
    (for max_train_examples, where None means "all", leaving it out = not checked).
    The message names the manifest: `<path>: features were made with max_seq_length 128, this
    run asks for 64`."""
    def mismatch(what, made, asked):
        raise FeatureFileError(f"{manifest_path}: features were made with {what} {made}, "
                               f"this run asks for {asked}")

    if vocab_sha256 is not None and manifest.get("vocab_sha256") != vocab_sha256:
        raise FeatureFileError(
            f"{manifest_path}: features were made with another vocabulary "
            f"({manifest.get('vocab_file')}, sha256 {manifest.get('vocab_sha256')}), this run's "
            f"vocabulary has sha256 {vocab_sha256}")
    if max_seq_length is not None and manifest.get("max_seq_length") != int(max_seq_length):
        mismatch("max_seq_length", manifest.get("max_seq_length"), int(max_seq_length))
    if do_lower_case is not None and manifest.get("do_lower_case") != bool(do_lower_case):
        mismatch("do_lower_case", _flag(manifest.get("do_lower_case")), _flag(bool(do_lower_case)))
    if double_unordered is not None and manifest.get("double_unordered") != bool(double_unordered):
        mismatch("double_unordered", _flag(manifest.get("double_unordered")),
                 _flag(bool(double_unordered)))
    if max_train_examples is not UNCHECKED and \
            manifest.get("max_train_examples") != max_train_examples:
        mismatch("max_train_examples", _flag(manifest.get("max_train_examples")),
                 _flag(max_train_examples))
    # SQuAD's windows: another stride or question cut gives other windows (and answers). A
    # manifest without SQuAD files has neither: reading the split names what is missing.
    for key, asked in (("doc_stride", doc_stride), ("max_query_length", max_query_length)):
        if asked is not None and key in manifest and manifest[key] != int(asked):
            mismatch(key, _flag(manifest.get(key)), int(asked))
