"""The usage pages (DESIGN §3b): a guild's model calls, tokens and cost per day, persona, user,
kind, model and channel, with its budgets' state (``/guilds/<id>/usage/``: the guild's admins
and moderators; ``?format=json`` and ``?format=csv`` for the same range), and every guild's at once
with the price table's gaps (``/usage/``: operators). Read from the rollups, never the turns."""

from __future__ import annotations

import csv
import io
from zoneinfo import ZoneInfo

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard import selectors
from dashboard.access import guild_access, operator_required, viewer_required
from dashboard.names import name_book
from dashboard.usage_chart import cost_chart, token_chart
from dashboard.usage_report import (
    RangeRefused,
    Totals,
    all_guilds_usage,
    unpriced_models,
    usage_csv_rows,
    usage_range,
    usage_report,
)

EARLIEST_DAY = ZoneInfo("Etc/GMT-14")
"""The time zone whose day begins first (UTC+14): its today is the newest day any guild's
rollups can be dated."""


@require_GET
@viewer_required
def guild_usage(request: HttpRequest, guild_id: int) -> HttpResponse:
    """One guild's usage over ``?from=…&to=…`` (ISO dates; default: the last 30 days in its
    time zone). ``?format=json``: DESIGN §3b's answer; ``?format=csv``: one line per rollup.
    A bad range answers 400 saying why; a guild the person has no right in, 404."""
    guild = guild_access(request, guild_id)
    wanted = request.GET.get("format", "html")
    try:
        start, end = usage_range(
            zone=ZoneInfo(guild.timezone), start=request.GET.get("from"), end=request.GET.get("to")
        )
    except RangeRefused as refused:
        if wanted == "json":
            return JsonResponse({"error": str(refused)}, status=400)
        return HttpResponse(f"Bad range: {refused}", status=400, content_type="text/plain")
    names = name_book(request)
    if wanted == "csv":
        out = io.StringIO()
        csv.writer(out).writerows(usage_csv_rows(guild=guild, start=start, end=end, names=names))
        response = HttpResponse(out.getvalue(), content_type="text/csv")
        name = f"usage-{guild.guild_id}-{start}-{end}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    report = usage_report(guild=guild, start=start, end=end, names=names, now=timezone.now())
    if wanted == "json":
        return JsonResponse(report.as_json())
    context = {
        "guild": guild,
        "report": report,
        "token_chart": token_chart(report.days),
        "cost_chart": cost_chart(report.days),
        "section": "usage",
    }
    return render(request, "dashboard/usage.html", context)


GUILDS_SHOWN = 200
"""Guilds the operators' page lists, the most tokens first (``?all=1``: every one)."""


@require_GET
@operator_required
def all_usage(request: HttpRequest) -> HttpResponse:
    """Every guild's totals over the range (operators; the `GUILDS_SHOWN` that used the most
    tokens, unless ``?all=1``, and the sum of all), the price table and the models called
    without a known cost. Each guild's rollups are dated in its own time zone, so the default
    range ends at the newest date any guild can have (`EARLIEST_DAY`'s today)."""
    try:
        start, end = usage_range(
            zone=EARLIEST_DAY, start=request.GET.get("from"), end=request.GET.get("to")
        )
    except RangeRefused as refused:
        return HttpResponse(f"Bad range: {refused}", status=400, content_type="text/plain")
    guilds = all_guilds_usage(start=start, end=end)
    shown = guilds if request.GET.get("all") else guilds[:GUILDS_SHOWN]
    context = {
        "start": start,
        "end": end,
        "range_query": f"from={start}&to={end}",
        "guilds": shown,
        "more": len(guilds) - len(shown),
        "total": sum((guild.totals for guild in guilds), Totals()),
        "prices": selectors.model_prices(),
        "unpriced": unpriced_models(start=start, end=end),
    }
    return render(request, "dashboard/usage_all.html", context)
