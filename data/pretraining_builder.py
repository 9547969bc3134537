"""Corpus directory -> packed pre-training examples in TFRecord shards (ELECTRA layout, fixed).

Work split (as ELECTRA): sorted corpus files go to job `i % num_processes`; job j writes the
shards `i % num_processes == j`, round-robin. Each file is packed with its own random stream,
seeded from (seed, file name), so the set of examples does not depend on `num_processes`; for a
fixed seed, num_processes and num_shards the shards are byte-identical between runs.

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

from data import corpus_reader
from data.errors import CorpusError, DataError
from data.example_packer import ExamplePacker
from data.shard_writer import (SHARD_PREFIX, TEMP_SUFFIX, ShardWriter, commit_shards,
                               remove_files, shard_path)
from data.tokenization import load_tokenizer
from training.progress import format_duration

SUMMARY_FILE = "pretrain_data.summary.json"
MIN_SEQ_LENGTH = 8
BLANK_LINE = -1   # row-length codes fed to the packer: a blank line ...
END_OF_FILE = -2  # ... and the end of a file (which always closes the pending example)


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


@dataclasses.dataclass
class JobStats:
    files: int = 0
    bytes: int = 0
    lines: int = 0
    documents: int = 0
    corpus_tokens: int = 0   # WordPiece tokens produced by the tokenizer
    examples: int = 0
    tokens: int = 0          # real tokens in the examples (input_mask ones)
    two_segment_examples: int = 0
    skipped_files: list = dataclasses.field(default_factory=list)
    temp_paths: list = dataclasses.field(default_factory=list)


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
    """Progress with ETA on stderr, at most every `interval` seconds."""

    def __init__(self, total_bytes, enabled, interval=5.0):
        self.total_bytes = max(1, total_bytes)
        self.enabled = enabled
        self.interval = interval
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
              f"{format_duration(elapsed)}, ETA {format_duration(eta)}", file=sys.stderr,
              flush=True)


def _read_files(paths, config, stats, on_progress):
    """Yields (path, stripped lines) per readable file; bad files raise or are skipped."""
    for path in paths:
        try:
            text = corpus_reader.read_corpus_file(path)
        except CorpusError as e:
            if not config.skip_bad_files:
                raise
            stats.skipped_files.append(str(e))
            print(f"warning: skipping {e}", file=sys.stderr, flush=True)
            continue
        stats.files += 1
        stats.bytes += tf.io.gfile.stat(path).length
        lines = corpus_reader.stripped_lines(text)
        if not config.blanks_separate_docs:
            lines = [line for line in lines if line]  # ELECTRA skips blank lines in this mode
        yield path, lines
        on_progress(stats.bytes, stats.examples)


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


def pack_files(paths, tokenizer, config, writer, stats, on_progress=lambda b, e: None):
    """Tokenizes and packs the files `paths` (in this order) into `writer`, updating `stats`.

    Small files are tokenized together (one op call per `lines_per_batch` lines); a big file
    is tokenized in chunks. Each file gets its own packer and random stream.
    """
    def new_packer(path):
        return ExamplePacker(config.max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
                             _file_rng(config.seed, path))

    def pack_group(group):
        if not group:
            return
        flat_ids, codes = _tokenize_lines(tokenizer, [l for _, lines in group for l in lines],
                                          stats)
        line_offset, id_offset = 0, 0
        for path, lines in group:
            file_codes = codes[line_offset:line_offset + len(lines)]
            num_ids = int(file_codes[file_codes > 0].sum())
            packer = new_packer(path)
            packer.add_lines(flat_ids[id_offset:id_offset + num_ids], file_codes)
            packer.finish_document()
            stats.documents += _count_documents(file_codes, False)[0]
            _write(packer, writer, stats)
            line_offset += len(lines)
            id_offset += num_ids

    group, group_lines = [], 0
    for path, lines in _read_files(paths, config, stats, on_progress):
        if len(lines) >= config.lines_per_batch:
            packer, previous_was_line = new_packer(path), False
            for start in range(0, len(lines), config.lines_per_batch):
                flat_ids, codes = _tokenize_lines(
                    tokenizer, lines[start:start + config.lines_per_batch], stats)
                packer.add_lines(flat_ids, codes)
                documents, previous_was_line = _count_documents(codes, previous_was_line)
                stats.documents += documents
                _write(packer, writer, stats)
                on_progress(stats.bytes, stats.examples)
            packer.finish_document()
            _write(packer, writer, stats)
            continue
        group.append((path, lines))
        group_lines += len(lines)
        if group_lines >= config.lines_per_batch:
            pack_group(group)
            group, group_lines = [], 0
    pack_group(group)


def _write(packer, writer, stats):
    packed = packer.take_examples()
    stats.examples += len(packed)
    stats.tokens += int(packed.num_real_tokens.sum())
    stats.two_segment_examples += int((packed.second_lengths > 0).sum())
    writer.write(packed)


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
    files = corpus_reader.list_corpus_files(config.corpus_dir)
    output_dir = str(config.output_dir)
    tf.io.gfile.makedirs(output_dir)
    stale_temps = [p for p in _old_outputs(output_dir) if p.endswith(TEMP_SUFFIX)]
    remove_files(stale_temps)  # left by a killed run
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
    summary = _summary(job_stats, config, seconds, len(files))
    summary["shards"] = [os.path.basename(p) for p in shard_paths]
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    with tf.io.gfile.GFile(summary_path + TEMP_SUFFIX, "w") as f:
        json.dump(summary, f, indent=2)
    tf.io.gfile.rename(summary_path + TEMP_SUFFIX, summary_path, overwrite=True)
    summary["shard_paths"] = shard_paths
    return summary


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


def _summary(job_stats, config, seconds, num_files):
    total = JobStats()
    for stats in job_stats:
        for field in ("files", "bytes", "lines", "documents", "corpus_tokens", "examples",
                      "tokens", "two_segment_examples"):
            setattr(total, field, getattr(total, field) + getattr(stats, field))
        total.skipped_files.extend(stats.skipped_files)
    return {
        "documents": total.documents,
        "examples": total.examples,
        "tokens": total.tokens,
        "two_segment_examples": total.two_segment_examples,
        "two_segment_share": total.two_segment_examples / max(1, total.examples),
        "seconds": round(seconds, 3),
        "corpus_files": num_files,
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
