"""How fast the usage page answers with a year of rollups for 1,000 guilds.

Run: ``DATABASE_URL=postgres://… .venv/bin/python -m benchmarks.usage_page`` (a throwaway
database of that server; a SQLite file when ``DATABASE_URL`` names nothing).

The database holds a year of usage for 1,000 guilds as the worker leaves it: per guild and day,
rollup rows for two personas and two kinds of call (each a different user), and the guilds'
daily and monthly counters (about 1.5 million rollup rows). The real web process (``daphne``)
serves the pages; a moderator's browser is stood in for by an HTTP client with its session
cookie. Timed, as a person gets them, each fetched ``REQUESTS`` times after one warm-up:

1. a guild's page (its last 30 days: chart, tables, budget), its ``?format=json`` and its whole
   year (``?from=…&to=…``);
2. the operators' page of every guild (30 days);
3. baseline, same run: the usage page of a guild with no calls at all (the page's own cost).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.table import Row, emit, percentile
from benchmarks.throwaway import setup_django, teardown_django

GUILDS = 1_000
DAYS = 365
REQUESTS = 30
GOAL_MS = 300
FIRST_GUILD = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
ASGI_APP = "botproject.asgi:application"
TODAY = dt.date(2026, 6, 30)
ROLLUPS = (("Tomori", "reply"), ("Tomori", "tool"), ("Anon", "reply"), ("Anon", "planner"))


def _fill() -> int:
    """A year of rollups and counters for `GUILDS` guilds; returns the rollup rows written."""
    from django.db import connection, transaction

    from chat.models import SpendCounter, UsageDay
    from personas.models import GuildConfig, Persona

    GuildConfig.objects.bulk_create(
        GuildConfig(guild_id=FIRST_GUILD + g, name=f"Guild {g}", limits={"tokens_per_day": 10**9})
        for g in range(GUILDS + 1)  # the last one has no calls: the baseline
    )
    for guild in GuildConfig.objects.filter(guild_id=FIRST_GUILD):
        Persona.objects.create(guild=guild, name="Tomori", is_main=True)
    usage, counters = UsageDay._meta.db_table, SpendCounter._meta.db_table
    first = TODAY - dt.timedelta(DAYS - 1)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            kinds = ", ".join(f"('{p}', '{k}', {n})" for n, (p, k) in enumerate(ROLLUPS))
            cursor.execute(
                f"INSERT INTO {usage} (guild_id, day, channel_id, persona_name, user_id, kind, "
                "model, calls, prompt_tokens, cached_prompt_tokens, completion_tokens, usd_pico, "
                "unpriced_calls, estimated_calls) "
                f"SELECT {FIRST_GUILD} + g, %s::date + d, 5000 + g, r.persona, "
                "100 + ((d + g + r.n) %% 40), r.kind, 'gpt-4o-mini', 3 + (d %% 5), 3000 + d, "
                "1200, 150, 1234567890, 0, 0 "
                f"FROM generate_series(0, {GUILDS - 1}) g, generate_series(0, {DAYS - 1}) d, "
                f"(VALUES {kinds}) r(persona, kind, n)",
                [first],
            )
            cursor.execute(
                f"INSERT INTO {counters} (guild_id, persona_id, period, starts_on, calls, "
                "prompt_tokens, cached_prompt_tokens, completion_tokens, usd_pico, "
                "unpriced_calls) "
                f"SELECT {FIRST_GUILD} + g, 0, 'day', %s::date + d, 16, 12000, 4800, 600, "
                f"4938271560, 0 FROM generate_series(0, {GUILDS - 1}) g, "
                f"generate_series(0, {DAYS - 1}) d",
                [first],
            )
        else:
            for g in range(GUILDS):
                rows = []
                for d in range(DAYS):
                    day = (first + dt.timedelta(d)).isoformat()
                    for n, (persona, kind) in enumerate(ROLLUPS):
                        rows.append(
                            (
                                FIRST_GUILD + g,
                                day,
                                5000 + g,
                                persona,
                                100 + (d + g + n) % 40,
                                kind,
                                "gpt-4o-mini",
                                3 + d % 5,
                                3000 + d,
                                1200,
                                150,
                                1234567890,
                                0,
                                0,
                            )
                        )
                cursor.executemany(
                    f"INSERT INTO {usage} (guild_id, day, channel_id, persona_name, user_id, "
                    "kind, model, calls, prompt_tokens, cached_prompt_tokens, "
                    "completion_tokens, usd_pico, unpriced_calls, estimated_calls) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
                cursor.executemany(
                    f"INSERT INTO {counters} (guild_id, persona_id, period, starts_on, calls, "
                    "prompt_tokens, cached_prompt_tokens, completion_tokens, usd_pico, "
                    "unpriced_calls) VALUES (%s, 0, 'day', %s, 16, 12000, 4800, 600, "
                    "4938271560, 0)",
                    [(FIRST_GUILD + g, (first + dt.timedelta(d)).isoformat()) for d in range(DAYS)],
                )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {usage}; ANALYZE {counters}")
    return UsageDay.objects.count()


def _session_cookie() -> tuple[str, str]:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_user("bench-operator", password="x" * 20, is_staff=True)
    client = Client()
    client.force_login(user)
    return settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


async def _timed(client, url: str) -> list[float]:
    """Milliseconds of each of `REQUESTS` fetches of ``url`` (after one warm-up)."""
    (await client.get(url)).raise_for_status()
    timings = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        response = await client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return timings


def _daphne(directory: str) -> tuple[subprocess.Popen, str]:
    """The web process on a free port, on the benchmark's database; and its base URL."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "benchmark-only-secret-key",
        "DATABASE_URL": _database_url(),
    }
    log = (Path(directory) / "daphne.log").open("wb")
    process = subprocess.Popen(
        [*(sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)), ASGI_APP],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return process, f"http://127.0.0.1:{port}"


