"""Filters of the usage pages: dollars, budget amounts, and instants in a guild's time zone."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

from django import template

from dashboard.usage_report import format_usd

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
