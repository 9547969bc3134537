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


# Modules whose fixtures run a whole pipeline (a minute or more on 2 cores). scripts/test.sh runs
# the suite with pytest-xdist, one worker per core and whole files per worker (`--dist loadfile
# --no-loadscope-reorder`): these start first, longest first, so the run does not end with one of
# them alone on one core while the other core idles.
# Order: seconds per module in a measured run (--durations=0, 2 workers), longest first.
SLOW_MODULES = (
    "tests/finetune/test_run_finetuning.py", "tests/test_reproduction.py",
    "tests/test_bad_inputs.py", "tests/test_fault_injection.py",
    "tests/pretrain/test_jax_trainer.py", "tests/pretrain/test_run_pretraining.py",
    "tests/analysis/test_ablation.py", "tests/training/test_nonfinite.py", "tests/test_gpu_run.py",
    "tests/finetune/test_run_finetuning_features.py", "tests/elastic/test_pretrain.py",
    "tests/training/test_xla_compile.py", "tests/training/test_tasks_both_cores.py",
    "tests/finetune/test_finetune_precision.py", "tests/model/test_paper_configs.py",
    "tests/pretrain/test_distribution.py", "tests/elastic/test_hidden_slicing.py",
    "tests/finetune/test_jax_finetune.py", "tests/lm/test_lm.py", "tests/elastic/test_grid.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {module: i for i, module in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


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
