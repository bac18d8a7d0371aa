"""What counting the metrics costs the worker, and how fast its ``/metrics`` answers, under load.

Run: ``.venv/bin/python -m benchmarks.metrics`` (``make bench`` runs it).

The worker is built as ``runbot`` builds it (`chat.worker.build_client`) with its monitoring
endpoint (`chat.gateway.health.WorkerMonitor`) on a throwaway database of the configured kind;
the sandbox and the fake model run in a process of their own (their work is not the worker's),
as in `benchmarks.capacity`. The world sends, for ``PHASE_SECONDS`` at a time, ``RATE`` chatter
messages a second over 32 reactive channels and ``TURNS`` triggers a second among them (the
model streams a short reply, 0.2 s to its first word).

1. **CPU of counting**: the same load in alternating phases with counting on and off
   (``ROUNDS`` each, same run, same worker). Off, every update of a series is a no-op
   (``inc``, ``observe``, ``set`` and ``labels`` of ``prometheus_client``'s metric classes
   replaced): what remains is the worker's own work. The figure is the worker process's CPU
   seconds per second of load (every thread: the event loop, the intake's writer, the database
   threads), on beside off, and their difference as a share of the CPU off.
2. **Scrape latency**: a last phase with counting on, ``/metrics`` scraped ``SCRAPES_PER_S``
   times a second over HTTP from another thread; its p50 and p95, beside the same scrape with
   the worker idle.
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
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.gateway_ingest import (
    LINES,
    TOKEN,
    _setup_django,
    _teardown_django,
    _until,
    bench_config,
    bench_world,
)
from benchmarks.table import Row, emit

GUILDS = 8
CHANNELS_PER_GUILD = 4
RATE = 1000
TURNS = 10
PHASE_SECONDS = 8.0
ROUNDS = 3
SCRAPES_PER_S = 5
WAIT = 300.0


# -- the world process: the sandbox and the fake model ---------------------------------------


def _world_process(pipe: Connection) -> None:
    asyncio.run(_serve_world(pipe))


async def _serve_world(pipe: Connection) -> None:
    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.sandbox import SandboxServer

    sandbox, channels, users = bench_world(GUILDS, CHANNELS_PER_GUILD, 12)
    reply = Reply("fine, thanks for asking")
    pace = StreamPace(first_token_s=0.2, words_per_s=50.0)
    async with (
        SandboxServer(sandbox) as server,
        FakeLLMServer(responder=lambda body: reply, pace=pace) as model,
    ):
        pipe.send(
            {
                "api_base": server.api_base,
                "gateway_url": server.gateway_url,
                "llm": model.base_url,
                "guilds": sandbox.guild_ids,
                "channels": channels,
            }
        )
        while (command := await asyncio.to_thread(pipe.recv)) != "stop":
            sent, triggers = await _load(sandbox, channels, users, float(command))
            pipe.send((sent, triggers))


async def _load(sandbox, channels, people, seconds: float) -> tuple[int, int]:
    """``RATE`` messages a second for ``seconds``, every ``RATE // TURNS``-th a trigger (never
    early; when late, at once); returns how many messages and triggers were sent."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    count = int(RATE * seconds)
    every = RATE // TURNS
    triggers = 0
    for n in range(count):
        delay = started + n / RATE - loop.time()
        if delay > 0 or n % 50 == 0:
            await asyncio.sleep(max(delay, 0.0))
        _, channel_id = channels[(n // every if n % every == 0 else n) % len(channels)]
        author = people[(n * 7) % len(people)]
        if n % every == 0:
            sandbox.user_says(channel_id, author, f"tomori, how is it going? ({n})")
            triggers += 1
        else:
            sandbox.user_says(channel_id, author, f"{LINES[n % len(LINES)]} ({n})")
    return count, triggers


# -- counting on and off -----------------------------------------------------------------------


@contextlib.contextmanager
def counting_off() -> Iterator[None]:
    """Every update of a series is a no-op while the block runs (what the worker does without
    metrics); the series keep their values."""
    from prometheus_client.metrics import Counter, Gauge, Histogram, MetricWrapperBase

    saved = [
        (Counter, "inc", Counter.inc),
        (Histogram, "observe", Histogram.observe),
        (Gauge, "set", Gauge.set),
        (MetricWrapperBase, "labels", MetricWrapperBase.labels),
    ]
    Counter.inc = lambda self, amount=1, exemplar=None: None
    Histogram.observe = lambda self, amount, exemplar=None: None
    Gauge.set = lambda self, value: None
    MetricWrapperBase.labels = lambda self, *values, **labels: self
    try:
        yield
    finally:
        for owner, name, method in saved:
            setattr(owner, name, method)


class Scraper:
    """Scrapes ``url`` ``SCRAPES_PER_S`` times a second from its own thread (a Prometheus
    server's place), keeping each answer's time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper")

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import httpx

        with httpx.Client() as http:
            while not self._stop.wait(1 / SCRAPES_PER_S):
                started = time.perf_counter()
                answer = http.get(self.url)
                answer.raise_for_status()
                self.seconds.append(time.perf_counter() - started)


def _p(values: list[float], q: int) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


# -- the worker in this process ----------------------------------------------------------------


async def _run(pipe: Connection, world: dict[str, Any]) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.gateway.health import WorkerHealth, WorkerMonitor
    from chat.llm.attempts import AttemptRunner
    from chat.llm.openai_compat import OpenAICompatibleClient
    from chat.models import Turn
    from chat.shards import EVERY_SHARD
    from chat.worker import WorkerConfig, build_client
    from personas.services import config_import

    await sync_to_async(config_import)(data=bench_config(world["guilds"], world["channels"]))
    config = WorkerConfig(token=TOKEN, api_base=world["api_base"], gateway_url=world["gateway_url"])
    llm = OpenAICompatibleClient(base_url=world["llm"], api_key="-")
    client = build_client(config, llm=llm, runner=AttemptRunner(client=llm, stream=True))
    health = WorkerHealth()
    monitor = WorkerMonitor(health, host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{await monitor.start()}/metrics"
    runner = asyncio.create_task(client.start(TOKEN))
    replied = Turn.objects.filter(status=Turn.Status.REPLIED).acount
    phases: list[dict[str, Any]] = []
    try:
        async with health.serving(client, shards=EVERY_SHARD):
            await _until(lambda: client.scheduler is not None and client.is_ready(), WAIT)
            with Scraper(url) as idle:
                await asyncio.sleep(3)
            await _phase(pipe, client, replied, "warm-up", 2.0)
            for _ in range(ROUNDS):
                with counting_off():
                    phases.append(await _phase(pipe, client, replied, "off", PHASE_SECONDS))
                phases.append(await _phase(pipe, client, replied, "on", PHASE_SECONDS))
            with Scraper(url) as loaded:
                phases.append(await _phase(pipe, client, replied, "scraped", PHASE_SECONDS))
    finally:
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)
        await monitor.stop()
        await llm.aclose()
        await sync_to_async(connections.close_all)()
    return {"phases": phases, "idle": idle.seconds, "loaded": loaded.seconds}


async def _phase(pipe, client, replied, name: str, seconds: float) -> dict[str, Any]:
    """One phase of load: the worker's CPU seconds a second while the world sends, the turns
    that replied meanwhile, and how far the intake and the loops were behind at its end."""
    turns_before = await replied()
    cpu, wall = time.process_time(), time.monotonic()
    pipe.send(str(seconds))
    sent, triggers = await asyncio.to_thread(pipe.recv)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    await _until(lambda: client.intake.idle, WAIT)
    return {
        "name": name,
        "cpu_per_s": cpu / wall,
        "messages_per_s": sent / wall,
        "triggers_per_s": triggers / wall,
        "turns_per_s": (await replied() - turns_before) / wall,
    }


def measure() -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as directory:
        database = _setup_django(directory, prefix="bench_metrics")
        pipe, child = spawn.Pipe()
        world_process = spawn.Process(target=_world_process, args=(child,), name="world")
        world_process.start()
        try:
            figures = asyncio.run(_run(pipe, pipe.recv()))
        finally:
            with contextlib.suppress(OSError):
                pipe.send("stop")
            world_process.join(20)
            if world_process.is_alive():
                world_process.terminate()
            _teardown_django(database)
    figures["load"] = os.getloadavg()[0]
    return figures


def main() -> None:
    figures = measure()
    phases = figures["phases"]
    on = [p for p in phases if p["name"] == "on"]
    off = [p for p in phases if p["name"] == "off"]
    cpu_on = statistics.mean(p["cpu_per_s"] for p in on)
    cpu_off = statistics.mean(p["cpu_per_s"] for p in off)
    rates = " ".join(
        f"{p['name']} {p['messages_per_s']:,.0f} msg/s {p['turns_per_s']:.1f} turns/s "
        f"{p['cpu_per_s'] * 100:.0f} % CPU;"
        for p in phases
    )
    print(f"phases ({PHASE_SECONDS:.0f} s each): {rates}", file=sys.stderr)
    loaded, idle = figures["loaded"], figures["idle"]
    load = f"load average {figures['load']:.1f}"
    emit(
        [
            Row(
                f"worker CPU with metrics counted, {RATE:,} msg/s of ingest and {TURNS} "
                f"triggers/s over {GUILDS * CHANNELS_PER_GUILD} channels ({ROUNDS} phases of "
                f"{PHASE_SECONDS:.0f} s each, alternating)",
                f"{cpu_on * 100:.1f} % of a core; counting costs "
                f"{(cpu_on - cpu_off) / cpu_off * 100:+.1f} % of the worker's CPU ({load})",
                f"counting off: {cpu_off * 100:.1f} % of a core",
                "≤ 2 % of the worker's CPU",
            ),
            Row(
                f"runbot /metrics scrape under that load ({len(loaded)} scrapes, "
                f"{SCRAPES_PER_S} a second)",
                f"p50 {_p(loaded, 50) * 1000:.1f} ms, p95 {_p(loaded, 95) * 1000:.1f} ms",
                f"the worker idle: p50 {_p(idle, 50) * 1000:.1f} ms, "
                f"p95 {_p(idle, 95) * 1000:.1f} ms",
                "p95 ≤ 50 ms",
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
