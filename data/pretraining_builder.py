"""Corpus directory -> packed pre-training examples in TFRecord shards (ELECTRA layout, fixed).

Units of work: a corpus file (corpus_format "text"), or an OpenWebText archive of many
documents (corpus_format "openwebtext", data/openwebtext.py), read as a stream. Each *file*
(a corpus file, an archive member) is packed by its own packer with its own random stream,
seeded from (seed, file name), and no packing state crosses files: the set of examples does not
depend on how the units are split between workers. `read_units` -> `pack_documents` ->
`shard_writer.serialize_packed` is that per-file work, shared by both engines: the local
processes here, and the Apache Beam pipeline of data/beam_builder.py (--runner).

Local work split (as ELECTRA): sorted units go to job `i % num_processes`; job j writes the
shards `i % num_processes == j`, round-robin. For a fixed seed, num_processes and num_shards the
shards are byte-identical between runs.

Speed comes from tokenizing many lines per tensorflow-text call (C++), and packing with a
few integer operations per line plus numpy slices - no Python work per token.
"""
import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time

import numpy as np
import tensorflow as tf

from base import fileio
from data import corpus_reader, openwebtext
from data.errors import CorpusError, DataError
from data.example_packer import ExamplePacker
from data.shard_writer import (SHARD_PREFIX, TEMP_SUFFIX, ShardWriter, commit_shards,
                               remove_files, serialize_packed, shard_path)
from data.tokenization import load_tokenizer
from training.progress import format_duration

SUMMARY_FILE = "pretrain_data.summary.json"
MIN_SEQ_LENGTH = 8
BLANK_LINE = -1   # row-length codes fed to the packer: a blank line ...
END_OF_FILE = -2  # ... and the end of a file (which always closes the pending example)
CORPUS_FORMATS = ("text", "openwebtext")


@dataclasses.dataclass
class BuildConfig:
    corpus_dir: str
    output_dir: str
    vocab_file: str = None
    sp_model: str = None
    max_seq_length: int = 128
    num_processes: int = 1
    blanks_separate_docs: bool = True
    do_lower_case: bool = True
    strip_accents: bool = None  # None: same as do_lower_case (BERT uncased strips accents)
    num_shards: int = 1000
    seed: int = 12345
    skip_bad_files: bool = False
    lines_per_batch: int = 20000  # lines per tokenizer call: big batches amortize op overhead
    progress: bool = True
    corpus_format: str = "text"  # "text": files of lines; "openwebtext": *.xz archives


@dataclasses.dataclass
class JobStats:
    files: int = 0           # files read (corpus files, archive members)
    seen_files: int = 0      # files read or skipped (a skipped archive counts once)
    input_bytes: int = 0     # bytes of the units read (archives compressed): progress
    bytes: int = 0           # bytes of text read
    lines: int = 0
    documents: int = 0
    corpus_tokens: int = 0   # WordPiece tokens produced by the tokenizer
    examples: int = 0
    tokens: int = 0          # real tokens in the examples (input_mask ones)
    two_segment_examples: int = 0
    skipped_files: list = dataclasses.field(default_factory=list)
    temp_paths: list = dataclasses.field(default_factory=list)


def openwebtext_config(data_dir, config_overrides):
    """The BuildConfig of an OpenWebText build (either engine): `<data_dir>/openwebtext/*.xz`
    (data/openwebtext.py reads them), every text member one document. `config_overrides` are
    BuildConfig fields (vocab_file, output_dir, ...)."""
    return BuildConfig(corpus_dir=os.path.join(str(data_dir), "openwebtext"),
                       corpus_format="openwebtext", blanks_separate_docs=False,
                       **config_overrides)


def build_openwebtext_pretraining_dataset(data_dir, config_overrides, tmp_dir=None):
    """Builds shards from `<data_dir>/openwebtext/*.xz` with the local processes; returns the
    summary. `tmp_dir` is ignored (archives are streamed; it is kept for old callers)."""
    del tmp_dir
    return build_pretraining_dataset(openwebtext_config(data_dir, config_overrides))


