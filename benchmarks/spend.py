"""What the budget check costs a turn: two `runbot` processes (one guild's shard each) take 50
triggers at once, first with no limits (the calls are only counted), then, in the same run, with
every limit on (tokens a day, US dollars a month and a user's turns, none of them reached, the
models priced).

Run: ``DATABASE_URL=postgres://… .venv/bin/python -m benchmarks.spend`` (on a throwaway database
of that server; SQLite when ``DATABASE_URL`` names nothing, which serialises the two workers'
writes and says little).

Figures, each with limits on beside limits off (the first is the goal's):

1. **Trigger → reply** as the sandbox sees it (what a person gets): p50 and p95. The fake
   model answers after 0.2 s, so about 25 turns of a worker are in flight together.
2. **The limits' own time per turn**, a diagnostic beside it (`Turn.limits_ms`: the user's
   turns counted, each call reserved and settled, waits for calls in flight included): p50
   and p95 over the 50 turns. With limits off it is the accounting alone (settling each call
   into the counters and rollups).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.table import Row, emit, percentile
from benchmarks.throwaway import setup_django, teardown_django

CHANNELS = 25
EPOCH_MS = 1_704_067_200_000
GOAL_MS = 2.0
WAIT = 120.0
ROOT = Path(__file__).resolve().parents[1]


def _ids() -> tuple[list[int], list[list[int]], int]:
    from chat.pipeline.snowflakes import snowflake_from_ms

    guilds = [snowflake_from_ms(EPOCH_MS + k, increment=1) for k in (0, 1)]
    channels = [
        [snowflake_from_ms(EPOCH_MS + 1000 * k + n, increment=2) for n in range(CHANNELS)]
        for k in (0, 1)
    ]
    return guilds, channels, snowflake_from_ms(EPOCH_MS, increment=4000)


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


def _limits_on(guilds: list[int]) -> None:
    """Every limit on, none reached; the model priced (each save moves the guild's stamp, so
    the workers read it on their next batch)."""
    from personas.models import GuildConfig, ModelPrice

    ModelPrice.objects.update_or_create(
        model="gpt-4o-mini", defaults={"input": "0.15", "cached_input": "0.075", "output": "0.6"}
    )
    for guild in GuildConfig.objects.filter(guild_id__in=guilds):
        guild.limits = {
            "tokens_per_day": 1_000_000_000,
            "usd_per_month": "1000000",
            "user_turns": {"count": 10_000, "per_seconds": 60},
            "notice": "",
        }
        guild.save()


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


async def _burst(sandbox_state, channels, alice, replies: dict[str, float], text: str):
    """Post one trigger in every channel at once; wait until every turn has ended; returns
    (each turn's limits_ms, each trigger's seconds to its reply)."""
    from asgiref.sync import sync_to_async

    posted: dict[str, float] = {}
    for channel_id in [c for group in channels for c in group]:
        message = sandbox_state.user_says(channel_id, alice, text)
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


async def _run(directory: str) -> dict[str, tuple[list[float], list[float]]]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_BOT_ID
    from chat.sandbox.state import Sandbox
    from personas.services import config_import

    guilds, channels, alice = _ids()
    await sync_to_async(config_import)(data=_configuration(guilds))
    world = Sandbox(token="bench-spend-token", bot_name="Tomori", bot_user_id=DEMO_BOT_ID)
    world.add_user("alice", user_id=alice, global_name="Alice")
    for k, guild_id in enumerate(guilds):
        world.add_guild(f"Guild {k}", guild_id=guild_id)
        world.add_member(guild_id, alice)
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
    results = {}
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with SandboxServer(world, gateway=gateway) as server, llm:
        workers = [_runbot(k, server, llm, Path(directory) / f"worker{k}.log") for k in (0, 1)]
        try:
            deadline = time.monotonic() + WAIT
            while len([s for s in server.sessions() if s["connected"]]) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers did not connect")
                await asyncio.sleep(0.1)
            await _burst(world, channels, alice, replies, "tomori, warming up")
            results["off"] = await _burst(world, channels, alice, replies, "tomori, question")
            await sync_to_async(_limits_on)(guilds)
            await _burst(world, channels, alice, replies, "tomori, warming up again")
            results["on"] = await _burst(world, channels, alice, replies, "tomori, question")
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
    (limits_on, reply_on), (limits_off, reply_off) = results["on"], results["off"]
    on_p95, off_p95 = percentile(limits_on, 0.95), percentile(limits_off, 0.95)
    reply_on_p95, reply_off_p95 = percentile(reply_on, 0.95), percentile(reply_off, 0.95)
    added_ms = (reply_on_p95 - reply_off_p95) * 1000
    emit(
        [
            Row(
                f"trigger → reply as the sandbox sees it, 2 workers, 50 concurrent triggers "
                f"({vendor}), p50 / p95",
                f"{statistics.median(reply_on) * 1000:.0f} / {reply_on_p95 * 1000:.0f} ms "
                f"with every limit on (p95 adds {added_ms:.0f} ms)",
                f"{statistics.median(reply_off) * 1000:.0f} / {reply_off_p95 * 1000:.0f} ms "
                "with none",
                f"adds ≤ {GOAL_MS:g} ms p95",
            ),
            Row(
                "… the limits' own time per turn (diagnostic), p50 / p95",
                f"{statistics.median(limits_on):.2f} / {on_p95:.2f} ms with every "
                f"limit on (p95 adds {on_p95 - off_p95:.2f} ms)",
                f"{statistics.median(limits_off):.2f} / {off_p95:.2f} ms with none "
                "(counting alone)",
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
