"""benchmarks/refresh.py (re-measures docs/PERFORMANCE.md's headline table) at tiny sizes on a
copy of the document: every CPU row is rewritten (figure, date, load) or says why not, the rows it
cannot measure keep their date, a run record is appended, and the real document is never
touched by --tiny."""
import os
import shutil
import subprocess
import sys

from tests.conftest import REPO_ROOT, shared_path


def test_tiny_refresh_rewrites_or_marks_every_row(tmp_path):
    shared_path("data", "vocab", "bert-uncased-vocab.txt")
    from benchmarks import refresh
    doc = tmp_path / "PERFORMANCE.md"
    shutil.copy(REPO_ROOT / "docs" / "PERFORMANCE.md", doc)
    original = doc.read_text(encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    refused = subprocess.run([sys.executable, "benchmarks/refresh.py", "--tiny"], cwd=REPO_ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--doc" in refused.stderr
    proc = subprocess.run([sys.executable, "benchmarks/refresh.py", "--tiny", f"--doc={doc}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the real document untouched by this run (others may edit it meanwhile: no equality check)
    assert str(doc) not in (REPO_ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")

    before = original.splitlines()
    old = {refresh.split_cells(before[i])[0][:20]: refresh.split_cells(before[i])
           for i in refresh.table_lines(before)}
    lines = doc.read_text(encoding="utf-8").splitlines()
    table = [refresh.split_cells(lines[i]) for i in refresh.table_lines(lines)]
    assert len(table) == len(old)
    ctx = refresh.Context(True, tmp_path, tmp_path, None)
    for spec in refresh.ROWS:
        cells = next(c for c in table if c[0].startswith(spec.prefix))
        reason = spec.skip(ctx) if spec.skip else None
        if reason is None:   # measured: the tiny run's date and load, nothing kept
            assert "(--tiny: not a measurement)" in cells[5], (spec.key, cells)
            assert "(not re-measured by refresh" not in cells[1], (spec.key, proc.stdout)
        else:                # kept: its figure, date and load, and why
            assert cells[1].endswith(f"(not re-measured by refresh: {reason})"), cells
            kept = old[cells[0][:20]]
            assert cells[4:] == kept[4:] and cells[1].startswith(kept[1].split(" (not re-")[0])
    assert lines.count(refresh.RECORD_TITLE) == 1 and "(--tiny)" in lines[-len(table) - 6]
    assert "| builders | `benchmarks/bench_builders.py" in "\n".join(lines)
