"""What the fine-tuning run tells the user: progress on stdout, warnings on stderr (the one-line
error exit is every command's: base/command.py)."""
import sys


class UsageError(ValueError):
    """Bad flags / paths (one-line message)."""


def say(msg: str):
    print(msg, flush=True)


def warn(msg: str):
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)
