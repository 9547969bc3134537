"""The README's table of setup extras says what each one installs: every extra of setup.py has
its row, and each row names every package the extra (or the base install) brings."""
import ast
import re

from tests.conftest import REPO_ROOT


def setup_requirements():
    """{"": install_requires, extra: its packages} read from setup.py without running it."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords
                if k.arg in ("install_requires", "extras_require")}
    return {"": keywords["install_requires"], **keywords["extras_require"]}


def readme_rows():
    """{extra ("" for the base install): what-it-adds cell} of the README's extras table."""
    rows = {}
    for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and (cells[0] == "(none)" or re.fullmatch(r"`[\w-]+`", cells[0])):
            rows["" if cells[0] == "(none)" else cells[0].strip("`")] = cells[1]
    return rows


def package_name(requirement):
    return re.split(r"[\[<>=~! ]", requirement, maxsplit=1)[0].lower()


def test_readme_names_what_every_extra_installs():
    requirements, rows = setup_requirements(), readme_rows()
    assert set(rows) == set(requirements)
    for extra, packages in requirements.items():
        cell = rows[extra].lower()
        missing = [p for p in packages if package_name(p) not in cell]
        assert not missing, f"README's `{extra or '(none)'}` row does not name {missing}"
