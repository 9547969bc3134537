"""Nothing read from disk is executed (issue 19 item 5).

1. A scan of the toolkit's own source (its syntax tree, not a grep) for every way to run code
   that came from a file: pickle / marshal / dill / shelve / joblib, eval / exec / compile,
   yaml.load without a safe loader, numpy's allow_pickle, torch.load without weights_only,
   a shell (os.system, os.popen, shell=True) and dynamic imports of a name not written in the
   source.
2. The loaders: a pickle that would run code when unpickled, named as every kind of checkpoint
   the toolkit reads, is refused with one line and the code does not run; config values that look
   like shell or Python are stored as strings and never run.
"""
import ast
import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.test_bad_inputs import _env, stderr_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("model", "data", "pretrain", "finetune", "training", "elastic", "lm", "analysis",
            "scripts", "benchmarks")
BANNED_MODULES = {"pickle", "cPickle", "_pickle", "dill", "marshal", "shelve", "joblib",
                  "cloudpickle"}
BANNED_CALLS = {"eval", "exec", "compile", "__import__"}
# file -> the calls allowed there, and why. Each entry is a reviewed exception, not a rule.
ALLOWED = {
    # the version string of the JAX package in a benchmark's banner: a literal name
    ("benchmarks/gpu_pretrain.py", "__import__"),
}


def source_files():
    files = [os.path.join(ROOT, f) for f in os.listdir(ROOT)
             if f.endswith(".py") and f.startswith("run_")]
    for package in PACKAGES:
        for directory, _, names in os.walk(os.path.join(ROOT, package)):
            files += [os.path.join(directory, n) for n in names if n.endswith(".py")]
    return sorted(files)


def _name(node):
    """Dotted name of a call target: os.system, yaml.load, eval, ..."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base or '?'}.{node.attr}"   # ?: a call's result, e.g. model(...).eval()
    return None


def _keyword(call, name):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _is_true(node):
    return isinstance(node, ast.Constant) and node.value is True


def findings_in(path, text):
    rel = os.path.relpath(path, ROOT)
    tree = ast.parse(text, filename=rel)
    found = []

    def report(node, what):
        if (rel, what) not in ALLOWED:
            found.append(f"{rel}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in BANNED_MODULES:
                    report(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in BANNED_MODULES:
                report(node, f"from {node.module} import")
        elif isinstance(node, ast.Call):
            name = _name(node.func) or ""
            last = name.rsplit(".", 1)[-1]
            if name in BANNED_CALLS:
                report(node, name)
            elif name in ("os.system", "os.popen", "os.execv", "os.execvp", "os.spawnv"):
                report(node, name)
            elif _is_true(_keyword(node, "shell")):     # subprocess.run, a bare run, Popen ...
                report(node, f"{name}(shell=True)")
            elif name in ("yaml.load", "yaml.load_all") and not _keyword(node, "Loader"):
                report(node, f"{name} without a safe Loader")
            elif last == "load" and _is_true(_keyword(node, "allow_pickle")):
                report(node, f"{name}(allow_pickle=True)")
            elif name == "torch.load" and not _is_true(_keyword(node, "weights_only")):
                report(node, "torch.load without weights_only=True")
            elif name in ("importlib.import_module", "import_module") and node.args and \
                    not isinstance(node.args[0], ast.Constant):
                report(node, f"{name} of a computed name")
    return found


def test_the_scan_finds_each_banned_construct():
    """The scanner itself: every construct it promises to find, it finds."""
    bad = "\n".join([
        "import pickle", "from marshal import loads", "eval(x)", "exec(x)", "compile(x, 'f', 'exec')",
        "os.system(x)", "subprocess.run(x, shell=True)", "run(x, shell=True)", "yaml.load(x)",
        "np.load(x, allow_pickle=True)", "torch.load(x)", "importlib.import_module(name)",
    ])
    found = findings_in(os.path.join(ROOT, "model", "fake.py"), bad)
    assert len(found) == 12, found
    fine = "\n".join(["json.loads(x)", "yaml.load(x, Loader=yaml.SafeLoader)",
                      "torch.load(x, weights_only=True)", "subprocess.run([a, b])",
                      "importlib.import_module('keras')", "model.eval()",
                      "Model(cfg).eval()"])
    assert findings_in(os.path.join(ROOT, "model", "fake.py"), fine) == []


def test_no_code_is_run_from_files():
    files = source_files()
    assert len(files) > 50 and any(f.endswith("run_pretraining.py") for f in files)
    found = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            found += findings_in(path, f.read())
    assert not found, "code that could run what a file holds:\n" + "\n".join(found)


class _Marker:
    """Unpickling this creates the marker file: the proof that a loader ran a pickle."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _run(args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "model.ckpt"])
def test_a_pickle_checkpoint_is_refused_and_never_run(tmp_path, name):
    from model.checkpoints import CheckpointError, resolve_checkpoint
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Marker(str(marker)))
    # As a file handed directly, and inside a directory that looks like a Hugging Face model.
    (tmp_path / name).write_bytes(payload)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / name).write_bytes(payload)
    for path in (tmp_path / name, hf_dir):
        with pytest.raises(CheckpointError) as error:
            resolve_checkpoint(str(path))
        assert "\n" not in str(error.value) and str(path) in str(error.value)
    assert not marker.exists()


def test_the_cli_refuses_a_pickle_and_never_runs_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(_Marker(str(marker))))
    done = _run([os.path.join(ROOT, "scripts", "convert_checkpoint.py"),
                 "--input", str(tmp_path / "pytorch_model.bin"),
                 "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode != 0
    lines = stderr_lines(done.stderr)
    assert len(lines) == 1 and "pickle" in lines[0], done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_config_strings_are_data_not_code(tmp_path):
    """Shell and Python in a config or --hparams stay strings: nothing runs, nothing is created."""
    from model.config import ConfigError, ConvBertConfig
    marker = tmp_path / "ran"
    shell = f"$(touch {marker}); `touch {marker}`"
    python = f"__import__('os').system('touch {marker}')"
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"hidden_act": python, "conv_type": shell}))
    with pytest.raises(ConfigError) as error:
        ConvBertConfig.from_json(str(config_file))
    assert "\n" not in str(error.value)
    done = _run([os.path.join(ROOT, "run_finetuning.py"), "--task_names=mrpc",
                 f"--data_dir={tmp_path / 'glue'}", f"--vocab_file={shell}",
                 f"--model_dir={tmp_path / 'm'}", f"--init_checkpoint={python}",
                 "--hparams", json.dumps({"model_size": python})], cwd=tmp_path)
    assert done.returncode != 0
    assert len(stderr_lines(done.stderr)) == 1, done.stderr
    assert not marker.exists()
