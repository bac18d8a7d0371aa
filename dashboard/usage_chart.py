"""The usage page's charts, drawn on the server as SVG (no script, no library): a day's tokens
as one stacked bar (uncached prompt, cached prompt, output) and its known cost as a bar of its
own. This module computes the geometry; ``dashboard/_usage_chart.html`` draws it, each bar with
a ``<title>`` saying its numbers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from dashboard.usage_report import Row, format_usd

WIDTH = 720
HEIGHT = 200
LEFT = 64
"""Room for the value axis's labels."""
BOTTOM = 22
"""Room for the day labels."""
TOP = 8


@dataclass(frozen=True)
class Segment:
    y: float
    height: float
    series: str
    """The CSS class that colours it (``uncached``, ``cached``, ``output``, ``cost``)."""


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    segments: tuple[Segment, ...]
    title: str


@dataclass(frozen=True)
class Chart:
    """One chart: its size, the bars, the value axis's ticks (y, label) and the day labels
    (x, label), at most about ten so they never overlap."""

    label: str
    width: int
    height: int
    bars: tuple[Bar, ...]
    ticks: tuple[tuple[float, str], ...]
    days: tuple[tuple[float, str], ...]
    baseline: float
    legend: tuple[tuple[str, str], ...] = ()
    left: int = LEFT


def token_chart(days: Sequence[Row]) -> Chart:
    """A stacked bar per day: uncached prompt, cached prompt and output tokens."""
    peak = max((row.totals.tokens for row in days), default=0)
    values = [
        (
            row,
            (
                ("uncached", row.totals.uncached_prompt_tokens),
                ("cached", row.totals.cached_prompt_tokens),
                ("output", row.totals.completion_tokens),
            ),
        )
        for row in days
    ]
    chart = _chart(
        "Tokens per day",
        values,
        peak,
        lambda row: (
            f"{row.label}: {row.totals.calls:,} calls, "
            f"{row.totals.uncached_prompt_tokens:,} uncached prompt, "
            f"{row.totals.cached_prompt_tokens:,} cached prompt, "
            f"{row.totals.completion_tokens:,} output tokens"
        ),
        lambda value: f"{value:,.0f}",
    )
    legend = (("uncached", "uncached prompt"), ("cached", "cached prompt"), ("output", "output"))
    return replace(chart, legend=legend)


def cost_chart(days: Sequence[Row]) -> Chart:
    """A bar per day: the day's known cost in US dollars."""
    peak = max((row.totals.usd or Decimal(0) for row in days), default=Decimal(0))

    def title(row: Row) -> str:
        usd = row.totals.usd
        known = f"${format_usd(usd)}" if usd is not None else "cost unknown"
        unpriced = row.totals.unpriced_calls
        more = f" (+{unpriced} calls of unknown cost)" if unpriced and usd is not None else ""
        return f"{row.label}: {known}{more}"

    values = [(row, (("cost", float(row.totals.usd or 0)),)) for row in days]
    return _chart(
        "Known cost per day (US dollars)", values, float(peak), title, lambda v: f"${v:,.4g}"
    )


Series = Sequence[tuple[Row, Sequence[tuple[str, float]]]]


def _chart(
    label: str,
    values: Series,
    peak: float,
    title: Callable[[Row], str],
    tick_text: Callable[[float], str],
) -> Chart:
    plot_width = WIDTH - LEFT
    plot_height = HEIGHT - TOP - BOTTOM
    baseline = TOP + plot_height
    step = plot_width / max(1, len(values))
    scale = plot_height / peak if peak else 0.0
    bars = []
    for index, (row, series) in enumerate(values):
        y = baseline
        segments = []
        for name, value in series:
            height = float(value) * scale
            if height > 0:
                y -= height
                segments.append(Segment(round(y, 2), round(height, 2), name))
        bars.append(
            Bar(
                x=round(LEFT + index * step + step * 0.1, 2),
                width=round(max(step * 0.8, 1.0), 2),
                segments=tuple(segments),
                title=title(row),
            )
        )
    ticks = tuple(
        (round(baseline - plot_height * fraction, 2), tick_text(float(peak) * fraction))
        for fraction in (0, 0.5, 1)
    )
    every = max(1, len(values) // 10)
    days = tuple(
        (round(LEFT + index * step + step / 2, 2), row.label[5:])
        for index, (row, _) in enumerate(values)
        if index % every == 0
    )
    return Chart(label, WIDTH, HEIGHT, tuple(bars), ticks, days, baseline)
