"""scripts/download_glue_data.py offline: the MRPC split (GLUE's procedure) reproduces the GLUE
MRPC files byte for byte from the raw Microsoft files; task-name parsing."""
import importlib.util
import shutil

import pytest

from tests.conftest import REPO_ROOT, shared_path


def load_script():
    spec = importlib.util.spec_from_file_location(
        "download_glue_data", REPO_ROOT / "scripts" / "download_glue_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_format_mrpc_reproduces_glue_files(tmp_path):
    script = load_script()
    real = shared_path("data", "glue", "MRPC")
    for name in script.MRPC_FILES:
        shutil.copy(real / name, tmp_path / name)
        assert script.sha256(tmp_path / name) == script.MRPC_FILES[name][1]
    script.format_mrpc(str(tmp_path))
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        assert (tmp_path / name).read_bytes() == (real / name).read_bytes(), name


def test_parse_tasks():
    script = load_script()
    assert script.parse_tasks("all") == script.ALL_TASKS
    assert script.parse_tasks("cola,sst,STS-B,ax") == ["CoLA", "SST-2", "STS-B", "diagnostic"]
    with pytest.raises(SystemExit, match="unknown task 'squad'"):
        script.parse_tasks("squad")
