"""Re-measures every CPU row of docs/PERFORMANCE.md's headline table and rewrites it in place.

    python benchmarks/refresh.py [--electra_dir DIR] [--rows builders,p2,...] [--doc FILE]
    python benchmarks/refresh.py --tiny --doc /tmp/copy.md     # CI: every benchmark, tiny sizes

Each row's benchmark runs as a child process (`sys.executable`, the repository on PYTHONPATH) with
the settings of `ROWS` below, chosen so that the whole refresh fits in about 10 minutes on the
2-core VM (fewer rounds and passes than the record's runs: each row's command in the table says
which); its `--json_out` file is parsed and the row's figure, target status, machine, date (UTC)
and 1-minute load (before → after) are rewritten. The 1-minute load counts the refresh's own
children (a 2-thread benchmark holds it near 2 on the 2-core VM, and it decays over a minute into
the next row), so what decides whether a row counts is the CPU *other* processes used while it
ran: /proc/stat's busy time less the children's own CPU time, as benchmarks/encoder_vs_hf.py
checks its rows. A row during which others used more than 0.25 cores, or any row of a run that
started at a load above 1.0, is marked "(load x.x: not quiet)" rather than silently recorded. A row that cannot be measured
here (GPU rows, the before/after of one change, the test suite's 14 minutes, a benchmark that
failed or lacks `--json_out`) keeps its text and date and says "(not re-measured by refresh:
why)". Each run also appends a dated record (command, per-row wall and load) to the section
"Headline refreshes" at the end of the document.

`--tiny` runs every benchmark at a tiny size against a tiny corpus and requires `--doc` to name
a copy (it never writes the real document): a test that the command does not rot, not a
measurement. ELECTRA's builder is not part of the repository: `--electra_dir` (or
CONVBERT_ELECTRA_DIR) points at a checkout of google-research/electra; without one the builder
row says that ELECTRA's figure was not re-measured.
"""
import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("CONVBERT_SHARED_DIR", REPO.parent / "shared"))
GUTENBERG = SHARED / "data" / "corpus" / "gutenberg-en"
VOCAB = SHARED / "data" / "vocab" / "bert-uncased-vocab.txt"
DOC = REPO / "docs" / "PERFORMANCE.md"
RECORD_TITLE = "## Headline refreshes (`benchmarks/refresh.py`)"
NOT_QUIET = 1.0            # a 1-minute load above this at the run's start: no row counts
OTHERS_QUIET = 0.25        # cores other processes may use during a row that counts
MARK = re.compile(r"\s*\((?:not re-measured by refresh|load \d+\.\d: not quiet)[^)]*\)")
ELECTRA_QUOTED = 0.14      # M tokens/s per core quoted for ELECTRA's builder (not measured)


@dataclasses.dataclass
class Context:
    tiny: bool
    scratch: pathlib.Path
    corpus: pathlib.Path
    electra_dir: str


@dataclasses.dataclass
class Row:
    key: str
    prefix: str                    # the measure cell starts with this (how the row is found)
    label: str = ""                # the measure cell, before the command
    runs: object = None            # ctx -> [argv] of the child benchmarks (--json_out added)
    figure: object = None          # (payloads, cells, ctx) -> (figure, target or None)
    machine: str = ""              # the machine cell after "<n>-core <cpu> VM"
    skip: object = None            # ctx -> reason it cannot be measured here (or None)
    display: object = None         # ctx -> the command as the measure cell shows it


def py(script, *args):
    return [sys.executable, str(REPO / script), *args]


def shape_label(shape):
    b, s = str(shape).lower().split("x")
    return f"b{b}·s{s}"


def e_notation(x):
    return f"{x:.2e}".replace("e+", "e")


def met(ok):
    return "met" if ok else "missed"


