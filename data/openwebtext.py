"""OpenWebText in ELECTRA's layout: `<data_dir>/openwebtext/*.xz` archives of many .txt files.

Each archive (a tar.xz, as in the OpenWebText release; a plain .xz of one text also works) is
one unit of work of the builder, on both engines (the local processes and Beam). It is read as
a stream from any filesystem TensorFlow knows (local, gs://): decompressed and untarred in
memory, member by member, with no staging folder and no local disk. Every text member is one
document (blanks_separate_docs=False, as ELECTRA) and is packed with its own random stream,
seeded by the name it had in the staging folder of earlier versions
(`<archive stem>__<member number>__<member name>`), so the examples did not change when the
extraction step went away.

A corrupt archive (bad xz data, a broken tar) is a CorpusError naming it; a member that is not
UTF-8 text is a CorpusError naming the archive and the member. With --skip_bad_files the first
skips the whole archive (nothing of it is written: an archive's members are all read before any
is packed), the second only that member.
"""
import contextlib
import lzma
import os
import re
import tarfile

import tensorflow as tf

from data.errors import CorpusError

ARCHIVE_SUFFIX = ".xz"
_BLOCK = tarfile.BLOCKSIZE  # 512: a tar header


def list_archives(openwebtext_dir):
    """The `*.xz` archives directly inside `openwebtext_dir`, sorted (CorpusError if none)."""
    openwebtext_dir = str(openwebtext_dir)
    if not tf.io.gfile.isdir(openwebtext_dir):
        raise CorpusError(f"OpenWebText directory {openwebtext_dir}: not found")
    archives = sorted(tf.io.gfile.glob(os.path.join(openwebtext_dir, "*" + ARCHIVE_SUFFIX)))
    if not archives:
        raise CorpusError(f"OpenWebText directory {openwebtext_dir}: no *.xz archives")
    return archives


def _safe_name(text):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _stem(archive):
    return _safe_name(os.path.basename(archive)[:-len(ARCHIVE_SUFFIX)])


@contextlib.contextmanager
def _xz_stream(archive):
    """The decompressed bytes of `archive` as a file object, read from the filesystem lazily."""
    with tf.io.gfile.GFile(archive, "rb") as raw, lzma.open(raw, "rb") as stream:
        yield stream


def _is_tar(archive):
    """Whether the decompressed archive starts with a tar header (read: its first 512 bytes)."""
    with _xz_stream(archive) as stream:
        block = stream.read(_BLOCK)
    if block == b"\0" * _BLOCK:
        return True  # an empty tar
    try:
        tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


_BROKEN = (lzma.LZMAError, EOFError, tarfile.TarError)


def read_archive(archive):
    """[(name, label, raw bytes)] of the text files of `archive`, in archive order.

    `name` seeds the file's random stream (see the module doc), `label` names it in messages
    (`<archive> member <member path>`). Raises CorpusError naming the archive (and the member
    being read) when the archive is not valid xz or tar data.
    """
    member_name = None
    try:
        if not _is_tar(archive):
            with _xz_stream(archive) as stream:
                return [(_stem(archive) + ".txt", archive, stream.read())]
        stem, files = _stem(archive), []
        with tf.io.gfile.GFile(archive, "rb") as raw, \
                tarfile.open(fileobj=raw, mode="r|xz") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                member_name = member.name
                content = tar.extractfile(member).read()
                name = f"{stem}__{len(files):06d}__{_safe_name(os.path.basename(member.name))}"
                files.append((name, f"{archive} member {member.name}", content))
                member_name = None
        return files
    except _BROKEN as e:
        where = f" (in member {member_name})" if member_name else ""
        reason = " ".join(str(e).split()) or type(e).__name__
        raise CorpusError(f"archive {archive}: not a valid .xz or tar.xz file{where}: "
                          f"{reason}") from None