def check_config(config):
    """Cheap checks before any work; raises DataError with a one-line message."""
    if config.max_seq_length < MIN_SEQ_LENGTH:
        raise DataError(f"--max_seq_length must be at least {MIN_SEQ_LENGTH}, "
                        f"got {config.max_seq_length}")
    if config.num_processes < 1:
        raise DataError(f"--num_processes must be at least 1, got {config.num_processes}")
    if config.num_shards < config.num_processes:
        raise DataError(f"--num_shards ({config.num_shards}) must be at least --num_processes "
                        f"({config.num_processes}): every process writes its own shards")
    if (config.vocab_file is None) == (config.sp_model is None):
        raise DataError("give exactly one of --vocab_file and --sp_model")
    if config.corpus_format not in CORPUS_FORMATS:
        raise DataError(f"corpus_format must be one of {', '.join(CORPUS_FORMATS)}, "
                        f"got {config.corpus_format!r}")


def check_output_dir(output_dir):
    """DataError when `output_dir` is a file or lies under one (before anything is written)."""
    message = fileio.output_dir_error(str(output_dir), "--output_dir")
    if message:
        raise DataError(message)


def list_units(config):
    """The sorted units of work: corpus files, or OpenWebText archives (CorpusError if none)."""
    if config.corpus_format == "openwebtext":
        return openwebtext.list_archives(config.corpus_dir)
    return corpus_reader.list_corpus_files(config.corpus_dir)


def _file_rng(seed, path):
    # A string seed is hashed deterministically (sha512) by random.Random.
    return random.Random(f"{seed}/{os.path.basename(path)}")


def _job_files(files, job, num_jobs, seed):
    mine = [f for i, f in enumerate(files) if i % num_jobs == job]
    random.Random(f"{seed}/job{job}").shuffle(mine)  # as ELECTRA, a shuffled order per job
    return mine


def _job_shards(job, num_jobs, num_shards):
    return [i for i in range(num_shards) if i % num_jobs == job]


class _Progress:
    """Progress with ETA on stderr (or `stream`), at most every `interval` seconds."""

    def __init__(self, total_bytes, enabled, interval=5.0, stream=None):
        self.total_bytes = max(1, total_bytes)
        self.enabled = enabled
        self.interval = interval
        self.stream = stream
        self.start = time.time()
        self._last = 0.0
        self._first = None  # (time, bytes) of the first report with progress: ETA ignores start-up

    def update(self, done_bytes, examples, force=False):
        now = time.time()
        if not self.enabled or (not force and now - self._last < self.interval):
            return
        self._last = now
        elapsed = now - self.start
        fraction = min(1.0, done_bytes / self.total_bytes)
        if self._first is None and done_bytes > 0:
            self._first = (now, done_bytes)
        eta = None
        if self._first is not None and done_bytes > self._first[1]:
            rate = (done_bytes - self._first[1]) / max(now - self._first[0], 1e-9)
            eta = (self.total_bytes - done_bytes) / rate
        elif fraction >= 1.0:
            eta = 0.0
        print(f"[build_pretraining_dataset] {done_bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB "
              f"({100 * fraction:.0f}%), {examples:,} examples, elapsed "
              f"{format_duration(elapsed)}, ETA {format_duration(eta)}",
              file=self.stream or sys.stderr, flush=True)


def _unit_files(unit, config):
    """[(name, label, raw bytes)] of the files of one unit: the corpus file itself, or an
    archive's members (read whole before any is used). CorpusError for an unreadable archive."""
    if config.corpus_format == "openwebtext":
        return openwebtext.read_archive(unit)
    with tf.io.gfile.GFile(unit, "rb") as f:
        return [(unit, unit, f.read())]


def _skip(error, stats):
    stats.skipped_files.append(str(error))
    stats.seen_files += 1
    print(f"warning: skipping {error}", file=sys.stderr, flush=True)


