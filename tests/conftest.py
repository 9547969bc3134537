"""Shared pytest fixtures.

`../shared` (real GLUE/SQuAD/WikiText data, the BERT vocab, the HF oracle tool) sits beside the
repository in CI and on developer machines, but not in a user's fresh clone: tests that read it
use `shared_path(...)`, which skips cleanly when it is absent.
"""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO_ROOT.parent / "shared"))


def shared_path(*parts) -> pathlib.Path:
    """Path under ../shared, or skip the calling test when that file is not there."""
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is absent)")
    return path


@pytest.fixture
def bert_vocab_file():
    return shared_path("data", "vocab", "bert-uncased-vocab.txt")


def keras_backend() -> str:
    import keras
    return keras.backend.backend()
