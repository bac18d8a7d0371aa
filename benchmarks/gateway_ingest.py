"""Ingest through the websocket: the sandbox's gateway sends MESSAGE_CREATE at a paced rate,
the real worker takes every message through discord.py, the intake, the persisted event queue
and into the unread pools; a bare discord.py client receives the same stream in the same run.

Run: ``.venv/bin/python -m benchmarks.gateway_ingest`` (``make bench`` runs it).

Three processes, so that none of them runs on another's event loop: the sandbox (serving the
gateway and pacing the messages), a bare ``discord.Client`` (the baseline: what discord.py
alone costs a message), and this one, holding the worker built as ``runbot`` builds it
(`chat.worker.build_client`) on a throwaway database of the configured kind (``DATABASE_URL``:
PostgreSQL in CI) and the Redis channel layer (``REDIS_URL``), with the bench world's guilds
configured (reactive channels, so the channel loops take every message out of the pools as
they would; no message names a persona, so no model is asked).

Each message is stamped, on the one monotonic clock all three processes read:

- ``sent``: the sandbox dispatched it (queued on both sessions' sockets);
- ``received``: discord.py called ``on_message`` (the frame read, decoded and parsed);
- ``taken``: the worker converted it and handed it to `Intake.put`;
- ``queued``: the intake's `event_queue.event_ingest_many` call holding it returned (its row
  committed to the event queue);
- ``pooled``: it was committed to its channel's unread pool: by the same call (the worker moves
  its own shards' messages with their queue rows), or by an `event_queue.event_queue_consume`
  call (a row left ready).

The stages are timed by wrapping those calls on the running worker, as `benchmarks.ingest` does.
The headline is every message from the first one on: the first ``WARMUP`` (one second at the
same rate: the worker's first second of traffic after it connected) and the ``COUNT`` after
them. The first second is reported on a row of its own too, with the same goal: the worker reads
its channels' configurations and opens its connections before it connects
(`chat.worker._configurations_warm`), so its first passes cost what later ones do.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

RATE = 1000
SECONDS = 5
COUNT = RATE * SECONDS
WARMUP = RATE
"""Messages sent first, at the same rate, before the ``COUNT`` measured: the worker's first
second of traffic after it connected (its channels' first passes read their configurations,
its connections make their first statements) is reported on a row of its own, and the
measured stream is the steady state a running worker is in."""
GUILDS = 4
CHANNELS_PER_GUILD = 5
PEOPLE = 12
TOKEN = "bench-gateway-ingest-token"
WAIT = 120.0
STAGES = ("received", "taken", "queued", "pooled")
STAGE_NAMES = {
    "received": "sandbox → on_message",
    "taken": "→ Intake.put",
    "queued": "→ queue committed",
    "pooled": "→ unread pool",
}
LINES = (
    "did anyone see the match last night",
    "I think the second half was better than the first",
    "lunch at noon? the usual place",
    "the build is green again, thanks for the fix",
    "that song has been stuck in my head all day",
    "ok but who brought the cake",
)


# -- the sandbox process ---------------------------------------------------------------------


def _sandbox_process(pipe: Connection) -> None:
    asyncio.run(_serve_sandbox(pipe))


async def _serve_sandbox(pipe: Connection) -> None:
    """Serve the bench world; on ``go`` post ``WARMUP`` then ``COUNT`` messages at ``RATE``
    per second and send back when each was dispatched; stop on ``stop``."""
    from chat.sandbox import SandboxServer

    sandbox, channels, people = bench_world()
    async with SandboxServer(sandbox) as server:
        pipe.send(
            {
                "api_base": server.api_base,
                "gateway_url": server.gateway_url,
                "guilds": sandbox.guild_ids,
                "channels": channels,
                "bot_user_id": sandbox.bot_user_id,
            }
        )
        await asyncio.to_thread(pipe.recv)  # go
        pipe.send(await _paced_stream(sandbox, channels, people))
        await asyncio.to_thread(pipe.recv)  # stop


def bench_world(
    guilds: int = GUILDS,
    channels_per_guild: int = CHANNELS_PER_GUILD,
    people: int = PEOPLE,
    members_per_guild: int | None = None,
):
    """The sandbox world: ``guilds`` guilds of ``channels_per_guild`` text channels, each with
    ``members_per_guild`` members (default: all ``people``; else a window over them, so guilds
    share some members, as they do on Discord); returns the sandbox, the channels' (guild,
    channel) ids and the people."""
    from chat.sandbox.state import Sandbox

    sandbox = Sandbox(token=TOKEN, bot_name="Tomori")
    users = [sandbox.add_user(f"person{n}", global_name=f"Person {n}") for n in range(people)]
    members = members_per_guild or people
    channels = []
    for g in range(guilds):
        guild_id = sandbox.add_guild(f"Bench guild {g}")
        for n in range(members):
            sandbox.add_member(guild_id, users[(g * members + n) % people])
        for c in range(channels_per_guild):
            channels.append((guild_id, sandbox.add_text_channel(guild_id, f"chat-{c}")))
    return sandbox, channels, users


async def _paced_stream(sandbox, channels: list[tuple[int, int]], people: list[int]):
    """Post ``WARMUP + COUNT`` messages, the n-th at ``n / RATE`` s after the start (never
    early; when late, at once), round-robin over the channels; returns ``{message id: sent}``
    in the order they were sent."""
    loop = asyncio.get_running_loop()
    sent: dict[int, float] = {}
    started = loop.time()
    for n in range(WARMUP + COUNT):
        delay = started + n / RATE - loop.time()
        await asyncio.sleep(max(delay, 0.0))  # 0 still lets the socket writers run
        _, channel_id = channels[n % len(channels)]
        author = people[(n * 7) % len(people)]
        message = sandbox.user_says(channel_id, author, f"{LINES[n % len(LINES)]} ({n})")
        sent[int(message["id"])] = time.monotonic()
    return sent


# -- the bare client process -----------------------------------------------------------------


def _bare_client_process(pipe: Connection, api_base: str, gateway_url: str) -> None:
    asyncio.run(_bare_client(pipe, api_base, gateway_url))


async def _bare_client(pipe: Connection, api_base: str, gateway_url: str) -> None:
    """A ``discord.Client`` with the worker's intents and message cache that only notes when
    each message reached ``on_message``; says ``ready``, then sends ``{id: received}`` once it
    has ``WARMUP + COUNT`` messages (or after ``WAIT`` seconds)."""
    import discord

    from chat.gateway.endpoints import configure_discord_endpoints

    configure_discord_endpoints(api_base=api_base, gateway_url=gateway_url)
    intents = discord.Intents.none()
    for name in ("guilds", "guild_messages", "message_content", "members", "guild_reactions"):
        setattr(intents, name, True)
    client = discord.Client(intents=intents, max_messages=5000)
    received: dict[int, float] = {}
    everything = asyncio.Event()

    cpu: list[float] = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        received[message.id] = time.monotonic()
        if len(received) == 1:
            cpu.append(time.process_time())
        if len(received) >= WARMUP + COUNT:
            cpu.append(time.process_time())
            everything.set()

    @client.event
    async def on_ready() -> None:
        pipe.send("ready")

    async with client:
        runner = asyncio.create_task(client.start(TOKEN))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(everything.wait(), WAIT)
        pipe.send((received, cpu[-1] - cpu[0] if len(cpu) == 2 else float("nan")))
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)


# -- the worker (this process) ---------------------------------------------------------------


@dataclass
class Stamps:
    """When each message reached each stage (monotonic seconds, by message id)."""

    received: dict[int, float]
    taken: dict[int, float]
    queued: dict[int, float]
    pooled: dict[int, float]


def bench_config(guilds: Sequence[int], channels: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The configuration document for the bench world: one persona per guild, every channel
    reactive."""
    return {
        "version": 1,
        "guilds": [
            {
                "id": str(guild_id),
                "name": f"Bench guild {n}",
                "personas": [
                    {
                        "name": "Tomori",
                        "main": True,
                        "system_prompt": "You are Tomori. You answer briefly.",
                        "triggers": ["tomori"],
                    }
                ],
                "channels": [
                    {"id": str(channel_id), "mode": "reactive"}
                    for guild, channel_id in channels
                    if guild == guild_id
                ],
            }
            for n, guild_id in enumerate(guilds)
        ],
    }