def read_units(units, config, stats, on_progress=lambda b, e: None):
    """Yields (name, stripped lines) per readable file of `units`, in order; a bad file (or
    archive) raises CorpusError naming it, or with `skip_bad_files` is skipped and counted."""
    for unit in units:
        try:
            files = _unit_files(unit, config)
        except CorpusError as e:
            if not config.skip_bad_files:
                raise
            _skip(e, stats)
            continue
        stats.input_bytes += tf.io.gfile.stat(unit).length
        for name, label, raw in files:
            try:
                text = corpus_reader.decode_corpus_bytes(raw, label)
            except CorpusError as e:
                if not config.skip_bad_files:
                    raise
                _skip(e, stats)
                continue
            stats.files += 1
            stats.seen_files += 1
            stats.bytes += len(raw)
            lines = corpus_reader.stripped_lines(text)
            if not config.blanks_separate_docs:
                lines = [line for line in lines if line]  # ELECTRA skips blank lines in this mode
            yield name, lines
        on_progress(stats.input_bytes, stats.examples)


def _tokenize_lines(tokenizer, lines, stats):
    """(flat ids, codes): codes[i] = number of ids of line i, or BLANK_LINE for a blank line."""
    texts = [line for line in lines if line]
    flat_ids, row_splits = tokenizer.tokenize_to_arrays(texts)
    codes = np.full([len(lines)], BLANK_LINE, np.int64)
    codes[[i for i, line in enumerate(lines) if line]] = np.diff(row_splits)
    stats.lines += len(texts)
    stats.corpus_tokens += len(flat_ids)
    return flat_ids, codes


def _count_documents(codes, previous_was_line):
    """Documents = runs of text lines (a file end or blank line closes a run)."""
    is_line = codes != BLANK_LINE
    if not len(is_line):
        return 0, previous_was_line
    starts = is_line & ~np.concatenate([[previous_was_line], is_line[:-1]])
    return int(starts.sum()), bool(is_line[-1])


def pack_documents(files, tokenizer, config, stats, on_progress=lambda b, e: None):
    """Tokenizes and packs `files`, (name, lines) pairs, yielding `PackedExamples` batches and
    updating `stats`: the per-file work both engines share.

    Each file gets its own packer and random stream (`_file_rng(seed, name)`) and ends its own
    last example, so a file's examples depend on nothing but the file, the seed and the config.
    Small files are tokenized together (one op call per `lines_per_batch` lines: tokenization is
    per line); a big file is tokenized in chunks.
    """
    def new_packer(name):
        return ExamplePacker(config.max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
                             _file_rng(config.seed, name))

    def pack_group(group):
        if not group:
            return
        flat_ids, codes = _tokenize_lines(tokenizer, [l for _, lines in group for l in lines],
                                          stats)
        line_offset, id_offset = 0, 0
        for name, lines in group:
            file_codes = codes[line_offset:line_offset + len(lines)]
            num_ids = int(file_codes[file_codes > 0].sum())
            packer = new_packer(name)
            packer.add_lines(flat_ids[id_offset:id_offset + num_ids], file_codes)
            packer.finish_document()
            stats.documents += _count_documents(file_codes, False)[0]
            yield _taken(packer, stats)
            line_offset += len(lines)
            id_offset += num_ids

    group, group_lines = [], 0
    for name, lines in files:
        if len(lines) >= config.lines_per_batch:
            packer, previous_was_line = new_packer(name), False
            for start in range(0, len(lines), config.lines_per_batch):
                flat_ids, codes = _tokenize_lines(
                    tokenizer, lines[start:start + config.lines_per_batch], stats)
                packer.add_lines(flat_ids, codes)
                documents, previous_was_line = _count_documents(codes, previous_was_line)
                stats.documents += documents
                yield _taken(packer, stats)
                on_progress(stats.input_bytes, stats.examples)
            packer.finish_document()
            yield _taken(packer, stats)
            continue
        group.append((name, lines))
        group_lines += len(lines)
        if group_lines >= config.lines_per_batch:
            yield from pack_group(group)
            group, group_lines = [], 0
    yield from pack_group(group)