# --- the rows --------------------------------------------------------------------------------
def builders_runs(ctx):
    builds = ["local, 1 process"] if ctx.tiny else [
        "local, 1 process", "local, 2 processes", "Beam DirectRunner, 1 worker"]
    if ctx.electra_dir:
        builds += ["ELECTRA, 1 process"] + ([] if ctx.tiny else ["ELECTRA, 2 processes"])
    argv = py("benchmarks/bench_builders.py", "--passes", "1", f"--corpus_dir={ctx.corpus}",
              "--settle_load", "0.8", "--settle_max_s", "0" if ctx.tiny else "8",
              "--builds", ";".join(builds))
    if ctx.electra_dir:
        argv.append(f"--electra_dir={ctx.electra_dir}")
    return [argv]


def builders_figure(payloads, cells, ctx):
    walls = {}
    for row in payloads[0]["rows"]:
        walls.setdefault(row["build"], []).append(row["wall_s"])
    wall = {name: statistics.median(w) for name, w in walls.items()}
    l1, l2 = wall.get("local, 1 process"), wall.get("local, 2 processes")
    e1, e2 = wall.get("ELECTRA, 1 process"), wall.get("ELECTRA, 2 processes")
    beam = wall.get("Beam DirectRunner, 1 worker")
    parts = []
    if e1:
        parts.append(f"local builder {l1:.1f} s, ELECTRA's builder {e1:.1f} s: {e1 / l1:.1f}× "
                     "(1 process)")
    else:
        old = re.search(r"ELECTRA's builder ([\d.]+) s", cells[1])
        parts.append(f"local builder {l1:.1f} s (1 process); ELECTRA's builder not re-measured "
                     "(no --electra_dir" + (f"; {old.group(1)} s before" if old else "") + ")")
    if l2 and e2:
        parts.append(f"{l2:.1f} s vs {e2:.1f} s: {e2 / l2:.1f}× (2 processes)")
    elif l2:
        parts.append(f"local builder {l2:.1f} s (2 processes)")
    if beam:
        parts.append(f"Beam DirectRunner {beam:.1f} s (1 worker)")
    target = f"≥ 10× (1 process): {met(e1 / l1 >= 10)}" if e1 else None
    return "; ".join(parts), target


def data_builder_figure(payloads, cells, ctx):
    row = payloads[0]["rows"][0]
    rate = row["corpus_tokens_per_s_per_core"] / 1e6
    times = rate / ELECTRA_QUOTED
    return (f"{rate:.2f}M corpus tokens/s per core (CPU time), start-up excluded; ≈{times:.0f}× "
            "the ~140k tokens/s quoted for ELECTRA's builder, not measured beside it (the row "
            f"above is)", f"≥ 10×: {met(times >= 10)} for the build phase")


def p1_skip(ctx):
    source = (REPO / "benchmarks" / "encoder_vs_hf.py").read_text(encoding="utf-8")
    if "--json_out" not in source:
        return "benchmarks/encoder_vs_hf.py has no --json_out yet"
    return None


def p1_figure(payloads, cells, ctx):
    """Per shape: the interleaved ratio (the figure to quote), then the separate processes'."""
    rows = [r for r in payloads[0]["rows"] if r.get("call", "tf_function") == "tf_function"
            and r.get("precision", "fp32") == "fp32"]
    parts, shapes = [], list(dict.fromkeys(str(r["shape"]) for r in rows))
    for shape in shapes:
        by_way = {r.get("way"): r for r in rows if str(r["shape"]) == shape}
        main = by_way.get("interleaved") or next(iter(by_way.values()))
        text = (f"{main['ratio']:.3f} ({shape_label(shape)}: {main['ours_ms']:,.0f} vs "
                f"{main['hf_ms']:,.0f} ms")
        if "interleaved" in by_way and "processes" in by_way:
            text += f"; {by_way['processes']['ratio']:.3f} in separate processes"
        parts.append(text + ")")
    # the target holds both ways (issue #51): every row, interleaved and separate processes
    return ("; ".join(parts) + ", `tf.function`, interleaved (the other calls, Keras-on-JAX and "
            "bf16: the P1 section)", f"≤ 0.5 both ways: {met(all(r['ratio'] <= 0.5 for r in rows))}")


