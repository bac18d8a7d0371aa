"""What one worker can carry: messages ingested per second, turns per second with a model of
realistic latency over several channels, and the memory 1,000 guilds of typical size cost.

Run: ``.venv/bin/python -m benchmarks.capacity`` (``make bench`` runs it).

The worker is built as ``runbot`` builds it (`chat.worker.build_client`) on a throwaway database
of the configured kind (``DATABASE_URL``: PostgreSQL in CI) and the Redis channel layer; the
sandbox and the fake model server run in a process of their own (their work is not the
worker's), as in `benchmarks.gateway_ingest`.

1. **Messages per second**: ``BURST`` messages posted as fast as the sandbox can send them,
   round-robin over 32 reactive channels; the rate is messages over the time from the first
   dispatch to the last message in its unread pool. Beside it, the sandbox's own sending rate.
2. **Turns per second**: ``TRIGGERS_PER_CHANNEL`` triggers posted at once in each of the 32
   channels; the model streams each reply (``REPLY_WORDS`` words, the first after
   ``FIRST_TOKEN_S``, then ``WORDS_PER_S`` a second, about 1.3 s a call, as a hosted model
   answers a short reply). Turns of one channel run one after another (a channel's turns share
   its window), so the model's latency bounds the rate: channels ÷ seconds a call. The worker's
   CPU time per turn says how many turns a core carries once the model is not the limit.
3. **Memory per 1,000 guilds**: a fresh worker process connects to a sandbox of 1,000 guilds of
   typical size (``TYPICAL_CHANNELS`` text channels and ``TYPICAL_MEMBERS`` members each, the
   members chunked at start as the bot's members intent makes discord.py do; 20,000 people,
   so guilds share some members; over ``RSS_SHARDS`` shards, see there), waits until every
   guild is in its cache, and reports its
   resident memory; beside it, the same worker connected to one such guild. Message traffic
   adds memory bounded apart from the guild count: the gateway's message cache (5,000
   messages) and the history windows (`benchmarks.memory`'s rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.gateway_ingest import (
    LINES,
    TOKEN,
    Stamps,
    _stages_timed,
    _until,
    bench_config,
    bench_world,
)
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

GUILDS = 8
CHANNELS_PER_GUILD = 4
BURST = 5000
TRIGGERS_PER_CHANNEL = 5
REPLY_WORDS = 40
FIRST_TOKEN_S = 0.5
WORDS_PER_S = 50.0
RSS_GUILDS = 1000
TYPICAL_CHANNELS = 10
TYPICAL_MEMBERS = 50
RSS_PEOPLE = 20_000
RSS_SHARDS = 16
"""Shards for the 1,000 guilds: discord.py asks for each guild's members at start, and Discord
takes 120 gateway commands a minute per shard, so one shard of 1,000 guilds would chunk for
about 8 minutes (the memory is the same: the guilds are)."""
WAIT = 300.0


# -- the world process: the sandbox and the fake model ---------------------------------------


def _world_process(pipe: Connection, guilds: int, channels: int, members: int | None) -> None:
    asyncio.run(_serve_world(pipe, guilds, channels, members))


async def _serve_world(pipe: Connection, guilds: int, channels: int, members: int | None):
    """Serve the world and the fake model; act on the parent's commands until ``stop``. A world
    of many guilds recommends ``RSS_SHARDS`` shards and lets them IDENTIFY together, as
    `GET /gateway/bot` does for a large bot."""
    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.sandbox import GatewaySettings, SandboxServer

    people = RSS_PEOPLE if members else 12
    sandbox, channel_ids, users = bench_world(guilds, channels, people, members)
    reply = Reply(" ".join(["fine"] * REPLY_WORDS))
    pace = StreamPace(first_token_s=FIRST_TOKEN_S, words_per_s=WORDS_PER_S)
    shards = RSS_SHARDS if guilds > 1 and members else 1
    gateway = GatewaySettings(max_concurrency=shards)
    async with (
        SandboxServer(sandbox, shards=shards, gateway=gateway) as server,
        FakeLLMServer(responder=lambda body: reply, pace=pace) as model,
    ):
        pipe.send(
            {
                "api_base": server.api_base,
                "gateway_url": server.gateway_url,
                "llm": model.base_url,
                "guilds": sandbox.guild_ids,
                "channels": channel_ids,
            }
        )
        while (command := await asyncio.to_thread(pipe.recv)) != "stop":
            if command == "burst":
                pipe.send(await _burst(sandbox, channel_ids, users))
            elif command == "triggers":
                pipe.send(sum(server.request_counts.values()))
                for n in range(TRIGGERS_PER_CHANNEL):
                    for _, channel_id in channel_ids:
                        sandbox.user_says(channel_id, users[n % len(users)], f"tomori, and {n}?")
                pipe.send(time.monotonic())
            elif command == "model":
                times = [words[-1] - words[0] for words in model.word_times.values() if words]
                pipe.send(
                    (
                        len(model.chat_bodies),
                        statistics.median(times) + FIRST_TOKEN_S,
                        sum(server.request_counts.values()),
                    )
                )


async def _burst(sandbox, channels: list[tuple[int, int]], people: list[int]):
    """``BURST`` messages as fast as the sandbox sends them (yielding every 100, so its socket
    writers run); returns ``{message id: sent}`` and the sending rate."""
    sent: dict[int, float] = {}
    started = time.monotonic()
    for n in range(BURST):
        if n % 100 == 0:
            await asyncio.sleep(0)
        _, channel_id = channels[n % len(channels)]
        message = sandbox.user_says(channel_id, people[n % len(people)], LINES[n % len(LINES)])
        sent[int(message["id"])] = time.monotonic()
    return sent, BURST / (time.monotonic() - started)


def _start_world(guilds: int, channels: int, members: int | None = None):
    spawn = multiprocessing.get_context("spawn")
    pipe, child = spawn.Pipe()
    process = spawn.Process(
        target=_world_process, args=(child, guilds, channels, members), name="world"
    )
    process.start()
    return process, pipe, pipe.recv()


def _stop_world(process, pipe: Connection) -> None:
    with contextlib.suppress(OSError):
        pipe.send("stop")
    process.join(20)
    if process.is_alive():
        process.terminate()


# -- messages and turns per second (the worker in this process) ------------------------------


def _worker(world: dict[str, Any]):
    from chat.llm.attempts import AttemptRunner
    from chat.llm.openai_compat import OpenAICompatibleClient
    from chat.worker import WorkerConfig, build_client

    config = WorkerConfig(token=TOKEN, api_base=world["api_base"], gateway_url=world["gateway_url"])
    llm = OpenAICompatibleClient(base_url=world["llm"], api_key="-")
    return build_client(config, llm=llm, runner=AttemptRunner(client=llm, stream=True))


async def _throughput(pipe: Connection, world: dict[str, Any]) -> dict[str, float]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.models import Turn
    from personas.services import config_import

    await sync_to_async(config_import)(data=bench_config(world["guilds"], world["channels"]))
    client = _worker(world)
    runner = asyncio.create_task(client.start(TOKEN))
    stamps = Stamps({}, {}, {}, {})
    try:
        await _until(lambda: client.scheduler is not None and client.is_ready())
        with _stages_timed(client, stamps):
            pipe.send("burst")
            sent, sending_rate = await asyncio.to_thread(pipe.recv)
            await _until(lambda: len(stamps.pooled) >= BURST, WAIT)
        ingest_rate = BURST / (max(stamps.pooled.values()) - min(sent.values()))
        await asyncio.wait_for(client.scheduler.idle(), WAIT)

        turns = TRIGGERS_PER_CHANNEL * len(world["channels"])
        replied = Turn.objects.filter(status=Turn.Status.REPLIED).acount
        cpu = time.process_time()
        pipe.send("triggers")
        requests_before = await asyncio.to_thread(pipe.recv)
        posted = await asyncio.to_thread(pipe.recv)
        deadline = time.monotonic() + WAIT
        while await replied() < turns:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{await replied()} of {turns} turns replied")
            await asyncio.sleep(0.05)
        seconds = time.monotonic() - posted
        cpu = time.process_time() - cpu
        pipe.send("model")
        calls, call_seconds, requests_after = await asyncio.to_thread(pipe.recv)
    finally:
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)
        await sync_to_async(connections.close_all)()
    return {
        "ingest_rate": ingest_rate,
        "sending_rate": sending_rate,
        "turns": turns,
        "turn_rate": turns / seconds,
        "ceiling": len(world["channels"]) / call_seconds,
        "call_seconds": call_seconds,
        "calls": calls,
        "cpu_per_turn": cpu / turns,
        "rest_per_turn": (requests_after - requests_before) / turns,
    }


# -- memory per 1,000 guilds (a fresh worker process per world) ------------------------------


def _rss_process(pipe: Connection, world: dict[str, Any], database: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "botproject.settings"
    import django
    from django.db import connection

    django.setup()
    connection.settings_dict["NAME"] = database
    pipe.send(asyncio.run(_rss_after_start(world)))


async def _rss_after_start(world: dict[str, Any]) -> float:
    """MB resident once every guild of the world is cached with its members."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    client = _worker(world)
    runner = asyncio.create_task(client.start(TOKEN))
    try:
        await _until(lambda: client.scheduler is not None and client.is_ready(), WAIT)
        expected = len(world["guilds"])
        await _until(lambda: len(client.guilds) == expected, WAIT)
        await _until(lambda: all(guild.chunked for guild in client.guilds), WAIT)
        gc.collect()
        return _rss_mb()
    finally:
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)
        await sync_to_async(connections.close_all)()


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _worker_rss(guilds: int, database: str) -> float:
    process, pipe, world = _start_world(guilds, TYPICAL_CHANNELS, TYPICAL_MEMBERS)
    try:
        spawn = multiprocessing.get_context("spawn")
        results, child = spawn.Pipe()
        worker = spawn.Process(target=_rss_process, args=(child, world, database))
        worker.start()
        rss = results.recv()
        worker.join(30)
        return rss
    finally:
        _stop_world(process, pipe)


