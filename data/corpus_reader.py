"""Reading corpus text files: listing, strict UTF-8 decoding, splitting into stripped lines.

Follows ELECTRA's reader: a line ends at "\n" (so CRLF files work: "\r" is stripped with the
other surrounding whitespace) and every line is stripped. Files are validated before any of
their text is used, so a bad file can be skipped whole (--skip_bad_files) or reported.
"""
import os

import tensorflow as tf

from data.errors import CorpusError

UTF8_BOM = "\ufeff"


def list_corpus_files(corpus_dir):
    """The regular, non-hidden files directly inside `corpus_dir`, sorted by name."""
    corpus_dir = str(corpus_dir)
    if not tf.io.gfile.isdir(corpus_dir):
        raise CorpusError(f"corpus directory {corpus_dir}: not found or not a directory")
    paths = []
    for name in sorted(tf.io.gfile.listdir(corpus_dir)):
        name = name.rstrip("/")  # gfile marks sub-directories of object stores with "/"
        path = os.path.join(corpus_dir, name)
        if name.startswith(".") or tf.io.gfile.isdir(path):
            continue
        paths.append(path)
    if not paths:
        raise CorpusError(f"corpus directory {corpus_dir}: contains no files")
    return paths


def decode_corpus_bytes(raw, path):
    """Decodes a file's bytes as UTF-8, raising CorpusError naming the file and byte offset."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise CorpusError(f"corpus file {path}: binary data (NUL byte at byte offset {nul}), "
                          "expected UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus file {path}: invalid UTF-8 at byte offset {e.start}") from None
    return text[1:] if text.startswith(UTF8_BOM) else text


def read_corpus_file(path):
    """The whole text of one corpus file (validated)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    return decode_corpus_bytes(raw, path)


def stripped_lines(text):
    """Lines of `text` split at "\n" only (as ELECTRA's reader), each stripped of whitespace."""
    return [line.strip() for line in text.split("\n")]
