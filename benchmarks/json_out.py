"""`--json_out PATH` of the benchmarks: their result rows as one JSON file, with the date and the
1-minute load before and after, for benchmarks/refresh.py (which rewrites the headline table of
docs/PERFORMANCE.md from them). The printed tables stay what they were; this is a second output.

    {"rows": [{...}, ...], "command": "...", "date": "YYYY-MM-DD HH:MM:SS UTC",
     "loadavg_before": 0.42, "loadavg_after": 0.97, ...extra}
"""
import json
import os
import sys
import time

LOAD_BEFORE = round(os.getloadavg()[0], 2)   # at import: before the benchmark's own work


def add_argument(parser):
    parser.add_argument("--json_out", default=None,
                        help="also write the result rows here as JSON (benchmarks/refresh.py)")


def write(path, rows, **extra):
    """Writes `rows` (a list of dicts) and `extra` to `path` (nothing when `path` is None)."""
    if not path:
        return
    payload = {"rows": rows, "command": "python " + " ".join(sys.argv),
               "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "loadavg_before": LOAD_BEFORE, "loadavg_after": round(os.getloadavg()[0], 2),
               **extra}
    with open(path, "w") as f:   # a results file the caller named, not a user's data
        json.dump(payload, f, indent=1)
