"""What counting the metrics costs the worker, and how fast its ``/metrics`` answers, under load.

Run: ``.venv/bin/python -m benchmarks.metrics`` (``make bench`` runs it).

The worker is built as ``runbot`` builds it (`chat.worker.build_client`) with its monitoring
endpoint (`chat.gateway.health.WorkerMonitor`) on a throwaway database of the configured kind;
the sandbox and the fake model run in a process of their own (their work is not the worker's),
as in `benchmarks.capacity`. The world sends, for ``PHASE_SECONDS`` at a time, ``RATE`` chatter
messages a second over 32 reactive channels and ``TURNS`` triggers a second among them (the
model streams a short reply, 0.2 s to its first word).

1. **CPU of counting**: one stretch of load in which counting is on and off in turn every
   ``SLICE_SECONDS`` (``PAIRS`` pairs, same run, same worker). Off, every update of a series is
   a no-op (``inc``, ``observe``, ``set`` and ``labels`` of ``prometheus_client``'s metric
   classes replaced): what remains is the worker's own work. The figure is the worker
   process's CPU seconds per second (every thread: the event loop, the intake's writer, the
   database threads), on beside off, and their difference as a share of the CPU off. On a
   shared machine that difference is within the noise of the machine's load, so a second row
   computes counting's share directly: the series updates the load made (read from the series
   themselves) times what one update costs, timed in the same process.
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
    _until,
    bench_config,
    bench_world,
)
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

GUILDS = 8
CHANNELS_PER_GUILD = 4
RATE = 1000
TURNS = 10
SLICE_SECONDS = 2.0
PAIRS = 8
SCRAPE_SECONDS = 8.0
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
    try:
        async with health.serving(client, shards=EVERY_SHARD):
            await _until(lambda: client.scheduler is not None and client.is_ready(), WAIT)
            with Scraper(url) as idle:
                await asyncio.sleep(3)
            await _phase(pipe, client, replied, 2.0)  # warm-up
            updates_before = _updates()
            slices = await _phase(pipe, client, replied, 2 * PAIRS * SLICE_SECONDS, sliced=True)
            updates = {k: v - updates_before.get(k, 0.0) for k, v in _updates().items()}
            with Scraper(url) as loaded:
                scraped = await _phase(pipe, client, replied, SCRAPE_SECONDS)
    finally:
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)
        await monitor.stop()
        await llm.aclose()
        await sync_to_async(connections.close_all)()
    return {
        "slices": slices,
        "updates": updates,
        "scraped": scraped,
        "idle": idle.seconds,
        "loaded": loaded.seconds,
    }


async def _phase(pipe, client, replied, seconds: float, *, sliced: bool = False) -> dict[str, Any]:
    """``seconds`` of load: the worker's CPU seconds a second while the world sends, the
    rates reached; with ``sliced``, counting is off and on in turn every `SLICE_SECONDS`
    (off-on, on-off, … so a drift of the machine's load weighs on both alike) and the CPU of
    each slice is kept by whether counting was on."""
    turns_before = await replied()
    wall = time.monotonic()
    pipe.send(str(seconds))
    answer = asyncio.ensure_future(asyncio.to_thread(pipe.recv))
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    started = time.process_time()
    if sliced:
        for n in range(2 * PAIRS):
            on = (n % 2 == 0) == (n // 2 % 2 == 1)
            slice_started, slice_cpu = time.monotonic(), time.process_time()
            with contextlib.nullcontext() if on else counting_off():
                await asyncio.sleep(SLICE_SECONDS)
            cpu["on" if on else "off"].append(
                (time.process_time() - slice_cpu) / (time.monotonic() - slice_started)
            )
    sent, triggers = await answer
    seconds_taken = time.monotonic() - wall
    cpu_all = (time.process_time() - started) / seconds_taken
    await _until(lambda: client.intake.idle, WAIT)
    return {
        "cpu": cpu,
        "cpu_per_s": cpu_all,
        "messages_per_s": sent / seconds_taken,
        "triggers_per_s": triggers / seconds_taken,
        "turns_per_s": (await replied() - turns_before) / seconds_taken,
    }


def _updates() -> dict[str, float]:
    """How many times each kind of series update ran so far in this process, read from the
    series themselves: histogram observations and counter increments by family (a model
    call's token counters, which grow by many at once, as three updates a call)."""
    from prometheus_client import REGISTRY

    counts: dict[str, float] = {}
    for family in REGISTRY.collect():
        if not family.name.startswith("personabot_") or family.name == "personabot_model_tokens":
            continue
        suffix = {"histogram": "_count", "counter": "_total"}.get(family.type)
        for sample in family.samples:
            if suffix is not None and sample.name.endswith(suffix):
                counts[family.name] = counts.get(family.name, 0.0) + sample.value
    counts["personabot_model_tokens"] = 3 * counts.get("personabot_model_requests", 0.0)
    return counts


def _update_cost() -> float:
    """Seconds one series update costs here: a labelled histogram observation and a labelled
    counter increment, the kinds every counting place does, timed alike."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    registry = CollectorRegistry()
    histogram = Histogram("bench_seconds", "", ["model"], registry=registry)
    counter = Counter("bench_total", "", ["model", "outcome"], registry=registry)
    rounds = 50_000
    started = time.process_time()
    for n in range(rounds):
        histogram.labels(model="m").observe(n * 1e-4)
        counter.labels(model="m", outcome="ok").inc()
    return (time.process_time() - started) / (2 * rounds)


def measure() -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as directory:
        database = setup_django(directory, prefix="bench_metrics", in_memory_layer=False)
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
            teardown_django(database)
    figures["load"] = os.getloadavg()[0]
    return figures


def main() -> None:
    figures = measure()
    slices, scraped = figures["slices"], figures["scraped"]
    cpu_on = statistics.mean(slices["cpu"]["on"])
    cpu_off = statistics.mean(slices["cpu"]["off"])
    updates_per_s = sum(figures["updates"].values()) / (2 * PAIRS * SLICE_SECONDS)
    cost = _update_cost()
    counted_share = updates_per_s * cost / slices["cpu_per_s"]
    print(
        f"load: {slices['messages_per_s']:,.0f} msg/s, {slices['triggers_per_s']:.1f} "
        f"triggers/s, {slices['turns_per_s']:.1f} turns/s replied; scraped phase "
        f"{scraped['messages_per_s']:,.0f} msg/s, {scraped['turns_per_s']:.1f} turns/s; "
        f"updates: {figures['updates']}",
        file=sys.stderr,
    )
    loaded, idle = figures["loaded"], figures["idle"]
    load = f"load average {figures['load']:.1f}"
    where = (
        f"{slices['messages_per_s']:,.0f} msg/s of ingest, {slices['turns_per_s']:.1f} "
        f"turns/s over {GUILDS * CHANNELS_PER_GUILD} channels"
    )
    emit(
        [
            Row(
                f"worker CPU with metrics counted, {where} ({PAIRS} pairs of "
                f"{SLICE_SECONDS:.0f} s slices, counting on and off in turn)",
                f"{cpu_on * 100:.1f} % of a core; counting costs "
                f"{(cpu_on - cpu_off) / cpu_off * 100:+.1f} % of the worker's CPU ({load})",
                f"counting off: {cpu_off * 100:.1f} % of a core",
                "≤ 2 % of the worker's CPU",
            ),
            Row(
                f"counting's own CPU at that load: {updates_per_s:,.0f} series updates a "
                f"second × {cost * 1e6:.1f} µs each (timed in the same process)",
                f"{counted_share * 100:.2f} % of the worker's CPU",
                f"the worker: {slices['cpu_per_s'] * 100:.1f} % of a core",
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
