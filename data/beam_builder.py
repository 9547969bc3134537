"""The shard builder as an Apache Beam pipeline: the same per-file work, on any Beam runner.

    python build_pretraining_dataset.py --runner=DirectRunner --corpus_dir=... --output_dir=...
    python build_pretraining_dataset.py --runner=DataflowRunner --project=... --region=... \
        --temp_location=gs://bucket/tmp --corpus_dir=gs://... --output_dir=gs://...

The pipeline:

    units (corpus files or OpenWebText archives, listed here)
      | Reshuffle                                   spread the units over the workers
      | ParDo(PackUnitFn)                           read -> tokenize -> pack -> serialize one
      |                                             unit: pretraining_builder.pack_unit, the
      |                                             code the local processes run
      | (shard, (order key, record)) from a hash of the record bytes
      | GroupByKey (+ one empty entry per shard)    every shard exists, even an empty one
      | ParDo(WriteShardFn)                         <shard>.incomplete, records in key order
    stats per unit | CombineGlobally | write       the summary's counts

While a DirectRunner pipeline runs, the packing reports what it has read to a local file that a
thread here turns into the local builder's progress line (_ProgressFile); and, back in this
process once the pipeline has finished, the same publication as the local builder: the
`.incomplete` shards renamed to `pretrain_data.tfrecord-i-of-n`, older shards of
the directory removed, the summary JSON written last. A failed pipeline leaves nothing: its
temporary files are removed and the error is one line.

What is the same as the local builder: the multiset of serialized examples (byte-equal) and the
summary's counts, for the same corpus, vocab, seed and max_seq_length. What differs: which shard
an example lands in and its place in the shard (here: a hash of its bytes, so the shards are
byte-identical between runs, runners and worker counts). Pre-training shuffles shard files and
examples, so neither matters (docs/DATA.md).

Everything is read and written through tf.io.gfile (local paths, gs://, any filesystem
TensorFlow knows); the workers need the toolkit installed (Dataflow: --setup_file, added here
when no container or requirements are given).
"""
import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import typing

import tensorflow as tf

# Beam's import logs warnings about the optional Google Cloud clients it lacks (BigQuery, ...);
# the build needs none of them.
logging.disable(logging.WARNING)
try:
    import apache_beam as beam  # noqa: E402
    from apache_beam.options.pipeline_options import (  # noqa: E402
        GoogleCloudOptions, PipelineOptions, SetupOptions, StandardOptions)
    from apache_beam.runners.runner import PipelineRunner  # noqa: E402
finally:
    logging.disable(logging.NOTSET)

from base import fileio
from base.command import START_UP_LINES
from data import pretraining_builder as builder
from data.errors import DataError
from data.shard_writer import SHARD_PREFIX, TEMP_SUFFIX, commit_shards, remove_files, shard_path
from data.tokenization import load_tokenizer

KEYED = typing.Tuple[int, typing.Any]  # (shard index, (order key, record) or None)
STATS_FILE = builder.SUMMARY_FILE + ".stats" + TEMP_SUFFIX  # the pipeline's counts, for us
DATAFLOW = "DataflowRunner"
REPO_SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "setup.py")
# How an error raised on a worker is found in the runner's report of it (which may hold the
# worker's whole traceback): the toolkit's bad-input errors, by class name.
_WORKER_ERROR = re.compile(r"\b(?:CorpusError|VocabError|DataError): (?P<message>[^\n]+)")
_RUNNING_IN = re.compile(r"\s*\[while running '[^']*'\]")  # Beam's note of the failing step


# --- the pipeline ----------------------------------------------------------------------------
def shard_key(record, num_shards):
    """(shard index, (order key, record)): both from a hash of the record's bytes."""
    digest = hashlib.blake2b(record, digest_size=16).digest()
    return int.from_bytes(digest[:8], "big") % num_shards, (digest[8:], record)


def _stats_dict(stats):
    out = {field: getattr(stats, field) for field in builder.COUNTS}
    out["skipped_files"] = list(stats.skipped_files)
    return out


def _job_stats(stats_dict):
    return builder.JobStats(**{field: stats_dict[field] for field in builder.COUNTS},
                            skipped_files=list(stats_dict["skipped_files"]))


