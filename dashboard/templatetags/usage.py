"""Filters of the usage pages: dollars, budget amounts, and instants in a guild's time zone."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from dashboard.usage_report import Totals, format_usd

register = template.Library()


@register.filter
def usd(value: Decimal | None) -> str:
    """``$0.000369``: the whole known amount, no rounding away of small costs."""
    return "" if value is None else f"${format_usd(value)}"


@register.filter
def budget_amount(value: Decimal, kind: str) -> str:
    """A budget's amount: tokens as a whole number with separators, dollars as ``usd``."""
    if kind == "tokens_per_day":
        return f"{int(value):,}"
    return usd(value)


@register.filter
def in_zone(value: dt.datetime, zone: str) -> str:
    """An instant in the named time zone, to the minute."""
    return f"{value.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M} {zone}"


@register.filter
def usd_text(value: str | None) -> str:
    """A stored cost (a decimal string) without its trailing zeros."""
    return "" if value is None else format_usd(Decimal(value))


@register.filter
def count(value: int) -> str:
    """A count with thousands separators (``12,345``)."""
    return f"{int(value):,}"


@register.filter
def cost(totals: Totals) -> SafeString:
    """A total's cost as the usage pages show it: unknown when no call of it had a cost
    (never $0), else the known dollars and how many more calls cost an unknown amount. A
    filter rather than an included template: a year's table has hundreds of rows."""
    known = totals.usd
    if known is None:
        return mark_safe(
            '<span class="unknown" title="No price and no reported cost: unknown, not zero">'
            "unknown</span>"
        )
    if not totals.unpriced_calls:
        return format_html("{}", usd(known))
    return format_html(
        '{} <span class="muted" title="Calls of unknown cost: no price and no reported cost">'
        "+ {} unknown</span>",
        usd(known),
        totals.unpriced_calls,
    )