def p2_figure(payloads, cells, ctx):
    rows = [r for r in payloads[0]["rows"] if r["impl"] == "mixed[auto]"]
    shapes = ", ".join(shape_label(f"{r['batch']}x{r['seq_len']}") for r in rows)
    ratios = ", ".join(f"{r['ratio']:.3f}" for r in rows)
    floors = ", ".join(f"{r['flops_ratio']:.3f}" for r in rows)
    ok = sum(r["ratio"] <= r["flops_ratio"] for r in rows)
    status = met(ok == len(rows)) + ("" if ok in (0, len(rows)) else f" ({ok} of {len(rows)} met)")
    return f"{ratios} ({shapes})", f"≤ FLOPs ratio {floors}: {status}"


def mlm_figure(payloads, cells, ctx):
    sp = {r["variant"]: r["speedup_vs_hf"] for r in payloads[0]["rows"] if r["step"] == "MLM"}
    full, gathered = sp["ours full"], sp["ours gathered"]
    return (f"{full:.2f}× (logits at all positions), {gathered:.2f}× (at the masked positions)",
            f"≥ 2×: {met(min(full, gathered) >= 2)}")


def rtd_figure(payloads, cells, ctx):
    rows = [r for r in payloads[0]["rows"] if r["step"] == "RTD" and "ratio_vs_electra" in r]
    r = rows[0]
    return (f"{r['ratio_vs_electra']:.3f} ({r['mode']}: {1e3 * r['median_s']:,.0f} ms vs "
            f"{1e3 * r['electra_median_s']:,.0f} ms)", f"≤ 1: {met(r['ratio_vs_electra'] <= 1)}")


def p5_figure(payloads, cells, ctx):
    r = [r for r in payloads[0]["rows"] if r["kind"] == "mixed" and r["impl"] == "auto"][0]
    return f"{r['ratio']:.2f} (the default `auto`)", f"≤ 1: {met(r['ratio'] <= 1)}"


def jax_runs(ctx):
    shards = ctx.scratch / "jax_input_shards"
    build = py("build_pretraining_dataset.py", f"--corpus_dir={ctx.corpus}",
               f"--vocab_file={VOCAB}", f"--output_dir={shards}", "--max_seq_length=128",
               f"--num_shards={2 if ctx.tiny else 16}", "--num_processes=1", "--noprogress")
    sizes = (["--batch", "8", "--batches", "5", "--skip", "5", "--shuffle_buffer", "20",
              "--rounds", "1"] if ctx.tiny else ["--rounds", "3"])
    return [build, py("benchmarks/jax_input.py", "--shards", f"{shards}/*tfrecord*",
                      "--workers", "1", *sizes)]


def jax_figure(payloads, cells, ctx):
    r = payloads[-1]["rows"][0]
    return (f"{r['steady_per_s']:,.0f} examples/s delivered on one core (after the first batch; "
            f"{r['delivered_per_s']:,.0f} from the stream's creation), "
            f"{r['skipped_per_s']:,.0f}/s skipped on resume", None)


def causal_figure(payloads, cells, ctx):
    ratio = {r["pass"]: r["ratio"] for r in payloads[0]["rows"]}
    return (f"{ratio['forward']:.1f}× (forward), {ratio['fwd+bwd']:.1f}× (forward + backward): "
            "the select is the one in use", None)


def flops_figure(payloads, cells, ctx):
    total = {r["recipe"]: r for r in payloads[0]["rows"]}
    small, base = total["convbert-small"], total["convbert-base"]
    return (f"{e_notation(small['pretrain_flops'])} (paper {small['paper']:.1e}); "
            f"ConvBERT-base {e_notation(base['pretrain_flops'])} (paper "
            f"{base['paper']:.1e})".replace("e+", "e"), None)


