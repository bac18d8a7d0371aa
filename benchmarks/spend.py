"""What the budget check costs a turn: two `runbot` processes (one guild's shard each) take 50
triggers at once (50 people, one in each channel), with no limits (the calls are only
counted) and, in the same run, with every limit on (tokens a day, US dollars a month and a
user's turns, none of them reached, the models priced). The two alternate over `ROUNDS`
rounds (off then on, then on then off, …; each switch followed by a warm-up burst), so a
drift of the machine over the run falls on both alike.

Run: ``DATABASE_URL=postgres://… .venv/bin/python -m benchmarks.spend`` (on a throwaway database
of that server; SQLite when ``DATABASE_URL`` names nothing, which serialises the two workers'
writes and says little).

Figures, each with limits on beside limits off (the first is the goal's):

1. **Trigger → reply** as the sandbox sees it (what a person gets): p50 and p95 over every
   round's turns, and each round's p95 difference (on minus off), which shows how far apart
   two bursts of the same kind fall. The fake model answers after 0.2 s, so about 25 turns of
   a worker are in flight together.
2. **The limits' own time per turn**, a diagnostic (`Turn.limits_ms`: the user's turns
   counted, each call reserved and settled, waits for calls in flight included). With limits
   off it is the accounting alone (settling each call into the counters and rollups).
3. **CPU per turn**, a diagnostic: the two workers' and PostgreSQL's processes, over the
   measured bursts.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.table import Row, emit, percentile
from benchmarks.throwaway import setup_django, teardown_django

CHANNELS = 25
ROUNDS = 20
RESAMPLES = 2000
EPOCH_MS = 1_704_067_200_000
GOAL_MS = 2.0
WAIT = 120.0
ROOT = Path(__file__).resolve().parents[1]


def _ids() -> tuple[list[int], list[list[int]], list[int]]:
    """The two guilds, each one's channels, and the people: one for each channel."""
    from chat.pipeline.snowflakes import snowflake_from_ms

    guilds = [snowflake_from_ms(EPOCH_MS + k, increment=1) for k in (0, 1)]
    channels = [
        [snowflake_from_ms(EPOCH_MS + 1000 * k + n, increment=2) for n in range(CHANNELS)]
        for k in (0, 1)
    ]
    people = [snowflake_from_ms(EPOCH_MS, increment=4000 + n) for n in range(2 * CHANNELS)]
    return guilds, channels, people


def _configuration(guilds: list[int]) -> dict:
    persona = {
        "name": "Tomori",
        "main": True,
        "system_prompt": "You are Tomori. You answer briefly.",
        "triggers": ["tomori"],
        "llm": {"max_output_tokens": 200, "context_window": 8000},
    }
    return {
        "version": 1,
        "guilds": [
            {"id": str(g), "name": f"Guild {k}", "personas": [persona]}
            for k, g in enumerate(guilds)
        ],
    }


def _limits(guilds: list[int], *, on: bool) -> None:
    """Every limit on, none reached, the model priced; or none at all (each save moves the
    guild's stamp, so the workers read it on their next batch)."""
    from personas.models import GuildConfig, ModelPrice

    ModelPrice.objects.update_or_create(
        model="gpt-4o-mini", defaults={"input": "0.15", "cached_input": "0.075", "output": "0.6"}
    )
    limits = {
        "tokens_per_day": 1_000_000_000,
        "usd_per_month": "1000000",
        "user_turns": {"count": 1_000, "per_seconds": 60},
        "notice": "",
    }
    for guild in GuildConfig.objects.filter(guild_id__in=guilds):
        guild.limits = limits if on else {}
        guild.save()


def _cpu_seconds(pids: list[int] | None = None) -> dict[int, float]:
    """User and system CPU seconds each process used so far (Linux ``/proc``); every
    PostgreSQL process of this machine when ``pids`` is None."""
    ticks = os.sysconf("SC_CLK_TCK")
    if pids is None:
        pids = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _comm(entry) == "postgres"
        ]
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended since
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return used


