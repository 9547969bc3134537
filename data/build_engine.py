"""The shard build on the engine a command asks for: the local processes
(data/pretraining_builder.py) or an Apache Beam pipeline (data/beam_builder.py, which runs the
builder's per-file work). Above both, so the builder never imports the Beam pipeline built on
it.

    summary = build(config)                               # local processes
    summary = build(config, "DirectRunner", beam_args)    # Beam; dry_run=True: describe only

`config.num_shards` None: as many shards as the corpus needs (`shards_for_corpus`: one per
SHARD_BYTES of corpus, at least one per process, at most MAX_AUTO_SHARDS); the summary's
`num_shards_note` says how many and why (`describe_shards` also when they were asked for and
hold few examples each).
"""
import dataclasses
import math

from data.errors import DataError
from data.pretraining_builder import build_pretraining_dataset, check_config, list_units

SHARD_BYTES = 32 * 2 ** 20   # corpus bytes per shard when the count is left to the corpus
MAX_AUTO_SHARDS = 1000       # ELECTRA's count (OpenWebText, ~40 GB of text: ~40 MB a shard)
FEW_EXAMPLES = 100           # below this many examples a shard, the count is called too high


def shards_for_corpus(config):
    """(config with num_shards set, the reason in words) where num_shards is None: one shard
    per SHARD_BYTES of the corpus units (archives: compressed), at least --num_processes, at
    most MAX_AUTO_SHARDS. (config, None) where it is set."""
    if config.num_shards is not None:
        return config, None
    # The builder's cheap checks first, as with a count given (its other checks follow).
    check_config(dataclasses.replace(config, num_shards=max(1, config.num_processes)))
    import tensorflow as tf
    total = sum(tf.io.gfile.stat(unit).length for unit in list_units(config))
    count = min(MAX_AUTO_SHARDS, max(1, config.num_processes, math.ceil(total / SHARD_BYTES)))
    why = (f"sized to the corpus: {total / 1e6:.1f} MB, one shard per "
           f"{SHARD_BYTES // 2 ** 20} MB" + (f", at most {MAX_AUTO_SHARDS}"
                                             if count == MAX_AUTO_SHARDS else "")
           + (", one per process" if count == config.num_processes > 1 else ""))
    return dataclasses.replace(config, num_shards=count), why


def describe_shards(summary, why=None):
    """`N shard(s) (why)`; for a count that was asked for, a note when its shards hold fewer
    than FEW_EXAMPLES examples each (e.g. the old default 1,000 for a 1 MB corpus)."""
    count = summary["config"]["num_shards"]
    text = f"{count:,} shard{'s' if count != 1 else ''}"
    if why:
        return f"{text} ({why})"
    per_shard = summary["examples"] / max(1, count)
    if count > 1 and per_shard < FEW_EXAMPLES:
        text += (f" of ~{per_shard:.2g} examples each: more than this corpus needs (leave "
                 "--num_shards out to size them to the corpus)")
    return text


def _beam_builder():
    """data.beam_builder, or a DataError saying how to install Apache Beam."""
    try:
        from data import beam_builder
    except ImportError as e:
        if "apache_beam" not in str(e):
            raise
        raise DataError("--runner needs Apache Beam, which is not installed: "
                        "pip install -e '.[beam]'") from None
    return beam_builder


def build(config, runner=None, beam_args=(), dry_run=False):
    """The build on the chosen engine: the local processes (`runner` None) or a Beam runner
    (DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ...) with the Beam flags
    `beam_args`. Returns the summary, or with `dry_run` (Beam only) a one-line description of
    the pipeline that would run. A `num_shards` of None is sized to the corpus
    (`shards_for_corpus`; the summary's `num_shards_note` says so)."""
    config, why = shards_for_corpus(config)
    summary = _build(config, runner, beam_args, dry_run)
    if isinstance(summary, dict):
        summary["num_shards_note"] = describe_shards(summary, why)
    return summary


def _build(config, runner, beam_args, dry_run):
    if runner is None:
        if beam_args:
            raise DataError(f"unknown flag(s): {' '.join(beam_args)} (Apache Beam pipeline "
                            "options need --runner)")
        if dry_run:
            raise DataError("--dry_run needs --runner (it builds a Beam pipeline without "
                            "running it)")
        return build_pretraining_dataset(config)
    if dry_run:
        return _beam_builder().dry_run(config, runner, beam_args)
    return _beam_builder().build_with_beam(config, runner, beam_args)