class PackUnitFn(beam.DoFn):
    """One unit of work (a corpus file or an archive) -> its keyed serialized examples, and its
    counts on the `stats` output. With `progress_path` (a local file: the DirectRunner's workers
    share the machine) it appends `<worker> <input bytes> <examples>` there, what this worker
    has done so far, at most every REPORT_EVERY_S seconds and after each unit (_ProgressFile)."""
    STATS = "stats"
    REPORT_EVERY_S = 1.0

    def __init__(self, config, progress_path=None):
        self._config = config
        self._progress_path = progress_path
        self._tokenizer = None

    def setup(self):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        config = self._config
        self._tokenizer = load_tokenizer(config.vocab_file, config.sp_model,
                                         config.do_lower_case, config.strip_accents)
        self._worker = f"{os.getpid()}-{id(self)}"
        self._done = (0, 0)        # input bytes and examples of the units finished here
        self._reported = 0.0

    def process(self, unit):
        stats = builder.JobStats()
        for record in builder.pack_unit(unit, self._tokenizer, self._config, stats):
            yield shard_key(record, self._config.num_shards)
            self._report(stats)
        self._done = (self._done[0] + stats.input_bytes, self._done[1] + stats.examples)
        self._report(None, force=True)
        yield beam.pvalue.TaggedOutput(self.STATS, _stats_dict(stats))

    def _report(self, stats, force=False):
        if self._progress_path is None or not (
                force or time.time() - self._reported >= self.REPORT_EVERY_S):
            return
        self._reported = time.time()
        done_bytes, examples = self._done
        if stats is not None:
            done_bytes, examples = done_bytes + stats.input_bytes, examples + stats.examples
        with open(self._progress_path, "a", encoding="ascii") as f:
            f.write(f"{self._worker} {done_bytes} {examples}\n")


class MergeStatsFn(beam.CombineFn):
    """The sum of the per-unit counts (skipped files sorted)."""

    def create_accumulator(self):
        return _stats_dict(builder.JobStats())

    def add_input(self, accumulator, stats):
        return self.merge_accumulators([accumulator, stats])

    def merge_accumulators(self, accumulators):
        return _stats_dict(builder.total_stats([_job_stats(a) for a in accumulators]))

    def extract_output(self, accumulator):
        return accumulator


class WriteShardFn(beam.DoFn):
    """(shard index, [(order key, record) or None]) -> `<shard>.incomplete`, records in key
    order; yields (index, count). Rewriting a shard (a retried bundle) writes the same bytes."""

    def __init__(self, output_dir, num_shards):
        self._output_dir = output_dir
        self._num_shards = num_shards

    def process(self, element):
        index, values = element
        records = sorted(value for value in values if value is not None)
        path = shard_path(self._output_dir, index, self._num_shards) + TEMP_SUFFIX
        with tf.io.TFRecordWriter(path) as writer:
            for _, record in records:
                writer.write(record)
        yield index, len(records)


def _write_stats(stats, path):
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(stats, f)


def add_build(pipeline, config, units, progress_path=None):
    """Adds the build of `units` to `pipeline` (nothing runs until pipeline.run()); the packing
    reports to `progress_path` (a local file, PackUnitFn) when given."""
    output_dir = str(config.output_dir)
    n = config.num_shards
    packed = (pipeline
              | "Units" >> beam.Create(units)
              | "Spread" >> beam.Reshuffle()
              | "Pack" >> beam.ParDo(PackUnitFn(config, progress_path)).with_output_types(KEYED)
              .with_outputs(PackUnitFn.STATS, main="records"))
    every_shard = (pipeline | "EveryShard" >> beam.Create([(i, None) for i in range(n)])
                   .with_output_types(KEYED))
    _ = ((packed.records, every_shard)
         | "WithEveryShard" >> beam.Flatten()
         | "ByShard" >> beam.GroupByKey()
         | "WriteShards" >> beam.ParDo(WriteShardFn(output_dir, n)))
    _ = (packed[PackUnitFn.STATS]
         | "SumStats" >> beam.CombineGlobally(MergeStatsFn())
         | "WriteStats" >> beam.Map(_write_stats, os.path.join(output_dir, STATS_FILE)))
    return pipeline