def tiny_or(ctx, tiny, full):
    return list(tiny if ctx.tiny else full)


ROWS = [
    Row("builders", "shard builders, whole process",
        "shard builders, whole process, all Gutenberg", builders_runs, builders_figure,
        "1 and 2 processes"),
    Row("data_builder", "data builder, build phase", "data builder, build phase only",
        lambda ctx: [py("benchmarks/bench_data_builder.py", "--repeats",
                        "1" if ctx.tiny else "3")], data_builder_figure, "1 process"),
    Row("p1", "P1:", "P1: ConvBERT-base forward, toolkit / transformers",
        lambda ctx: [py("benchmarks/encoder_vs_hf.py", "--calls", "tf_function", *tiny_or(
            ctx, ["--way", "interleaved", "--size", "tiny", "--shapes", "1x16", "--rounds", "1"],
            ["--way", "both", "--shapes", "8x128,1x512", "--rounds", "5"]))],
        p1_figure, "TF graph, fp32", skip=p1_skip),
    Row("p2", "P2:", "P2: mixed / self-attention block, base, forward",
        lambda ctx: [py("benchmarks/attention_block.py", "--modes", "tf-graph", "--impls",
                        "auto", *tiny_or(ctx, ["--shapes", "1x16", "--rounds", "1"],
                                         ["--rounds", "7"]))],
        p2_figure, "TF graph, fp32"),
    Row("p3_mlm", "P3: MLM step", "P3: MLM step, small, b16·s128, speed-up over transformers",
        lambda ctx: [py("benchmarks/train_step.py", *tiny_or(
            ctx, ["--tiny", "--rounds", "1", "--batch", "2", "--seq", "32", "--rtd_batch", "2"],
            ["--rounds", "3"]))], mlm_figure, "TF graph, fp32"),
    Row("p3_rtd_small", "P3: RTD step, small", "P3: RTD step, small, b16·s128, ConvBERT / ELECTRA",
        lambda ctx: [py("benchmarks/train_step.py", *tiny_or(
            ctx, ["--tiny", "--rounds", "1", "--batch", "2", "--seq", "32", "--rtd_batch", "2"],
            ["--rounds", "3"]))], rtd_figure, "TF graph, fp32"),
    Row("p3_rtd_base", "P3: RTD step, base", "P3: RTD step, base, b16·s128, ConvBERT / ELECTRA",
        lambda ctx: [py("benchmarks/train_step.py", "--size", "base", "--skip_mlm", *tiny_or(
            ctx, ["--tiny", "--rounds", "1", "--seq", "32", "--rtd_batch", "2"],
            ["--rounds", "3"]))], rtd_figure, "TF graph, fp32"),
    Row("p4_rtd", "P4: RTD step", skip=lambda ctx: "a GPU row; this machine has none"),
    Row("p4_finetune", "P4: fine-tuning step",
        skip=lambda ctx: "a GPU row; this machine has none"),
    Row("p5", "P5:", "P5: peak memory, fwd + bwd, b8·s512, mixed / self block",
        lambda ctx: [py("benchmarks/memory.py", "--impls", "auto", *tiny_or(
            ctx, ["--batch", "1", "--seq", "16", "--repeats", "1"], ["--repeats", "2"]))],
        p5_figure, "TF, fp32"),
    Row("training_core", "training core",
        skip=lambda ctx: "the before/after of one change; benchmarks/training_core.py needs "
                         "the before checkout"),
    Row("jax_input", "JAX input reader",
        "JAX input reader, data/tfrecord_io.py, 16 Gutenberg shards, batch 128", jax_runs,
        jax_figure, "1 process"),
    Row("causal_mask", "causal mask",
        "causal mask, additive bias / select (LM, 4 layers, b16·s128)",
        lambda ctx: [py("benchmarks/causal_mask.py", *tiny_or(
            ctx, ["--layers", "1", "--batch", "2", "--seq_len", "16", "--rounds", "1"],
            ["--layers", "4", "--rounds", "5"]))], causal_figure, "TF graph, fp32"),
    Row("test_suite", "the test suite",
        skip=lambda ctx: "about 14 minutes on its own; `CI=true bash .ci/run` from a clean clone"),
    Row("flops", "pre-training FLOPs", "pre-training FLOPs, ConvBERT-small",
        lambda ctx: [py("scripts/flops.py")], flops_figure),
]
ROW_KEYS = [row.key for row in ROWS]


