"""What rights per guild cost a dashboard request, and the overview with many guilds and turns.

Run: ``DATABASE_URL=postgres://… .venv/bin/python -m benchmarks.tenancy`` (any database works;
the figures in docs/benchmarks.md are PostgreSQL's).

The database (a throwaway one, of the configured kind) holds 1,000 configured guilds with two
personas and three channels each, and 1,000,000 turns spread over them and over 30 days (2 %
failed). The newest five turns of each guild carry a prompt record of ordinary size (60 dialogue
items and the request), since the overview shows them. One person logged in with Discord holds
a right in 100 of the guilds; one operator sees all 1,000.

Measured, in this order:

- **the rights check**, in process: reading the person's rights (`guild_rights`) and the guild
  lookup through them (`guild_access`), p50 and p95 over 2,000 checks, beside the check before
  rights per guild (the ``moderators`` group and an unscoped lookup);
- **a guild's page** through the real processes (daphne serving HTTP on this database): the
  person's ``/guilds/<id>/`` beside the operator's, same run;
- **the overview** (``/``) through daphne: the person's (their 100 guilds) beside the
  operator's, which is today's unscoped overview of every guild; then the person's again
  with a new turn in ten of their guilds before each request (their cards are rendered
  anew; the others are kept).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import httpx

from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

GUILDS = int(os.environ.get("BENCH_TENANCY_GUILDS", "1000"))
TURNS = int(os.environ.get("BENCH_TENANCY_TURNS", "1000000"))
PERSON_GUILDS = 100
CHECKS = 2000
PAGE_REQUESTS = 60
OVERVIEW_REQUESTS = 40
OPERATOR_OVERVIEW_REQUESTS = 10
FIRST_GUILD = 1_100_000_000_000_000_000
FIRST_CHANNEL = 1_200_000_000_000_000_000
PERSON = 1_300_000_000_000_000_777
CHURN = 10
RIGHTS_GOAL_MS = 2.0
OVERVIEW_GOAL_MS = 300.0


def _guild_id(n: int) -> int:
    return FIRST_GUILD + n


def _channel_id(n: int, k: int) -> int:
    return FIRST_CHANNEL + n * 10 + k


def _prompt_record() -> dict:
    """A turn's prompt record of ordinary size: 60 dialogue items and the request."""
    items = [
        {
            "tag": "dialogue_history",
            "role": "user",
            "text": f"Member {i % 7}: [ref_{i}] " + "words of an ordinary chat line " * 4,
            "tokens": 40,
            "source_ids": [str(1_400_000_000_000_000_000 + i)],
        }
        for i in range(60)
    ]
    request = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "You are Tomori. " * 40}]
        + [{"role": "user", "content": item["text"]} for item in items],
    }
    return {"context_items": items, "request": request}


RECORD = _prompt_record()