# --- options -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _beam_log_level(level):
    """Beam's loggers at `level` for a while: a failing worker's traceback (logged at ERROR by
    the runner) and Beam's "Discarding unparseable args" are reported by us, in one line."""
    logger = logging.getLogger("apache_beam")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def runner_name(runner):
    """Beam's spellings of a runner ("direct", "dataflowrunner", ...) in one form."""
    known = {"direct": "DirectRunner", "dataflow": "DataflowRunner"}
    return known.get(runner.lower().removesuffix("runner"), runner)


def pipeline_options(runner, args):
    """PipelineOptions for `runner` and the Beam flags `args`; DataError for a flag Beam does
    not know (Beam itself would only log and ignore it)."""
    runner = runner_name(runner)
    args = list(args)
    if runner == "DirectRunner" and not any(a.startswith("--default_sdk_harness_log_level")
                                            for a in args):
        # The local workers write to our stderr: a failure is reported by us, in one line
        # (on Dataflow the workers' logs go to Cloud Logging, at Beam's default level).
        args.append("--default_sdk_harness_log_level=CRITICAL")
    options = PipelineOptions([f"--runner={runner}", *args])
    parsers = []
    with _beam_log_level(logging.ERROR):
        options.get_all_options(add_extra_args_fn=parsers.append)
    _, unknown = parsers[0].parse_known_args(args)
    if unknown:
        raise DataError(f"unknown flag(s): {' '.join(unknown)} (neither the builder's nor an "
                        "Apache Beam pipeline option)")
    if runner == DATAFLOW:
        cloud = options.view_as(GoogleCloudOptions)
        missing = [flag for flag, value in (("--project", cloud.project),
                                            ("--region", cloud.region),
                                            ("--temp_location", cloud.temp_location))
                   if not value]
        if missing:
            raise DataError(f"--runner={DATAFLOW} needs {', '.join(missing)} "
                            "(e.g. --project=my-project --region=us-central1 "
                            "--temp_location=gs://my-bucket/tmp)")
        if not cloud.temp_location.startswith("gs://"):
            raise DataError(f"--temp_location {cloud.temp_location}: Dataflow needs a gs:// "
                            "path")
        setup = options.view_as(SetupOptions)
        if not (setup.setup_file or setup.requirements_file or setup.extra_packages
                or options.get_all_options().get("sdk_container_image")):
            setup.setup_file = REPO_SETUP  # the workers install the toolkit from it
    return options


def _describe(options, config, units):
    runner = options.view_as(StandardOptions).runner
    text = (f"{runner}: {len(units)} unit(s) of work ({config.corpus_format}) -> "
            f"{config.num_shards} shard(s) in {config.output_dir}")
    if runner == DATAFLOW:
        cloud = options.view_as(GoogleCloudOptions)
        machine = options.get_all_options().get("machine_type") or "Dataflow's default"
        text += (f"; project {cloud.project}, region {cloud.region}, temp location "
                 f"{cloud.temp_location}, worker machine type {machine}, workers install "
                 f"the toolkit from {options.view_as(SetupOptions).setup_file or 'their image'}")
    return text


# --- the build ---------------------------------------------------------------------------------
def check(config, runner, args, look_at_output=True):
    """Everything that can be checked before a pipeline runs: the config, the vocabulary, the
    corpus, the output path (unless not `look_at_output`) and the pipeline options. Returns
    (options, units)."""
    # In this (the launching) process the runner's INFO lines (job service, workers' state)
    # are not the build's: warnings and up. (Not at import: workers import this module too.)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    builder.check_config(config)
    load_tokenizer(config.vocab_file, config.sp_model, config.do_lower_case,
                   config.strip_accents)
    units = builder.list_units(config)
    if look_at_output:
        builder.check_output_dir(config.output_dir)
    return pipeline_options(runner, args), units


class _GraphOnly(PipelineRunner):
    """A runner that runs nothing: `--dry_run` builds the graph with it, since a pipeline made
    for Dataflow validates its temp and staging buckets when it is made (and may look them up
    or create a default one on Google Cloud Storage)."""

    def run_pipeline(self, pipeline, options):
        raise DataError("--dry_run: nothing is run")