# --- running ---------------------------------------------------------------------------------
def load():
    return os.getloadavg()[0]


def busy_seconds():
    """CPU seconds every process of the machine has run since boot (/proc/stat's first line:
    all but idle and iowait); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    """CPU seconds of this process and of its finished (waited-for) children."""
    import resource
    return sum(getattr(resource.getrusage(who), field)
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    words = line.split(":", 1)[1].split()
                    return " ".join(words[:2])   # "AMD EPYC", "Intel(R) Xeon(R)"
    except OSError:
        pass
    return platform.machine()


def shown(argv, scratch=None):
    """A child's command line as the table shows it (repository-relative, no interpreter, the
    refresh's temporary directory as <tmp>)."""
    parts = []
    for previous, arg in zip(argv, argv[1:]):
        text = str(arg).replace(str(REPO) + os.sep, "").replace(str(SHARED), "../shared")
        if previous == "--electra_dir":
            text = "<electra checkout>"
        if scratch is not None:
            text = text.replace(str(scratch), "<tmp>")
        if text.startswith("--electra_dir="):   # a checkout somewhere on this machine
            text = "--electra_dir=<electra checkout>"
        parts.append(shlex.quote(text))
    return " ".join(parts)


class Runner:
    """Runs the children, each command line once (rows that share one share its result)."""

    def __init__(self, ctx, timeout):
        self.ctx, self.timeout, self.done, self.count = ctx, timeout, {}, 0
        self.start_load = load()

    def run(self, argv, wants_json):
        key = tuple(argv)
        if key in self.done:
            return self.done[key]
        self.count += 1
        out = self.ctx.scratch / f"result-{self.count}.json"
        full = list(argv)
        if wants_json:
            full += ([f"--out={out}"] if argv[1].endswith("bench_builders.py")
                     else ["--json_out", str(out)])
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
        before, start = load(), time.time()
        busy, own = busy_seconds(), own_cpu_seconds()
        print(f"[refresh] {shown(argv)}  (load before {before:.2f})", flush=True)
        try:
            proc = subprocess.run(full, cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=self.timeout)
            error = None
            if proc.returncode:
                lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
                error = f"exit {proc.returncode}: {lines[-1][:160] if lines else 'no message'}"
        except subprocess.TimeoutExpired:
            error = f"timed out after {self.timeout:.0f} s"
        end, after = time.time(), load()
        # cores other processes kept busy meanwhile (the children's own threads excluded)
        others = (None if busy is None else max(0.0, (busy_seconds() - busy)
                                                 - (own_cpu_seconds() - own)) / (end - start))
        payload = None
        if error is None and wants_json:
            text = out.read_text() if out.exists() else ""
            if argv[1].endswith("bench_builders.py"):   # JSON lines, one per build
                payload = {"rows": [json.loads(l) for l in text.splitlines() if l.strip()]}
            else:
                payload = json.loads(text) if text else None
            if payload is None:
                error = "it wrote no results"
        print(f"[refresh]   {end - start:.1f} s, load {before:.2f} → {after:.2f}, others "
              + ("?" if others is None else f"{others:.2f} cores")
              + (f"; FAILED: {error}" if error else ""), flush=True)
        self.done[key] = result = dict(payload=payload, error=error, start=start, end=end,
                                       before=before, after=after, others=others)
        return result


