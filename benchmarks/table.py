"""One row of the benchmark table, and how each benchmark hands its rows to ``make bench``.

Every benchmark module runs in its own process (each sets up Django its own way, and the memory
figures are the process's own); with ``--rows`` it prints its rows as JSON on its last line, which
`benchmarks.__main__` collects into one table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Row:
    """A figure beside the baseline measured in the same run, and the goal."""

    what: str
    measured: str
    baseline: str = "—"
    goal: str = "—"


def emit(rows: list[Row]) -> None:
    """Print ``rows`` as the benchmark's own output, or as JSON with ``--rows``."""
    if "--rows" in sys.argv:
        print(json.dumps([asdict(row) for row in rows]))
        return
    for row in rows:
        print(f"  {row.what}: {row.measured}   (baseline: {row.baseline}; goal: {row.goal})")
