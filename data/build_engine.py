"""The shard build on the engine a command asks for: the local processes
(data/pretraining_builder.py) or an Apache Beam pipeline (data/beam_builder.py, which runs the
builder's per-file work). Above both, so the builder never imports the Beam pipeline built on
it.

    summary = build(config)                               # local processes
    summary = build(config, "DirectRunner", beam_args)    # Beam; dry_run=True: describe only
"""
from data.errors import DataError
from data.pretraining_builder import build_pretraining_dataset


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
    the pipeline that would run."""
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