# --- the document ----------------------------------------------------------------------------
def table_lines(lines):
    """Indices of the headline table's body rows (the first table of the document)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("| measure |"))
    body = []
    for i in range(start + 2, len(lines)):
        if not lines[i].startswith("|"):
            break
        body.append(i)
    return body


def split_cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def join_cells(cells):
    return "| " + " | ".join(cells) + " |"


def utc(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc)


def when(start, end):
    a, b = utc(start), utc(end)
    text = f"{a:%Y-%m-%d %H:%M}"
    return text if f"{a:%H:%M}" == f"{b:%H:%M}" else f"{text}–{b:%H:%M}"


def mark(figure, reason):
    return MARK.sub("", figure).rstrip() + f" (not re-measured by refresh: {reason})"


def quiet(entry, runner):
    """Whether a row counts: the run started at a load ≤ 1.0 and other processes used ≤ 0.25
    cores while the row ran (its own load before is mostly the previous row's children); where
    others' CPU cannot be read, its load before must be ≤ 1.0."""
    if runner.start_load > NOT_QUIET:
        return False
    if entry.get("others") is None:
        return entry["before"] <= NOT_QUIET
    return entry["others"] <= OTHERS_QUIET


def refresh_row(row, cells, runner, ctx, machine):
    """The row's new cells and its record entry."""
    reason = row.skip(ctx) if row.skip else None
    if reason is None and (not VOCAB.exists() or not ctx.corpus.exists()):
        reason = f"needs {VOCAB.parent.parent} (../shared)"
    if reason is not None:
        cells[1] = mark(cells[1], reason)
        return cells, dict(row=row.key, status=f"kept: {reason}")
    argvs = row.runs(ctx)
    # a build that only prepares the benchmark's input (the JAX reader's shards) has no results
    results = [runner.run(argv, wants_json=not argv[1].endswith("build_pretraining_dataset.py"))
               for argv in argvs]
    commands = "; ".join(shown(a, ctx.scratch) for a in argvs)
    entry = dict(row=row.key, command=commands, wall=sum(r["end"] - r["start"] for r in results),
                 before=max(r["before"] for r in results), after=results[-1]["after"],
                 others=max((r["others"] for r in results if r["others"] is not None),
                            default=None))
    failed = [(shown(a).split()[0], r["error"]) for a, r in zip(argvs, results) if r["error"]]
    if failed:
        reason = f"{failed[0][0]} failed, {failed[0][1]}".replace(")", "]")
        reason = reason.replace("(", "[").replace("|", "/")
        cells[1] = mark(cells[1], reason)
        entry["status"] = f"kept: {reason}"
        return cells, entry
    try:
        figure, target = row.figure([r["payload"] for r in results if r["payload"]], cells,
                                    ctx)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
        reason = f"its results lack {type(e).__name__} {e}".replace("(", "[").replace(")", "]")
        cells[1] = mark(cells[1], reason)
        entry["status"] = f"kept: {reason}"
        return cells, entry
    cells[0] = f"{row.label} (`{shown(argvs[-1], ctx.scratch)}`)"   # the record has them all
    cells[1] = figure.replace("|", "/")
    if target is not None:
        cells[2] = target
    cells[3] = machine + (f", {row.machine}" if row.machine else "")
    if row.key == "flops":
        cells[3], cells[5] = "counted, not timed", "–"
    else:
        cells[5] = f"{entry['before']:.2f} → {entry['after']:.2f}"
        if entry["others"] is not None:
            cells[5] += f", others {entry['others']:.2f} cores"
        if not quiet(entry, runner):
            cells[5] += f" (load {entry['before']:.1f}: not quiet)"
    cells[4] = when(min(r["start"] for r in results), max(r["end"] for r in results))
    if ctx.tiny:
        cells[5] += " (--tiny: not a measurement)"
    entry["status"] = "rewritten" + ("" if quiet(entry, runner) else " (not quiet)")
    return cells, entry


def record(lines, entries, argv, start, end, ctx):
    """Appends the run's record under RECORD_TITLE (made at the end of the document if absent)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    if RECORD_TITLE not in lines:
        lines += ["", RECORD_TITLE, "",
                  "Each run of `benchmarks/refresh.py` (the headline table's figures come from "
                  "the newest), newest last: the rows it ran, each row's wall time and 1-minute "
                  "load and the cores other processes used meanwhile; a row that does not count (others "
                  "above 0.25 cores, or a run started above load 1.0) is marked in the table."]
    lines += ["", f"### {when(start, end)} UTC" + (f", {head}" if head else "")
              + (" (--tiny)" if ctx.tiny else ""), "",
              f"Command: `python {shown(['python', 'benchmarks/refresh.py', *argv])}`; "
              f"{os.cpu_count()} cores; total {end - start:.0f} s.", "",
              "| row | command | wall | load before → after, others' cores | result |", "|---|---|---|---|---|"]
    for e in entries:
        if "command" in e:
            lines.append(f"| {e['row']} | `{e['command']}` | {e['wall']:.0f} s | "
                         f"{e['before']:.2f} → {e['after']:.2f}"
                         + ("" if e.get("others") is None else f", others {e['others']:.2f}")
                         + f" | {e['status']} |")
        else:
            lines.append(f"| {e['row']} | – | – | – | {e['status']} |")
    return lines


def tiny_corpus(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.txt").write_text("The first sentence is here.\nAnd a second one follows.\n\n"
                                     "A new document starts.\n" * 30)
    (directory / "b.txt").write_text("Another file with more words.\nThe words go on here.\n" * 30)
    return directory


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", default=str(DOC), help="the document to rewrite")
    parser.add_argument("--rows", default=None,
                        help=f"comma-separated rows to refresh (default all): {','.join(ROW_KEYS)}")
    parser.add_argument("--electra_dir", default=os.environ.get("CONVBERT_ELECTRA_DIR"),
                        help="a checkout of google-research/electra (its builder's row)")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny sizes, a tiny corpus; needs --doc naming a copy")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per child (default 600, 300 with --tiny)")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    doc = pathlib.Path(args.doc)
    if args.tiny and doc.resolve() == DOC.resolve():
        parser.error("--tiny writes only a copy: pass --doc naming another file")
    keys = args.rows.split(",") if args.rows else ROW_KEYS
    unknown = sorted(set(keys) - set(ROW_KEYS))
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; known: {', '.join(ROW_KEYS)}")
    lines = doc.read_text(encoding="utf-8").splitlines()
    body = table_lines(lines)
    with tempfile.TemporaryDirectory(prefix="refresh_") as scratch:
        scratch = pathlib.Path(scratch)
        corpus = tiny_corpus(scratch / "corpus") if args.tiny else GUTENBERG
        ctx = Context(args.tiny, scratch, corpus, args.electra_dir)
        runner = Runner(ctx, args.timeout or (300 if args.tiny else 600))
        machine = f"{os.cpu_count()}-core {cpu_name()} VM"
        entries, start = [], time.time()
        print(f"[refresh] {len(keys)} rows, load {load():.2f}", flush=True)
        for row in ROWS:
            if row.key not in keys:
                continue
            index = next((i for i in body if split_cells(lines[i])[0].startswith(row.prefix)),
                         None)
            if index is None:
                print(f"[refresh] {row.key}: no row starting {row.prefix!r}", flush=True)
                entries.append(dict(row=row.key, status="no such row in the table"))
                continue
            cells, entry = refresh_row(row, split_cells(lines[index]), runner, ctx, machine)
            lines[index] = join_cells(cells)
            entries.append(entry)
            print(f"[refresh] {row.key}: {entry['status']}", flush=True)
            doc.write_text("\n".join(lines) + "\n", encoding="utf-8")   # a partial run keeps rows
        end = time.time()
    lines = record(lines, entries, argv, start, end, ctx)
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"[refresh] done in {end - start:.0f} s; load {load():.2f}; wrote {doc}", flush=True)


if __name__ == "__main__":
    main()