def _cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings, by process (one that started in between counts from
    nothing; one that ended in between is lost: the workers hold their connections)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _comm(entry: Path) -> str:
    try:
        return (entry / "comm").read_text().strip()
    except OSError:
        return ""


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def _runbot(shard: int, sandbox, llm, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "benchmark-only-secret-key",
        "DATABASE_URL": _database_url(),
        "DISCORD_TOKEN": sandbox.token,
        "DISCORD_API_BASE": sandbox.api_base,
        "DISCORD_GATEWAY_URL": sandbox.gateway_url,
        "LLM_BASE_URL": llm.base_url,
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "runbot", "--shard-ids", str(shard), "--shard-count", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def _settled(trigger_ids: list[int]) -> list[tuple[str, float | None]]:
    from chat.models import Turn

    return list(
        Turn.objects.filter(trigger_message_id__in=trigger_ids)
        .exclude(status__in=[Turn.Status.RUNNING, Turn.Status.DELIVERING])
        .values_list("status", "limits_ms")
    )


async def _burst(sandbox_state, channels, people, replies: dict[str, float], text: str):
    """Post one trigger in every channel at once, each by its own person; wait until every
    turn has ended; returns (each turn's limits_ms, each trigger's seconds to its reply)."""
    from asgiref.sync import sync_to_async

    posted: dict[str, float] = {}
    for channel_id, person in zip([c for group in channels for c in group], people, strict=True):
        message = sandbox_state.user_says(channel_id, person, text)
        posted[message["id"]] = time.perf_counter()
    ids = [int(i) for i in posted]
    deadline = time.monotonic() + WAIT
    while True:
        turns = await sync_to_async(_settled)(ids)
        if len(turns) == len(ids):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(turns)} of {len(ids)} turns ended within {WAIT} s")
        await asyncio.sleep(0.2)
    statuses = {status for status, _ in turns}
    if statuses != {"replied"}:
        raise RuntimeError(f"every turn should reply: {statuses}")
    latencies = [replies[i] - posted[i] for i in posted if i in replies]
    return [ms or 0.0 for _, ms in turns], latencies


@dataclass(frozen=True)
class Burst:
    """One measured burst: its turns' limits_ms and trigger → reply seconds, and the CPU
    seconds the workers and PostgreSQL used over it."""

    limits_on: bool
    limits_ms: list[float]
    latencies: list[float]
    worker_cpu: float
    database_cpu: float


async def _run(directory: str) -> list[Burst]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_BOT_ID
    from chat.sandbox.state import Sandbox
    from personas.services import config_import

    guilds, channels, people = _ids()
    await sync_to_async(config_import)(data=_configuration(guilds))
    world = Sandbox(token="bench-spend-token", bot_name="Tomori", bot_user_id=DEMO_BOT_ID)
    for n, person in enumerate(people):
        world.add_user(f"member{n}", user_id=person, global_name=f"Member {n}")
    for k, guild_id in enumerate(guilds):
        world.add_guild(f"Guild {k}", guild_id=guild_id)
        for person in people[k * CHANNELS : (k + 1) * CHANNELS]:
            world.add_member(guild_id, person)
        for n, channel_id in enumerate(channels[k]):
            world.add_text_channel(guild_id, f"room-{n}", channel_id=channel_id)
    replies: dict[str, float] = {}

    def heard(event) -> None:
        reference = (event.data.get("message_reference") or {}).get("message_id")
        if event.name == "MESSAGE_CREATE" and reference and reference not in replies:
            replies[reference] = time.perf_counter()

    world.subscribe(heard)
    llm = FakeLLMServer(
        responder=lambda body: Reply("noted.", prompt_tokens=100, completion_tokens=20),
        pace=StreamPace(first_token_s=0.2),
    )
    results: list[Burst] = []
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with SandboxServer(world, gateway=gateway) as server, llm:
        workers = [_runbot(k, server, llm, Path(directory) / f"worker{k}.log") for k in (0, 1)]
        try:
            deadline = time.monotonic() + WAIT
            while len([s for s in server.sessions() if s["connected"]]) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers did not connect")
                await asyncio.sleep(0.1)
            pids = [worker.pid for worker in workers]
            for n in range(ROUNDS):
                for on in (False, True) if n % 2 == 0 else (True, False):
                    await sync_to_async(_limits)(guilds, on=on)
                    await _burst(world, channels, people, replies, "tomori, warming up")
                    workers_cpu, database_cpu = _cpu_seconds(pids), _cpu_seconds()
                    limits_ms, latencies = await _burst(
                        world, channels, people, replies, "tomori, question"
                    )
                    used = (
                        _cpu_used(workers_cpu, _cpu_seconds(pids)),
                        _cpu_used(database_cpu, _cpu_seconds()),
                    )
                    results.append(Burst(on, limits_ms, latencies, *used))
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=30)
            await sync_to_async(connections.close_all)()
    return results


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-spend-") as directory:
        database = setup_django(directory, prefix="bench_spend")
        from django.db import connection

        vendor = connection.vendor
        try:
            results = asyncio.run(_run(directory))
        finally:
            teardown_django(database)
    emit(_rows(results, vendor))