@contextlib.contextmanager
def _stages_timed(client, stamps: Stamps) -> Iterator[None]:
    """While open, stamp every message at each stage of the running worker ``client``."""
    from chat.services import event_queue

    on_message, put = client.on_message, client.intake.put
    ingest, consume = event_queue.event_ingest_many, event_queue.event_queue_consume

    async def timed_on_message(message):
        stamps.received.setdefault(message.id, time.monotonic())
        await on_message(message)

    def timed_put(message, guild_id, **where):
        stamps.taken.setdefault(message.id, time.monotonic())
        put(message, guild_id, **where)

    def timed_ingest(*, batch, **where):
        moved = ingest(batch=batch, **where)
        now = time.monotonic()
        for message, _ in batch:
            stamps.queued.setdefault(message.id, now)
        for _, message in moved.unread:
            stamps.pooled.setdefault(message.id, now)
        return moved

    def timed_consume(**kwargs):
        consumed = consume(**kwargs)
        now = time.monotonic()
        for _, message in consumed.unread:
            stamps.pooled.setdefault(message.id, now)
        return consumed

    client.on_message, client.intake.put = timed_on_message, timed_put
    event_queue.event_ingest_many = timed_ingest
    event_queue.event_queue_consume = timed_consume
    try:
        yield
    finally:
        del client.on_message
        client.intake.put = put
        event_queue.event_ingest_many, event_queue.event_queue_consume = ingest, consume


