"""OpenWebText in ELECTRA's layout: `<data_dir>/openwebtext/*.xz` archives of many .txt files.

Each archive (a tar.xz, as in the OpenWebText release; a plain .xz of one text also works) is
extracted into a local staging directory under flat, unique names, and the regular builder runs
over it with blanks_separate_docs=False: every .txt file is one document.
"""
import io
import lzma
import os
import re
import shutil
import tarfile
import tempfile

import tensorflow as tf

from data.errors import CorpusError


def list_archives(openwebtext_dir):
    openwebtext_dir = str(openwebtext_dir)
    if not tf.io.gfile.isdir(openwebtext_dir):
        raise CorpusError(f"OpenWebText directory {openwebtext_dir}: not found")
    archives = sorted(tf.io.gfile.glob(os.path.join(openwebtext_dir, "*.xz")))
    if not archives:
        raise CorpusError(f"OpenWebText directory {openwebtext_dir}: no *.xz archives")
    return archives


def _safe_name(text):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def extract_archive(archive, staging_dir):
    """Writes each text member of `archive` to `staging_dir`; returns how many files."""
    with tf.io.gfile.GFile(archive, "rb") as f:
        data = f.read()
    stem = _safe_name(os.path.basename(archive)[:-len(".xz")])
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
            count = 0
            for member in tar:
                if not member.isfile():
                    continue
                content = tar.extractfile(member).read()
                name = f"{stem}__{count:06d}__{_safe_name(os.path.basename(member.name))}"
                with open(os.path.join(staging_dir, name), "wb") as out:
                    out.write(content)
                count += 1
            return count
    except tarfile.ReadError:
        pass  # not a tar: a single compressed text
    try:
        content = lzma.decompress(data)
    except lzma.LZMAError:
        raise CorpusError(f"archive {archive}: not a valid .xz file") from None
    with open(os.path.join(staging_dir, stem + ".txt"), "wb") as out:
        out.write(content)
    return 1


def build_openwebtext_pretraining_dataset(data_dir, config_overrides, tmp_dir=None):
    """Extracts `<data_dir>/openwebtext/*.xz` and builds shards; returns the builder summary.

    `config_overrides` are BuildConfig fields (vocab_file, output_dir, max_seq_length, ...);
    corpus_dir and blanks_separate_docs are set here.
    """
    from data.pretraining_builder import BuildConfig, build_pretraining_dataset

    archives = list_archives(os.path.join(str(data_dir), "openwebtext"))
    staging = tempfile.mkdtemp(prefix="owt-corpus-", dir=tmp_dir)
    try:
        for archive in archives:
            extract_archive(archive, staging)
        config = BuildConfig(corpus_dir=staging, blanks_separate_docs=False, **config_overrides)
        return build_pretraining_dataset(config)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
