"""Shared pytest fixtures.

`../shared` (real GLUE/SQuAD/WikiText data, the BERT vocab, the HF oracle tool) sits beside the
repository in CI and on developer machines, but not in a user's fresh clone: tests that read it
use `shared_path(...)`, which skips cleanly when it is absent.
"""
import os
import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO_ROOT.parent / "shared"))


# Modules whose fixtures run a whole pipeline (a minute or more on 2 cores). scripts/test.sh runs
# the suite with pytest-xdist, one worker per core and whole files per worker (`--dist loadfile
# --no-loadscope-reorder`): these start first, longest first, so the run does not end with one of
# them alone on one core while the other core idles.
# Order: seconds per module in a measured run (--durations=0, 2 workers, 2026-11-26 23:05),
# longest first.
SLOW_MODULES = (
    "tests/test_gpu_run.py", "tests/finetune/test_run_finetuning.py", "tests/test_reproduction.py",
    "tests/training/test_nonfinite.py", "tests/training/test_tasks_both_cores.py",
    "tests/pretrain/test_run_pretraining.py", "tests/finetune/test_run_finetuning_features.py",
    "tests/pretrain/test_jax_trainer.py", "tests/test_fault_injection.py",
    "tests/training/test_xla_compile.py", "tests/data/test_bench_builders.py",
    "tests/analysis/test_ablation.py", "tests/model/test_hf_parity.py",
    "tests/elastic/test_grid.py", "tests/elastic/test_train.py", "tests/elastic/test_pretrain.py",
    "tests/model/test_checkpoints.py", "tests/finetune/test_finetune_precision.py",
    "tests/model/test_paper_configs.py", "tests/pretrain/test_distribution.py",
    "tests/lm/test_lm.py", "tests/finetune/test_jax_finetune.py",
)


def pytest_configure(config):
    """The tests' Python subprocesses (the command-line tools, run as a user runs them) are forks
    of a process that imported TensorFlow once: tests/zygote.py. Not in pytest-xdist's
    controller, which runs no test (its workers start as fresh interpreters).
    CONVBERT_TEST_ZYGOTE=0 turns it off."""
    controller = not hasattr(config, "workerinput") and \
        getattr(config.option, "dist", "no") not in (None, "no")
    if os.environ.get("CONVBERT_TEST_ZYGOTE") != "0" and not controller:
        from tests import zygote
        zygote.install_client(owner=True)


def pytest_unconfigure(config):
    zygote = sys.modules.get("tests.zygote")
    if zygote is not None:
        zygote.stop_zygotes()


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