def pack_unit(unit, tokenizer, config, stats):
    """Yields the serialized tf.train.Examples of one unit of work (a corpus file or an
    archive), updating `stats`: the Beam pipeline's DoFn body. The local jobs run the same
    `read_units` -> `pack_documents` -> `serialize_packed` over their share of units."""
    for packed in pack_documents(read_units([unit], config, stats), tokenizer, config, stats):
        yield from serialize_packed(packed)


def pack_files(paths, tokenizer, config, writer, stats, on_progress=lambda b, e: None):
    """Packs the units `paths` (in this order) into `writer` (a ShardWriter), updating `stats`."""
    for packed in pack_documents(read_units(paths, config, stats, on_progress), tokenizer,
                                 config, stats, on_progress):
        writer.write(packed)


def _taken(packer, stats):
    packed = packer.take_examples()
    stats.examples += len(packed)
    stats.tokens += int(packed.num_real_tokens.sum())
    stats.two_segment_examples += int((packed.second_lengths > 0).sum())
    return packed


# --- jobs ---------------------------------------------------------------------------------
_PROGRESS = None  # per-worker shared array [bytes, examples] * num_jobs (set in each worker)


def _init_worker(progress):
    global _PROGRESS
    _PROGRESS = progress
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_job(job, files, config, tokenizer=None):
    """One process: packs its share of files into its share of shards (temp names)."""
    if tokenizer is None:
        tokenizer = load_tokenizer(config.vocab_file, config.sp_model, config.do_lower_case,
                                   config.strip_accents)
    stats = JobStats()
    writer = ShardWriter(config.output_dir, _job_shards(job, config.num_processes,
                                                        config.num_shards), config.num_shards)
    stats.temp_paths = writer.temp_paths

    def report(done_bytes, examples):
        if _PROGRESS is not None:
            _PROGRESS[2 * job], _PROGRESS[2 * job + 1] = done_bytes, examples

    try:
        pack_files(_job_files(files, job, config.num_processes, config.seed), tokenizer, config,
                   writer, stats, report)
    finally:
        writer.close()
    return stats


def _run_job_star(args):
    return run_job(*args)


def _old_outputs(output_dir):
    pattern = os.path.join(output_dir, SHARD_PREFIX + "-*")
    return tf.io.gfile.glob(pattern)


def build_pretraining_dataset(config):
    """Builds the shards; returns the summary dict (also written to SUMMARY_FILE)."""
    check_config(config)
    # Fail fast on a bad vocabulary or corpus directory, before touching the output directory.
    tokenizer = load_tokenizer(config.vocab_file, config.sp_model, config.do_lower_case,
                               config.strip_accents)
    files = list_units(config)
    output_dir = str(config.output_dir)
    check_output_dir(output_dir)
    tf.io.gfile.makedirs(output_dir)
    stale_temps = [p for p in _old_outputs(output_dir) if p.endswith(TEMP_SUFFIX)]
    stale_temps += tf.io.gfile.glob(os.path.join(output_dir, SUMMARY_FILE + "*" + TEMP_SUFFIX))
    remove_files(stale_temps)  # left by a killed run (local or Beam)
    total_bytes = sum(tf.io.gfile.stat(f).length for f in files)
    progress = _Progress(total_bytes, config.progress)
    all_temp_paths = [shard_path(output_dir, i, config.num_shards) + TEMP_SUFFIX
                      for i in range(config.num_shards)]
    start = time.time()
    try:
        if config.num_processes == 1:
            job_stats = [_run_job_inline(files, config, progress, tokenizer)]
        else:
            job_stats = _run_jobs_in_processes(files, config, progress)
    except BaseException:
        remove_files(all_temp_paths)
        raise
    seconds = time.time() - start
    progress.update(total_bytes, sum(stats.examples for stats in job_stats), force=True)

    # Success: replace any shards of an earlier build, then publish the new ones.
    new_temps = [p for stats in job_stats for p in stats.temp_paths]
    finals = {p[:-len(TEMP_SUFFIX)] for p in new_temps}
    remove_files([p for p in _old_outputs(output_dir)
                  if p not in finals and not p.endswith(TEMP_SUFFIX)])
    shard_paths = sorted(commit_shards(new_temps), key=_shard_index)
    summary = make_summary(job_stats, config, seconds, len(files))
    summary["engine"] = f"local, {config.num_processes} process(es)"
    summary["shards"] = [os.path.basename(p) for p in shard_paths]
    write_summary(output_dir, summary)
    summary["shard_paths"] = shard_paths
    return summary


