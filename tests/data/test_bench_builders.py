"""benchmarks/bench_builders.py (the whole-process builder comparison of docs/PERFORMANCE.md) on a
two-file corpus, one pass, `--builds` naming one local and one Beam build of ours (the others'
commands differ from them by the process or worker count alone; the local and Beam engines give
the same examples at any count: tests/data/test_pretraining_builder.py, test_beam_builder.py)
and both of ELECTRA's: the rows reach --out in the table's order, the table is printed, and our
builds hold the same number of examples. ELECTRA's builder is stood in for by a fake
checkout whose script writes one TFRecord of two records (the harness only runs and counts), without
importing TensorFlow (each import is ~5 s of the test)."""
import json
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT, shared_path

FAKE_ELECTRA = '''
import argparse, os, struct
p = argparse.ArgumentParser()
for flag in ("--corpus-dir", "--vocab-file", "--output-dir", "--max-seq-length", "--num-processes"):
    p.add_argument(flag)
args = p.parse_args()
os.makedirs(args.output_dir, exist_ok=True)
# two records in TFRecord framing (length, its CRC, data, its CRC; the count reads no CRC)
with open(os.path.join(args.output_dir, "pretrain_data.tfrecord-0-of-1"), "wb") as f:
    for record in (b"a", b"b"):
        f.write(struct.pack("<Q", len(record)) + bytes(4) + record + bytes(4))
'''


def test_every_build_runs_and_is_reported(tmp_path):
    shared_path("data", "vocab", "bert-uncased-vocab.txt")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The first sentence is here.\nAnd a second one.\n\nA new one.\n"
                                  * 20)
    (corpus / "b.txt").write_text("Another file with words.\nMore words follow here.\n" * 20)
    electra = tmp_path / "electra"
    electra.mkdir()
    (electra / "build_pretraining_dataset.py").write_text(FAKE_ELECTRA)
    out = tmp_path / "rows.jsonl"
    from benchmarks.bench_builders import commands
    every = commands(corpus, "vocab.txt", "out", electra)
    assert list(every) == [
        "local, 1 process", "local, 2 processes", "Beam DirectRunner, 1 worker",
        "Beam DirectRunner, 2 workers", "ELECTRA, 1 process", "ELECTRA, 2 processes"]
    # Beam with one worker: in the builder's process (two are two more fresh interpreters
    # importing TensorFlow and Beam; the two-worker engine: tests/data/test_beam_builder.py)
    run = ["local, 1 process", "Beam DirectRunner, 1 worker", "ELECTRA, 1 process",
           "ELECTRA, 2 processes"]
    # the builds left out: a run build's command with another process / worker count
    assert every["local, 2 processes"][0] == [
        "--num_processes=2" if a == "--num_processes=1" else a
        for a in every["local, 1 process"][0]]
    assert every["Beam DirectRunner, 1 worker"][0] == every["Beam DirectRunner, 2 workers"][0][:-2]
    proc = subprocess.run([sys.executable, "benchmarks/bench_builders.py", "--passes", "1",
                           f"--corpus_dir={corpus}", f"--electra_dir={electra}",
                           "--settle_max_s", "0", f"--out={out}", "--builds", ";".join(run)],
                          cwd=REPO_ROOT,
                          # fresh interpreters: the harness times whole processes (its
                          # RUSAGE_CHILDREN), not forks of the tests' zygote
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT),
                                   CONVBERT_TEST_ZYGOTE="0"), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["build"] for r in rows] == run
    ours = {r["examples"] for r in rows[:2]}
    assert len(ours) == 1 and ours.pop() > 0 and [r["examples"] for r in rows[2:]] == [2, 2]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in rows)
    assert "| local, 1 process |" in proc.stdout and "| ELECTRA, 2 processes |" in proc.stdout