def dry_run(config, runner, args):
    """Checks the inputs and options and builds the pipeline graph (serialized as the runner
    would receive it), without running or submitting anything and without touching the temp
    or staging locations, or an output on a bucket (a local output path that is a file is an
    error). The corpus and vocabulary are read as in a real run. Returns one line."""
    runner = runner_name(runner)
    options, units = check(config, runner, args,
                           look_at_output=not fileio.is_url(str(config.output_dir)))
    pipeline = add_build(beam.Pipeline(runner=_GraphOnly(), options=options), config, units)
    proto = pipeline.to_runner_api()
    return (f"dry run: {_describe(options, config, units)}; a pipeline of "
            f"{len(proto.components.transforms)} transforms built, nothing submitted")


# What local Beam workers print that is not the build's: Python logging lines (Beam's worker
# harness), TensorFlow's C++ start-up lines.
_WORKER_NOISE = re.compile(r"^(DEBUG|INFO|WARNING):[\w.]+:")


@contextlib.contextmanager
def _local_worker_output(enabled):
    """For the DirectRunner: our stderr (file descriptor 2, which its worker processes and
    threads inherit) captured while the pipeline runs, and then written back without the
    workers' noise; after a failure only our own `warning: ` lines are written back (a worker
    prints the failing DoFn's traceback itself; the failure is our one line). Yields the
    console's stderr meanwhile (for the progress lines)."""
    if not enabled:
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    failed = True
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        console = open(saved, "w", encoding="utf-8", closefd=False)
        try:
            yield console
            failed = False
        finally:
            console.close()
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if line.startswith("warning: ") or not failed and not (
                START_UP_LINES.match(line) or _WORKER_NOISE.match(line))]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def _print_job(result, options):
    """Where to watch a job the runner runs elsewhere (Dataflow's console)."""
    job_id = getattr(result, "job_id", None)
    if not callable(job_id) or options.view_as(StandardOptions).runner != DATAFLOW:
        return
    cloud = options.view_as(GoogleCloudOptions)
    print(f"[build_pretraining_dataset] Dataflow job {job_id()}: https://console.cloud.google"
          f".com/dataflow/jobs/{cloud.region}/{job_id()}?project={cloud.project}",
          file=sys.stderr, flush=True)


def _worker_error(error):
    """A pipeline failure as a DataError with one line: a toolkit error raised on a worker
    (as the runner reports it), else the failure's first line."""
    text = str(error)
    if isinstance(error, DataError):  # raised here, or re-raised by an in-process runner
        return DataError(_RUNNING_IN.sub("", text).strip())
    found = _WORKER_ERROR.search(text)
    if found:
        return DataError(_RUNNING_IN.sub("", found.group("message")).strip())
    first = next((line.strip() for line in text.splitlines() if line.strip()),
                 type(error).__name__)
    return DataError(f"Beam pipeline failed: {first}")


def _new_pipeline(options):
    """beam.Pipeline(options), its option errors (Beam validates them here) as one line."""
    try:
        return beam.Pipeline(options=options)
    except ValueError as e:
        lines = [line.strip() for line in str(e).splitlines()[1:] if line.strip()]
        if not lines:
            raise DataError(f"Beam pipeline options: {e}") from None
        raise DataError(f"Beam pipeline options: {'; '.join(lines)}") from None


def _has_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