def _populate() -> tuple[list[int], int, int]:
    """The guilds, personas, channels and turns; returns the person's guild ids, the person's
    user id and the operator's."""
    from allauth.socialaccount.models import SocialAccount
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from accounts.models import GuildRight, GuildRole, RightSource
    from chat.models import Turn
    from personas.models import ChannelConfig, GuildConfig, Persona

    with transaction.atomic():
        guilds = GuildConfig.objects.bulk_create(
            GuildConfig(guild_id=_guild_id(n), name=f"Guild {n:04d}") for n in range(GUILDS)
        )
        Persona.objects.bulk_create(
            Persona(guild=g, name=name, is_main=name == "Tomori")
            for g in guilds
            for name in ("Tomori", "Anon")
        )
        ChannelConfig.objects.bulk_create(
            ChannelConfig(guild=g, channel_id=_channel_id(n, k))
            for n, g in enumerate(guilds)
            for k in range(3)
        )
    empty = Turn._meta.get_field("prompt_record").get_prep_value({})
    started = time.perf_counter()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO chat_turn (
                    guild_id, channel_id, persona_name, trigger_message_id, trigger_author_id,
                    reason, reason_detail, status, prompt_record, truncation, "window",
                    tool_allowlist, recalled, prefill, attempts, reply_text,
                    delivered_message_ids, warnings, lorebook, error, created_at
                )
                SELECT %(guild)s + (i %% %(guilds)s),
                       %(channel)s + (i %% %(guilds)s) * 10 + (i %% 3),
                       'Tomori', 1400000000000000000 + i, 1500000000000000000 + (i %% 50),
                       'mention', '{}', CASE WHEN i %% 50 = 0 THEN 'failed' ELSE 'replied' END,
                       %(empty)s, '{}', '{}', '[]', '[]', '', '[]', 'a reply', '[]', '[]', '{}',
                       CASE WHEN i %% 50 = 0 THEN 'the model did not answer' ELSE '' END,
                       now() - (i * interval '2592 milliseconds')
                FROM generate_series(1, %(turns)s) AS i
                """,
                {
                    "guild": FIRST_GUILD,
                    "channel": FIRST_CHANNEL,
                    "guilds": GUILDS,
                    "empty": empty,
                    "turns": TURNS,
                },
            )
            cursor.execute("ANALYZE chat_turn")
    else:
        now = dt.datetime.now(dt.UTC)
        batch = []
        for i in range(1, TURNS + 1):
            batch.append(
                Turn(
                    guild_id=FIRST_GUILD + i % GUILDS,
                    channel_id=FIRST_CHANNEL + (i % GUILDS) * 10 + i % 3,
                    persona_name="Tomori",
                    trigger_message_id=1_400_000_000_000_000_000 + i,
                    reason="mention",
                    status="failed" if i % 50 == 0 else "replied",
                    reply_text="a reply",
                    error="the model did not answer" if i % 50 == 0 else "",
                )
            )
            if len(batch) == 10_000:
                Turn.objects.bulk_create(batch)
                batch = []
        Turn.objects.bulk_create(batch)
        Turn.objects.update(created_at=now)
    print(f"  {TURNS:,} turns written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    person_guilds = [_guild_id(n) for n in range(0, GUILDS, GUILDS // PERSON_GUILDS)]
    for guild_id in person_guilds:
        newest = Turn.objects.filter(guild_id=guild_id).order_by("-created_at")[:5]
        for turn in newest:
            turn.prompt_record = RECORD
            turn.save(update_fields=["prompt_record"])
    person = User.objects.create_user(f"discord-{PERSON}", first_name="Bench Person")
    SocialAccount.objects.create(user=person, provider="discord", uid=str(PERSON))
    GuildRight.objects.bulk_create(
        GuildRight(
            user=person,
            guild_id=g,
            role=GuildRole.ADMIN,
            permissions=1 << 5,
            source=RightSource.LOGIN,
        )
        for g in person_guilds
    )
    operator = User.objects.create_user("bench-operator", is_staff=True)
    return person_guilds, person.pk, operator.pk


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _timed(work: Callable[[], object], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _rights_check(person_id: int, guild_id: int) -> tuple[list[float], list[float]]:
    """Milliseconds per check: the rights check of a request now, and the one before rights
    per guild (the ``moderators`` group, an unscoped guild lookup)."""
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from accounts.selectors import MODERATORS_GROUP
    from dashboard.access import guild_access
    from personas.models import GuildConfig

    user = User.objects.get(pk=person_id)

    def now() -> None:
        request = HttpRequest()
        request.user = user
        guild_access(request, guild_id)

    def before() -> None:
        user.groups.filter(name=MODERATORS_GROUP).exists()
        GuildConfig.objects.get(guild_id=guild_id)

    _timed(now, 50)
    _timed(before, 50)
    return _timed(now, CHECKS), _timed(before, CHECKS)


def _session(user_id: int) -> str:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(pk=user_id))
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@contextlib.contextmanager
def _daphne() -> Iterator[str]:
    """daphne serving the dashboard on the benchmark's database; yields its base URL."""
    from django.db import connection

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    database = connection.settings_dict
    if connection.vendor == "postgresql":
        url = (
            f"postgres://{database['USER']}:{database['PASSWORD'] or ''}@{database['HOST']}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        )
    else:
        url = f"sqlite:///{database['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "benchmark-only-secret-key"),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "botproject.asgi:application",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("daphne did not start")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)


def _http(
    base: str, session: str, path: str, times: int, before_each: Callable[[], None] | None = None
) -> list[float]:
    """Milliseconds of each GET of ``path`` (after three unmeasured ones); ``before_each`` runs
    before each, unmeasured."""
    from django.conf import settings

    cookies = {settings.SESSION_COOKIE_NAME: session}
    with httpx.Client(base_url=base, cookies=cookies, timeout=60) as http:
        for _ in range(3):
            assert http.get(path).status_code == 200, path
        samples = []
        for _ in range(times):
            if before_each is not None:
                before_each()
            started = time.perf_counter()
            assert http.get(path).status_code == 200, path
            samples.append((time.perf_counter() - started) * 1000)
        return samples


def _turns_arriving(guild_ids: list[int]) -> Callable[[], None]:
    """A new finished turn in ``CHURN`` of ``guild_ids`` (the next ones each time), as an
    active community's would be between two looks at the overview."""
    from chat.models import Turn

    turn = 0

    def arrive() -> None:
        nonlocal turn
        batch = []
        for _ in range(CHURN):
            guild_id = guild_ids[turn % len(guild_ids)]
            n = guild_id - FIRST_GUILD
            batch.append(
                Turn(
                    guild_id=guild_id,
                    channel_id=_channel_id(n, 0),
                    persona_name="Tomori",
                    reason="mention",
                    status="replied",
                    prompt_record=RECORD,
                    trigger_message_id=1_400_000_000_000_000_000,
                )
            )
            turn += 1
        Turn.objects.bulk_create(batch)

    return arrive


def _fmt(samples: list[float]) -> str:
    p50, p95 = _percentiles(samples)
    return f"p50 {p50:.2f} ms, p95 {p95:.2f} ms"


def _calibration() -> float:
    """Milliseconds two million additions take in this process now: how much of a CPU the
    machine's other work leaves (about 60 ms on an idle core of this project's machine)."""
    started = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    return (time.perf_counter() - started) * 1000


def run() -> list[Row]:
    calibration_before = _calibration()
    person_guilds, person_id, operator_id = _populate()
    guild_id = person_guilds[len(person_guilds) // 2]
    checks, before = _rights_check(person_id, guild_id)
    person, operator = _session(person_id), _session(operator_id)
    from django.db import connections

    connections.close_all()
    with _daphne() as base:
        page = f"/guilds/{guild_id}/"
        person_page = _http(base, person, page, PAGE_REQUESTS)
        operator_page = _http(base, operator, page, PAGE_REQUESTS)
        person_overview = _http(base, person, "/", OVERVIEW_REQUESTS)
        busy_overview = _http(
            base, person, "/", OVERVIEW_REQUESTS, before_each=_turns_arriving(person_guilds)
        )
        operator_overview = _http(base, operator, "/", OPERATOR_OVERVIEW_REQUESTS)
    calibration_after = _calibration()
    scale = f"{GUILDS:,} guilds, {TURNS:,} turns, rights in {len(person_guilds)}"
    added50 = _percentiles(checks)[0] - _percentiles(before)[0]
    added95 = _percentiles(checks)[1] - _percentiles(before)[1]
    return [
        Row(
            "the machine: 2,000,000 additions in pure Python, before and after (about 60 ms idle)",
            f"{calibration_before:.0f} ms, {calibration_after:.0f} ms",
        ),
        Row(
            f"rights check per dashboard request (the person's rights, then the guild; {scale})",
            f"{_fmt(checks)}; added: p50 {added50:+.2f} ms, p95 {added95:+.2f} ms",
            f"before rights per guild (group, unscoped lookup): {_fmt(before)}",
            f"≤ {RIGHTS_GOAL_MS:g} ms p95 added",
        ),
        Row(
            "a guild's page through daphne, a person with rights in 100 guilds",
            _fmt(person_page),
            f"an operator: {_fmt(operator_page)}",
            "—",
        ),
        Row(
            f"the overview through daphne, the person's 100 guilds ({scale})",
            _fmt(person_overview),
            f"unscoped (an operator's, all {GUILDS:,} guilds): {_fmt(operator_overview)}",
            f"≤ {OVERVIEW_GOAL_MS:g} ms p95",
        ),
        Row(
            f"the same, a new turn in {CHURN} of the person's guilds before each look",
            _fmt(busy_overview),
            f"nothing new: {_fmt(person_overview)}",
            f"≤ {OVERVIEW_GOAL_MS:g} ms p95",
        ),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        name = setup_django(directory, prefix="bench_tenancy")
        try:
            rows = run()
        finally:
            teardown_django(name)
    emit(rows)


if __name__ == "__main__":
    main()
