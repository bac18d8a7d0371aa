"""One row of the benchmark table, how each benchmark hands its rows to ``make bench``, and the
percentile its figures are read with.

Every benchmark module runs in its own process (each sets up Django its own way, and the memory
figures are the process's own); with ``--rows`` it prints its rows as JSON on its last line, which
`benchmarks.__main__` collects into one table.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
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


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` percentile of ``values`` (0.95: p95), interpolated between the two
    nearest samples (`statistics.quantiles`' inclusive method); at least two values."""
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]