def write_summary(output_dir, summary):
    """The summary JSON, written under a temporary name and renamed (after the shards)."""
    summary_path = os.path.join(str(output_dir), SUMMARY_FILE)
    with tf.io.gfile.GFile(summary_path + TEMP_SUFFIX, "w") as f:
        json.dump(summary, f, indent=2)
    tf.io.gfile.rename(summary_path + TEMP_SUFFIX, summary_path, overwrite=True)


def _shard_index(path):
    return int(path.rsplit("-of-", 1)[0].rsplit("-", 1)[1])


def _run_job_inline(files, config, progress, tokenizer):
    """num_processes == 1: run in this process, reporting progress from the packing loop."""
    global _PROGRESS
    _PROGRESS = _InlineProgress(progress)
    try:
        return run_job(0, files, config, tokenizer)
    finally:
        _PROGRESS = None


class _InlineProgress(list):
    def __init__(self, progress):
        super().__init__([0, 0])
        self._progress = progress

    def __setitem__(self, index, value):
        super().__setitem__(index, value)
        if index == 1:
            self._progress.update(self[0], self[1])


def _run_jobs_in_processes(files, config, progress):
    # "spawn": TensorFlow is not fork-safe once initialized in the parent.
    context = multiprocessing.get_context("spawn")
    shared = context.Array("q", 2 * config.num_processes, lock=False)
    with context.Pool(config.num_processes, initializer=_init_worker, initargs=(shared,)) as pool:
        result = pool.map_async(_run_job_star,
                                [(job, files, config) for job in range(config.num_processes)])
        while not result.ready():
            result.wait(progress.interval)
            values = list(shared)
            progress.update(sum(values[0::2]), sum(values[1::2]))
        return result.get()


COUNTS = ("files", "seen_files", "input_bytes", "bytes", "lines", "documents",
          "corpus_tokens", "examples", "tokens", "two_segment_examples")


def total_stats(job_stats):
    """The sum of JobStats (skipped files sorted: the same list whatever the split)."""
    total = JobStats()
    for stats in job_stats:
        for field in COUNTS:
            setattr(total, field, getattr(total, field) + getattr(stats, field))
        total.skipped_files.extend(stats.skipped_files)
    total.skipped_files.sort()
    return total


def make_summary(job_stats, config, seconds, num_units):
    """The summary dict of a build from its jobs' (or units') stats."""
    total = total_stats(job_stats)
    return {
        "documents": total.documents,
        "examples": total.examples,
        "tokens": total.tokens,
        "two_segment_examples": total.two_segment_examples,
        "two_segment_share": total.two_segment_examples / max(1, total.examples),
        "seconds": round(seconds, 3),
        # files seen: corpus files, or archive members (a skipped archive counts once)
        "corpus_files": total.seen_files,
        "corpus_units": num_units,  # corpus files, or archives
        "files_read": total.files,
        "skipped_files": total.skipped_files,
        "corpus_bytes": total.bytes,
        "corpus_lines": total.lines,
        "corpus_tokens": total.corpus_tokens,
        "corpus_tokens_per_second": round(total.corpus_tokens / max(seconds, 1e-9)),
        "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "progress"},
    }


def format_summary(summary):
    return (f"{summary['documents']:,} documents -> {summary['examples']:,} examples, "
            f"{summary['tokens']:,} tokens, "
            f"{100 * summary['two_segment_share']:.1f}% two-segment, "
            f"{len(summary['skipped_files'])} files skipped, {summary['seconds']:.1f}s")
