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


# A corpus line is a sentence (or a paragraph); a longer "line" is a file that is not line-based
# text (a minified dump, a database export) and would be tokenized as one 1,000,000-token
# document. Files without a line this long are never split or scanned for it.
MAX_LINE_BYTES = 1 << 20


def decode_corpus_bytes(raw, path):
    """Decodes a file's bytes as UTF-8, raising CorpusError naming the file, the line and the
    byte offset of a NUL byte, an invalid UTF-8 sequence or a line over MAX_LINE_BYTES."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise CorpusError(f"corpus file {path}: binary data (NUL byte on line "
                          f"{_line_of(raw, nul)}, byte offset {nul}), expected UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus file {path}: invalid UTF-8 on line {_line_of(raw, e.start)} "
                          f"at byte offset {e.start}") from None
    check_line_lengths(raw, path)
    return text[1:] if text.startswith(UTF8_BOM) else text


def _line_of(raw, offset):
    """1-based line number of byte `offset`."""
    return raw.count(b"\n", 0, offset) + 1


def check_line_lengths(raw, path, limit=MAX_LINE_BYTES):
    """CorpusError naming the file and line when a line of `raw` is longer than `limit` bytes."""
    if len(raw) <= limit:
        return
    start, line = 0, 1
    while start < len(raw):
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        if end - start > limit:
            raise CorpusError(f"corpus file {path}: line {line} is {end - start:,} bytes long, "
                              f"longer than {limit:,} (one sentence or paragraph per line; "
                              "is this a text corpus?)")
        start, line = end + 1, line + 1


def read_corpus_file(path):
    """The whole text of one corpus file (validated)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    return decode_corpus_bytes(raw, path)


def stripped_lines(text):
    """Lines of `text` split at "\n" only (as ELECTRA's reader), each stripped of whitespace."""
    return [line.strip() for line in text.split("\n")]