async def _measure(base: str, cookie: tuple[str, str]) -> dict[str, list[float]]:
    import httpx

    guild, empty = FIRST_GUILD + GUILDS // 2, FIRST_GUILD + GUILDS
    year = f"?from={TODAY - dt.timedelta(DAYS - 1)}&to={TODAY}"
    async with httpx.AsyncClient(cookies={cookie[0]: cookie[1]}, timeout=60) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daphne did not start")
            await asyncio.sleep(0.2)
        usage = f"{base}/guilds/{guild}/usage/"
        return {
            "page": await _timed(client, f"{usage}?to={TODAY}"),
            "json": await _timed(client, f"{usage}?to={TODAY}&format=json"),
            "year": await _timed(client, f"{usage}{year}"),
            "all": await _timed(client, f"{base}/usage/?to={TODAY}"),
            "empty": await _timed(client, f"{base}/guilds/{empty}/usage/?to={TODAY}"),
        }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-usage-") as directory:
        database = setup_django(directory, prefix="bench_usage_page")
        from django.db import connection, connections

        vendor = connection.vendor
        try:
            filled = time.perf_counter()
            rows = _fill()
            filled = time.perf_counter() - filled
            cookie = _session_cookie()
            connections.close_all()
            daphne, base = _daphne(directory)
            try:
                timings = asyncio.run(_measure(base, cookie))
            finally:
                daphne.terminate()
                daphne.wait(timeout=20)
        finally:
            teardown_django(database)
    baseline = f"p95 {percentile(timings['empty'], 0.95):.0f} ms (a guild with no calls)"
    what = f"({rows:,} rollups, {GUILDS:,} guilds × {DAYS} days, {vendor}, through daphne)"
    emit(
        [
            Row(
                f"a guild's usage page, 30 days {what}",
                f"p95 {percentile(timings['page'], 0.95):.0f} ms",
                baseline,
                f"≤ {GOAL_MS} ms",
            ),
            Row(
                "… its ?format=json",
                f"p95 {percentile(timings['json'], 0.95):.0f} ms",
                baseline,
                f"≤ {GOAL_MS} ms",
            ),
            Row(
                "… its whole year",
                f"p95 {percentile(timings['year'], 0.95):.0f} ms",
                baseline,
                f"≤ {GOAL_MS} ms",
            ),
            Row(
                "the operators' page of every guild, 30 days",
                f"p95 {percentile(timings['all'], 0.95):.0f} ms",
                baseline,
                f"≤ {GOAL_MS} ms",
            ),
        ]
    )
    print(f"(filled in {filled:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
