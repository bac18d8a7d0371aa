"""``make bench``: every benchmark, each in its own process, printed as one table.

Run: ``.venv/bin/python -m benchmarks``
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

MODULES = (
    "benchmarks.pipeline_build",
    "benchmarks.model_calls",
    "benchmarks.participants",
    "benchmarks.ingest",
    "benchmarks.gateway_ingest",
    "benchmarks.capacity",
    "benchmarks.memory",
    "benchmarks.live_push",
    "benchmarks.recall",
    "benchmarks.recall_e2e",
    "benchmarks.lorebook",
    "benchmarks.streaming",
    "benchmarks.metrics",
    "benchmarks.moderation",
    "benchmarks.persona_tests",
    "benchmarks.tenancy",
    "benchmarks.spend",
    "benchmarks.usage_page",
)


def main() -> int:
    rows = []
    load_before = os.getloadavg()[0]
    for module in MODULES:
        print(f"running {module} …", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, "-m", module, "--rows"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    widths = [max(len(r[key]) for r in rows) for key in ("what", "measured", "baseline")]
    print(
        f"Benchmarks, {dt.date.today():%Y-%m-%d} (each figure beside its baseline, same run; "
        f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)"
    )
    header = ("what", "measured", "baseline (same run)", "goal")
    print(" | ".join(h.ljust(w) for h, w in zip(header, [*widths, 4], strict=True)))
    for row in rows:
        cells = (row["what"], row["measured"], row["baseline"])
        print(" | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)), "|", row["goal"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
