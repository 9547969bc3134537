"""What the fine-tuning run tells the user: progress on stdout, warnings on stderr."""
import sys


class UsageError(ValueError):
    """Bad flags / paths (one-line message)."""


def say(msg: str):
    print(msg, flush=True)


def warn(msg: str):
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


def run_command(run_fn, argv, error_types):
    """A command's exit status: `run_fn(argv)`, or, for an exception of one of `error_types()`
    (called when it is raised: only the bad-input classes of modules loaded by then), one line
    `error: ...` on stderr and its `exit_code` (1; 128 + signal after SIGTERM/SIGINT)."""
    try:
        return run_fn(sys.argv[1:] if argv is None else list(argv))
    except Exception as e:  # noqa: BLE001 -- user errors become one line, the rest propagate
        if not isinstance(e, error_types()):
            raise
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return getattr(e, "exit_code", 1)