class _ProgressFile:
    """The DirectRunner build's progress line, as the local builder prints it: PackUnitFn
    appends what each worker has done to a local file, and a thread here sums the newest line
    of every worker each second (the line itself at most every 5 s: builder._Progress).
    Runners elsewhere (Dataflow) show their progress in their own console."""

    def __init__(self, total_bytes, enabled):
        self.enabled = enabled
        self.path = None
        if enabled:
            handle, self.path = tempfile.mkstemp(prefix="convbert-beam-progress-")
            os.close(handle)
        self.progress = builder._Progress(total_bytes, enabled)
        self._stop = threading.Event()
        self._thread = None

    def totals(self):
        newest = {}
        try:
            with open(self.path, encoding="ascii") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:       # a line being written is not yet whole
                        newest[parts[0]] = (int(parts[1]), int(parts[2]))
        except (OSError, ValueError):
            pass
        return (sum(b for b, _ in newest.values()), sum(e for _, e in newest.values()))

    @contextlib.contextmanager
    def watching(self, stream):
        """Progress lines on `stream` while the pipeline runs."""
        if not self.enabled:
            yield
            return
        self.progress.stream = stream

        def poll():
            while not self._stop.wait(1.0):
                self.progress.update(*self.totals())

        self._thread = threading.Thread(target=poll, name="beam-progress", daemon=True)
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join()
            self.progress.stream = None

    def finish(self, examples):
        """The last line, 100% (as the local builder's)."""
        self.progress.update(self.progress.total_bytes, examples, force=True)

    def remove(self):
        if self.path:
            with contextlib.suppress(OSError):
                os.remove(self.path)


def build_with_beam(config, runner, args):
    """Builds the shards with Beam's `runner`; returns the summary dict (also written as JSON)."""
    runner = runner_name(runner)
    options, units = check(config, runner, args)
    if runner == DATAFLOW and not _has_module("apitools"):
        raise DataError(f"--runner={DATAFLOW} needs Apache Beam's Google Cloud client "
                        "libraries: pip install -e '.[dataflow]' (--dry_run does not)")
    total_bytes = sum(tf.io.gfile.stat(unit).length for unit in units)
    progress = _ProgressFile(total_bytes, config.progress and runner == "DirectRunner")
    pipeline = add_build(_new_pipeline(options), config, units, progress.path)
    output_dir = str(config.output_dir)
    tf.io.gfile.makedirs(output_dir)
    stats_path = os.path.join(output_dir, STATS_FILE)
    old = tf.io.gfile.glob(os.path.join(output_dir, SHARD_PREFIX + "-*"))
    remove_files([p for p in old if p.endswith(TEMP_SUFFIX)]  # what a killed run left
                 + tf.io.gfile.glob(os.path.join(output_dir, builder.SUMMARY_FILE + "*"
                                                 + TEMP_SUFFIX)))
    temps = [shard_path(output_dir, i, config.num_shards) + TEMP_SUFFIX
             for i in range(config.num_shards)]
    print(f"[build_pretraining_dataset] {_describe(options, config, units)}", file=sys.stderr,
          flush=True)
    start = time.time()
    try:
        with _beam_log_level(logging.CRITICAL), \
                _local_worker_output(runner == "DirectRunner") as console, \
                progress.watching(console):
            result = pipeline.run()
            _print_job(result, options)
            state = result.wait_until_finish()
        if state not in (None, "DONE"):
            raise DataError(f"Beam pipeline ended in state {state}")
        with tf.io.gfile.GFile(stats_path) as f:
            stats = _job_stats(json.load(f))
        missing = [p for p in temps if not tf.io.gfile.exists(p)]
        if missing:
            raise DataError(f"{missing[0]}: not written by the pipeline "
                            f"({len(missing)} shard(s) missing)")
    except Exception as e:  # noqa: BLE001 -- every failure is one line and leaves nothing
        remove_files(temps + [stats_path])
        raise _worker_error(e) from None
    except BaseException:
        remove_files(temps + [stats_path])
        raise
    finally:
        progress.remove()
    seconds = time.time() - start
    progress.finish(stats.examples)

    # As the local builder: replace the shards of an earlier build, then the summary, last.
    remove_files([p for p in old if not p.endswith(TEMP_SUFFIX)
                  and p + TEMP_SUFFIX not in set(temps)])
    shard_paths = commit_shards(temps)
    summary = builder.make_summary([stats], config, seconds, len(units))
    summary["engine"] = f"beam, {runner}"
    summary["config"] = {k: v for k, v in dataclasses.asdict(config).items()
                         if k not in ("progress", "num_processes")}
    summary["shards"] = [os.path.basename(p) for p in shard_paths]
    builder.write_summary(output_dir, summary)
    remove_files([stats_path])
    summary["shard_paths"] = shard_paths
    return summary
