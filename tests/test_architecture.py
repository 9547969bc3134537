"""The package layering of docs/ARCHITECTURE.md, checked on the source text (no imports run):
dependencies point one way (every import statement counts, those inside functions too), and the
training core's concerns have one home each."""
import ast
import pathlib

from tests.conftest import REPO_ROOT

PACKAGES = ("base", "model", "data", "training", "pretrain", "finetune", "reproduce", "benchmarks")


# docs/ARCHITECTURE.md's layers, bottom first. A package imports only packages of lower layers,
# never one of its own layer or above, at module level or inside a function. base/ is the floor:
# every package may import it, and it imports none of the toolkit's packages.
LAYERS = (("base",), ("model", "data"), ("training", "keras_hub_convbert"), ("pretrain",),
          ("finetune",),
          ("elastic", "reproduce", "benchmarks"), ("analysis",), ("lm",))
LAYER_OF = {package: layer for layer, members in enumerate(LAYERS) for package in members}
# The one deliberate exception: data/'s builders use the toolkit's one ETA formatter,
# training/progress.py (pure Python, no TensorFlow).
ALLOWED_UPWARD = {"data": ("training.progress",)}


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


def imported_names(tree):
    """(line, dotted name) of everything each import statement anywhere in `tree` brings in:
    `import a.b` -> a.b, `from a import b` -> a.b (relative imports stay inside their package)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def layering_violations(package, source, filename="<source>"):
    """The imports in `source` (a file of `package`) of a toolkit package on its layer or above."""
    bad = []
    for line, name in imported_names(ast.parse(source, filename)):
        target = name.split(".")[0]
        if target == package or target not in LAYER_OF:
            continue
        if LAYER_OF[target] < LAYER_OF[package]:
            continue
        if any(name == ok or name.startswith(ok + ".") for ok in ALLOWED_UPWARD.get(package, ())):
            continue
        bad.append(f"{filename}:{line} imports {name}")
    return bad


def test_every_package_imports_only_lower_layers():
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")} - {"tests"}
    assert set(LAYER_OF) == packages   # a new package gets its layer here and in the docs
    bad = []
    for package in LAYER_OF:
        for path in python_files(package):
            bad += layering_violations(package, path.read_text(encoding="utf-8"),
                                       str(path.relative_to(REPO_ROOT)))
    assert bad == []


def test_base_imports_no_toolkit_package():
    assert imports_of("base", set(LAYER_OF) - {"base"}) == []
    assert sorted(p.name for p in python_files("base")) == ["__init__.py", "command.py",
                                                            "fileio.py", "plots.py",
                                                            "protowire.py"]


def test_model_holds_no_file_access_or_optimizer_module():
    """model/ is the network and its checkpoints: file access lives in base/, the optimizer and
    its schedules in training/."""
    names = {p.name for p in python_files("model")}
    assert not names & {"fileio.py", "optimization.py"}
    assert (REPO_ROOT / "training" / "optimization.py").is_file()


def test_layering_check_sees_an_import_inside_a_function():
    """An upward import hidden in a function body (a lazy import) is a violation too."""
    lazy = "import os\n\n\ndef f():\n    if os.sep:\n        from reproduce import recipes\n"
    assert layering_violations("analysis", lazy) == []
    assert layering_violations("model", lazy) == ["<source>:6 imports reproduce.recipes"]
    in_a_method = "class A:\n    def m(self):\n        import model.config\n"
    assert layering_violations("base", in_a_method) == ["<source>:3 imports model.config"]
    upward = "def f():\n    from analysis.curves import x\n"
    assert layering_violations("reproduce", upward) == ["<source>:2 imports analysis.curves.x"]
    # Same layer counts as upward; the declared exception does not.
    assert layering_violations("model", "def f():\n    import data.vocab\n") != []
    assert layering_violations("data", "def f():\n    from training.progress import f\n") == []
    assert layering_violations("data", "def f():\n    from training.core import f\n") != []


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


# ------------------------------------------------------------------------------ import cycles
def module_sources():
    """{dotted module name: (source text, is a package's __init__)} of every toolkit package and
    the top-level drivers."""
    paths = list(python_files(*LAYER_OF)) + sorted(REPO_ROOT.glob("*.py"))
    sources = {}
    for path in paths:
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        sources[".".join(parts)] = (path.read_text(encoding="utf-8"), package)
    return sources


def import_graph(sources):
    """{module: the modules of `sources` it imports}: every import statement, at module level or
    inside a function (a lazy import is an arrow too). `from a import b` points at module a.b
    when there is one, else at a (a name a's __init__ defines); relative imports are resolved."""
    def known(name):
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, (source, package) in sources.items():
        targets = set()
        for node in ast.walk(ast.parse(source, module)):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")[:len(module.split(".")) - (0 if package else 1)]
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets.update(known(f"{base}.{alias.name}") for alias in node.names)
        graph[module] = targets - {None, module}
    return graph


def import_cycles(graph):
    """The import circles of `graph`: its strongly connected components of more than one module
    (Tarjan's algorithm), each as sorted lines `a -> b` of the arrows inside it."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(f"{a} -> {b}" for a in component
                                         for b in graph[a] & component))
    return cycles


def test_no_import_cycle_between_modules():
    """Arrows point one way inside packages too: no two modules import each other, directly or
    through others, at module level or inside a function (docs/ARCHITECTURE.md)."""
    assert import_cycles(import_graph(module_sources())) == []


def test_cycle_check_sees_lazy_package_and_relative_imports():
    sources = {
        "pkg": ("def __getattr__(name):\n    from pkg.core import Core\n    return Core\n", True),
        "pkg.core": ("from pkg import CONSTANT\n", False),       # a name of pkg/__init__.py
        "pkg.a": ("from pkg import b\n", False),                  # the module pkg.b
        "pkg.b": ("def f():\n    from .a import x\n", False),     # lazy and relative
        "pkg.c": ("import pkg.a\n", False),                       # one way: no circle
    }
    assert import_cycles(import_graph(sources)) == [["pkg -> pkg.core", "pkg.core -> pkg"],
                                                    ["pkg.a -> pkg.b", "pkg.b -> pkg.a"]]
    sources["pkg.constants"] = ("CONSTANT = 1\n", False)
    sources["pkg.core"] = ("from pkg.constants import CONSTANT\n", False)   # one home for it
    sources["pkg.b"] = ("def f():\n    import os\n", False)
    assert import_cycles(import_graph(sources)) == []
