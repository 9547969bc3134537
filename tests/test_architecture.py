"""The package layering of docs/ARCHITECTURE.md, checked on the source text (no imports run):
dependencies point one way, and the training core's concerns have one home each."""
import ast
import pathlib

from tests.conftest import REPO_ROOT

PACKAGES = ("model", "data", "training", "pretrain", "finetune", "reproduce", "benchmarks")


def python_files(*roots):
    for root in roots:
        yield from sorted((REPO_ROOT / root).rglob("*.py"))


def imported_modules(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def imports_of(root, forbidden):
    bad = []
    for path in python_files(root):
        for module in imported_modules(path):
            if module.split(".")[0] in forbidden:
                bad.append(f"{path.relative_to(REPO_ROOT)} imports {module}")
    return bad


def test_model_imports_no_training_or_task_package():
    assert imports_of("model", {"training", "pretrain", "finetune", "reproduce"}) == []


def test_training_core_imports_no_task_package():
    assert imports_of("training", {"pretrain", "finetune", "reproduce"}) == []


def test_checkpoints_do_not_import_the_models():
    """model/encoder.py -> model/checkpoints.py, never the reverse (no import circle)."""
    modules = set(imported_modules(REPO_ROOT / "model" / "checkpoints.py"))
    assert not {m for m in modules if m.startswith(("model.encoder", "model.masked_lm"))}
    assert not modules & {"model.ConvBertModel", "model.ConvBertMaskedLM"}


def source_lines_with(text):
    hits = []
    for path in python_files(*PACKAGES):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text in line and not line.lstrip().startswith("#"):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    for path in sorted(REPO_ROOT.glob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if text in line:
                hits.append(f"{path.name}:{number}")
    return hits


def test_one_home_for_each_loop_concern():
    """One ETA formatter, one scalar writer, one checkpoint manager (training/)."""
    assert [h for h in source_lines_with("timedelta(")
            if not h.startswith("training/progress.py")] == []
    assert [h for h in source_lines_with("create_file_writer(")
            if not h.startswith("training/summaries.py")] == []
    assert [h for h in source_lines_with("tf.train.CheckpointManager(")
            if not h.startswith("training/state.py")] == []


def test_language_model_builds_on_model_and_training_only():
    """lm/ (issue 18) is the encoder with causal=True on the training core: model/ never imports
    it, and it imports no other task package."""
    assert imports_of("model", {"lm"}) == []
    assert imports_of("lm", {"pretrain", "finetune", "reproduce", "elastic"}) == []