def measure() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-capacity-") as directory:
        database = setup_django(directory, prefix="bench_capacity", in_memory_layer=False)
        try:
            # Memory first, on the empty database (no configured guild the world lacks).
            rss_one = _worker_rss(1, database)
            rss_many = _worker_rss(RSS_GUILDS, database)
            process, pipe, world = _start_world(GUILDS, CHANNELS_PER_GUILD)
            try:
                figures = asyncio.run(_throughput(pipe, world))
            finally:
                _stop_world(process, pipe)
            figures.update(load=os.getloadavg()[0], rss_one=rss_one, rss_many=rss_many)
        finally:
            teardown_django(database)
    return figures


def main() -> None:
    figures = measure()
    channels = GUILDS * CHANNELS_PER_GUILD
    per_1000 = (figures["rss_many"] - figures["rss_one"]) * 1000 / (RSS_GUILDS - 1)
    load = f"load average {figures['load']:.1f}"
    emit(
        [
            Row(
                f"worker ingest rate, {BURST:,} messages sent at once over {channels} channels "
                "(sandbox → unread pools)",
                f"{figures['ingest_rate']:,.0f} msg/s ({load})",
                f"the sandbox sending them: {figures['sending_rate']:,.0f} msg/s",
            ),
            Row(
                f"worker turns, {figures['turns']} triggers at once over {channels} channels, "
                f"streamed model replies of {REPLY_WORDS} words "
                f"({figures['call_seconds']:.2f} s a call)",
                f"{figures['turn_rate']:.1f} turns/s, worker CPU "
                f"{figures['cpu_per_turn'] * 1000:.0f} ms a turn "
                f"(≈ {1 / figures['cpu_per_turn']:.0f} turns/s a core), "
                f"{figures['rest_per_turn']:.1f} Discord REST requests a turn",
                f"model-bound ceiling ({channels} channels ÷ {figures['call_seconds']:.2f} s): "
                f"{figures['ceiling']:.1f} turns/s",
            ),
            Row(
                f"worker memory per {RSS_GUILDS:,} guilds of typical size ({TYPICAL_CHANNELS} "
                f"channels, {TYPICAL_MEMBERS} members each, members cached)",
                f"{per_1000:.0f} MB ({RSS_GUILDS:,} guilds: {figures['rss_many']:.0f} MB)",
                f"1 guild: {figures['rss_one']:.0f} MB",
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