@dataclass(frozen=True)
class Figures:
    sent: dict[int, float]
    """When each measured message was dispatched (after the warm-up)."""
    warm: dict[int, float]
    """When each warm-up message was dispatched."""
    stamps: Stamps
    bare: dict[int, float]
    queue_rows: int
    """Event queue rows holding the stream's messages (each exactly once: the key is unique)."""
    load: tuple[float, float, float]
    cpu: float
    """CPU seconds the worker's process spent from the first dispatch to the last pooled."""
    thread_cpu: dict[str, float]
    """The same span's CPU seconds by thread role (`THREAD_ROLES`)."""
    bare_cpu: float
    """CPU seconds the bare client spent from its first message to its last."""

    def latencies(self, stage: str, since: str = "sent", *, warm: bool = False) -> list[float]:
        """Per measured message (with ``warm``, warm-up message) that reached ``stage``, ms
        from ``since`` (``sent`` or a stage)."""
        ids = self._of(warm)
        start = ids if since == "sent" else getattr(self.stamps, since)
        reached = getattr(self.stamps, stage)
        return [(reached[i] - start[i]) * 1000 for i in ids if i in reached and i in start]

    def bare_latencies(self, *, warm: bool = False) -> list[float]:
        ids = self._of(warm)
        return [(self.bare[i] - ids[i]) * 1000 for i in ids if i in self.bare]

    def lost(self, stage: str, *, warm: bool = False) -> int:
        return len(self._of(warm).keys() - getattr(self.stamps, stage).keys())

    def _of(self, warm: bool) -> dict[int, float]:
        """The warm-up messages' dispatch times, else the measured ones'."""
        return self.warm if warm else self.sent

    @property
    def rate(self) -> float:
        """Measured messages per second from the first dispatch to the last one pooled."""
        pooled = [self.stamps.pooled[i] for i in self.sent if i in self.stamps.pooled]
        return len(pooled) / (max(pooled) - min(self.sent.values()))


def percentiles(values: list[float]) -> tuple[float, float]:
    """(p50, p99) of ``values``."""
    cuts = statistics.quantiles(values, n=100)
    return statistics.median(values), cuts[98]


async def _until(check: Callable[[], bool], within: float = WAIT) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {within} s: {check}")
        await asyncio.sleep(0.02)