def _interval(rounds: list[tuple[Burst, Burst]]) -> tuple[float, float]:
    """A 95 % interval of the pooled p95 difference (on minus off, ms): the rounds resampled
    with replacement (a round's two bursts ran side by side, so they are drawn together)."""
    draw = random.Random(0)
    differences = []
    for _ in range(RESAMPLES):
        chosen = draw.choices(rounds, k=len(rounds))
        on = [value for burst, _ in chosen for value in burst.latencies]
        off = [value for _, burst in chosen for value in burst.latencies]
        differences.append((percentile(on, 0.95) - percentile(off, 0.95)) * 1000)
    differences.sort()
    return differences[RESAMPLES * 25 // 1000], differences[RESAMPLES * 975 // 1000 - 1]


def _rows(bursts: list[Burst], vendor: str) -> list[Row]:
    on = [b for b in bursts if b.limits_on]
    off = [b for b in bursts if not b.limits_on]

    def pooled(chosen: list[Burst], figure: str) -> list[float]:
        return [value for burst in chosen for value in getattr(burst, figure)]

    reply_on, reply_off = pooled(on, "latencies"), pooled(off, "latencies")
    limits_on, limits_off = pooled(on, "limits_ms"), pooled(off, "limits_ms")
    rounds = [  # each round's p95 difference, on minus off, in ms
        (percentile(a.latencies, 0.95) - percentile(b.latencies, 0.95)) * 1000
        for a, b in zip(on, off, strict=True)
    ]
    added_ms = (percentile(reply_on, 0.95) - percentile(reply_off, 0.95)) * 1000
    per_round = ", ".join(f"{d:+.0f}" for d in rounds)
    low, high = _interval(list(zip(on, off, strict=True)))

    def ms(values: list[float], scale: float = 1000) -> str:
        return (
            f"{statistics.median(values) * scale:.0f} / {percentile(values, 0.95) * scale:.0f} ms"
        )

    def cpu_ms(chosen: list[Burst], figure: str) -> float:
        turns = sum(len(burst.latencies) for burst in chosen)
        return sum(getattr(burst, figure) for burst in chosen) * 1000 / turns

    return [
        Row(
            f"trigger → reply as the sandbox sees it, 2 workers, 50 concurrent triggers "
            f"({vendor}), {len(on)} bursts of each kind, p50 / p95",
            f"{ms(reply_on)} with every limit on (p95 adds {added_ms:+.0f} ms, 95 % interval "
            f"{low:+.0f} to {high:+.0f} ms; each round's p95: {per_round} ms)",
            f"{ms(reply_off)} with none",
            f"adds ≤ {GOAL_MS:g} ms p95",
        ),
        Row(
            "… the limits' own time per turn (diagnostic), p50 / p95",
            f"{statistics.median(limits_on):.2f} / {percentile(limits_on, 0.95):.2f} ms "
            "with every limit on",
            f"{statistics.median(limits_off):.2f} / {percentile(limits_off, 0.95):.2f} ms "
            "with none (counting alone)",
        ),
        Row(
            "… CPU per turn (diagnostic): the two workers, PostgreSQL",
            f"{cpu_ms(on, 'worker_cpu'):.1f} ms, {cpu_ms(on, 'database_cpu'):.1f} ms "
            "with every limit on",
            f"{cpu_ms(off, 'worker_cpu'):.1f} ms, {cpu_ms(off, 'database_cpu'):.1f} ms with none",
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