async def _run(sandbox: Connection, world: dict[str, Any]) -> Figures:
    """Start the bare client and the worker against the sandbox, stream, collect."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.openai_compat import OpenAICompatibleClient
    from chat.models import EventQueue
    from chat.worker import WorkerConfig, build_client, freeze_startup_heap
    from personas.services import config_import

    await sync_to_async(config_import)(data=bench_config(world["guilds"], world["channels"]))
    freeze_startup_heap()  # as ``runbot`` does before it builds its client
    spawn = multiprocessing.get_context("spawn")
    bare, bare_end = spawn.Pipe()
    bare_process = spawn.Process(
        target=_bare_client_process,
        args=(bare_end, world["api_base"], world["gateway_url"]),
        name="bare-discord-client",
    )
    bare_process.start()
    config = WorkerConfig(token=TOKEN, api_base=world["api_base"], gateway_url=world["gateway_url"])
    # No message names a persona: the model is never asked (a request would fail).
    client = build_client(
        config, llm=OpenAICompatibleClient(base_url="http://127.0.0.1:9/v1", api_key="-")
    )
    stamps = Stamps({}, {}, {}, {})
    worker = asyncio.create_task(client.start(TOKEN))
    try:
        await _until(lambda: client.scheduler is not None and client.is_ready())
        await asyncio.to_thread(bare.recv)  # the bare client is ready too
        with _stages_timed(client, stamps):
            cpu, threads = time.process_time(), _thread_cpu()
            sandbox.send("go")
            everything = await asyncio.to_thread(sandbox.recv)
            await _until(lambda: len(stamps.pooled) >= WARMUP + COUNT)
            cpu = time.process_time() - cpu
            threads = {
                name: spent - threads.get(name, 0.0) for name, spent in _thread_cpu().items()
            }
        load = os.getloadavg()
        received, bare_cpu = await asyncio.to_thread(bare.recv)
        await client.handlers_settled()
        order = list(everything)
        warm = {i: everything[i] for i in order[:WARMUP]}
        sent = {i: everything[i] for i in order[WARMUP:]}
        ids = list(sent)
        queue_rows = await sync_to_async(EventQueue.objects.filter(message_id__in=ids).count)()
    finally:
        await client.close()
        await asyncio.gather(worker, return_exceptions=True)
        await sync_to_async(connections.close_all)()
        bare_process.join(10)
    return Figures(
        sent=sent,
        warm=warm,
        stamps=stamps,
        bare=received,
        queue_rows=queue_rows,
        load=load,
        cpu=cpu,
        thread_cpu=threads,
        bare_cpu=bare_cpu,
    )


THREAD_ROLES = (
    ("MainThread", "event loop"),
    ("ThreadPoolExecutor", "channel loops' queries"),
    ("intake-db", "intake writer"),
    ("queue-db", "queue consumer"),
)
"""The worker's threads by name prefix: the event loop (gateway, discord.py, scheduling), the
one thread `sync_to_async` runs the channel loops' database work on, the intake's writer and the
queue consumer; any other thread counts as ``other``."""


def _thread_cpu() -> dict[str, float]:
    """CPU seconds each live thread of this process has spent, by role (`THREAD_ROLES`)."""
    spent: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # it ended meanwhile
            continue
        role = next((r for prefix, r in THREAD_ROLES if thread.name.startswith(prefix)), "other")
        spent[role] = spent.get(role, 0.0) + seconds
    return spent


def measure() -> Figures:
    spawn = multiprocessing.get_context("spawn")
    sandbox, sandbox_end = spawn.Pipe()
    process = spawn.Process(target=_sandbox_process, args=(sandbox_end,), name="sandbox")
    process.start()
    try:
        world = sandbox.recv()
        with tempfile.TemporaryDirectory(prefix="bench-gateway-ingest-") as directory:
            database = setup_django(directory, prefix="bench_gateway_ingest", in_memory_layer=False)
            try:
                return asyncio.run(_run(sandbox, world))
            finally:
                teardown_django(database)
    finally:
        with contextlib.suppress(OSError):
            sandbox.send("stop")
        process.join(10)
        if process.is_alive():
            process.terminate()


def _ms(pair: tuple[float, float]) -> str:
    return f"p50 {pair[0]:.1f} ms, p99 {pair[1]:.1f} ms"


def main() -> None:
    figures = measure()
    end_to_end = percentiles(figures.latencies("pooled", warm=True) + figures.latencies("pooled"))
    bare = percentiles(figures.bare_latencies(warm=True) + figures.bare_latencies())
    bare_steady = percentiles(figures.bare_latencies())
    warm = percentiles(figures.latencies("pooled", warm=True))
    bare_warm = percentiles(figures.bare_latencies(warm=True))
    stream = WARMUP + COUNT
    previous = "sent"
    split = []
    for stage in STAGES:
        p50, p99 = percentiles(figures.latencies(stage, since=previous))
        split.append(f"{STAGE_NAMES[stage]} {p50:.1f}/{p99:.1f}")
        previous = stage
    doubled = figures.queue_rows - len(figures.sent) + figures.lost("queued")
    load = f"load average {figures.load[0]:.1f}"
    what = (
        f"ingest through the websocket, {stream:,} messages at {RATE:,} msg/s over "
        f"{GUILDS * CHANNELS_PER_GUILD} channels, from the first one: sandbox → unread pool"
    )
    lost = figures.lost("pooled") + figures.lost("pooled", warm=True)
    measured = (
        f"{_ms(end_to_end)}, {figures.rate:,.0f} msg/s, lost {lost}, doubled {doubled} ({load})"
    )
    rows = [
        Row(what, measured, f"bare discord.py client: {_ms(bare)}", "p99 ≤ 50 ms, 0 lost"),
        Row(
            f"… the first {WARMUP:,}: the worker's first second of traffic after it connected",
            f"{_ms(warm)}, lost {figures.lost('pooled', warm=True)}",
            f"bare discord.py client: {_ms(bare_warm)}",
            "p99 ≤ 50 ms",
        ),
        Row(
            f"… the {COUNT:,} after the first second, by stage, p50/p99 ms",
            "; ".join(split),
            f"bare client, sandbox → on_message: {bare_steady[0]:.1f}/{bare_steady[1]:.1f}",
        ),
        Row(
            "… CPU time per message (the process's own, the whole stream's length)",
            f"worker {figures.cpu / stream * 1e6:.0f} µs",
            f"bare client {figures.bare_cpu / stream * 1e6:.0f} µs",
        ),
        Row(
            "… the worker's CPU time per message by thread",
            ", ".join(
                f"{role} {figures.thread_cpu.get(role, 0.0) / stream * 1e6:.0f} µs"
                for role in (*(r for _, r in THREAD_ROLES), "other")
            ),
            "—",
        ),
    ]
    emit(rows)


if __name__ == "__main__":
    sys.exit(main())
