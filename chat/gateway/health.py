"""The worker's monitoring endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP.

``runbot`` serves it on ``WORKER_METRICS_PORT`` (bound to ``WORKER_METRICS_HOST``) when that is
set; every worker of the process reports through one `WorkerHealth`.

- ``/metrics``: the process's Prometheus registry in the text format (``prometheus_client``'s
  own exposition): the series of `chat.metrics` this process counted, the process collector's
  CPU and memory, and the gauges read when scraped (`WorkerCollector`): the event queue's
  ready rows and the unread pools' messages of this worker's shards, its shards ready, the
  deployment's shard count and the highest gateway latency of its shards.
- ``/healthz``: 200 while the process's event loop answers (a hung loop answers nothing).
- ``/readyz``: 200 when this process runs a gateway client and every shard it runs has its
  session up (READY with its guilds, or RESUMED); 503 with the reason otherwise (starting,
  waiting as a standby for the shard lease, a shard's socket down or its RESUME unanswered).

The scrape runs on a thread of its own (its own database connection), so neither the counts it
reads nor the text it writes hold up the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiohttp import web
from django.db import DatabaseError, close_old_connections, connections
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from chat.gateway.client import PersonaBotClient
from chat.metrics import NAMESPACE
from chat.selectors.event_queue import event_queue_ready_count, unread_messages_count
from chat.shards import ShardSet

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthSnapshot:
    """What the gateway clients report at one moment, read on the event loop."""

    shards: tuple[ShardSet, ...]
    """The shards of each worker serving now (their queue and pools are this process's)."""
    shards_ready: int
    shard_count: int
    latency: float | None
    """The highest gateway latency (seconds) of the shards with one known; None: none known."""
    unready: str | None
    """Why the process is not ready (None: ready)."""


class WorkerHealth:
    """The gateway clients a ``runbot`` process serves with now (one per worker holding its
    lease), for ``/readyz`` and the scrape-time gauges."""

    def __init__(self, *, shard_count: int | None = None) -> None:
        """``shard_count``: the deployment's total shards when given (``--shard-count``);
        else the serving clients' own count (one until a client knows it)."""
        self._shard_count = shard_count
        self._serving: dict[PersonaBotClient, ShardSet] = {}

    @contextlib.asynccontextmanager
    async def serving(self, client: PersonaBotClient, *, shards: ShardSet) -> AsyncIterator[None]:
        """``client`` serves ``shards`` while the block runs."""
        self._serving[client] = shards
        try:
            yield
        finally:
            self._serving.pop(client, None)

    def snapshot(self) -> HealthSnapshot:
        """The clients' state now (call on the event loop that runs them)."""
        clients = list(self._serving)
        latencies = [
            latency
            for client in clients
            for _, latency in client.latencies
            if math.isfinite(latency)
        ]
        counts = [client.shard_count for client in clients if client.shard_count]
        if not clients:
            unready = "no gateway client: waiting for the shard lease"
        else:
            reasons = [reason for client in clients if (reason := client.unready_reason())]
            unready = "; ".join(reasons) or None
        return HealthSnapshot(
            shards=tuple(self._serving.values()),
            shards_ready=sum(len(client.shards_ready) for client in clients),
            shard_count=self._shard_count or max(counts, default=1),
            latency=max(latencies, default=None),
            unready=unready,
        )


class WorkerCollector(Collector):
    """The gauges read when ``/metrics`` is scraped, from the last `HealthSnapshot` and the
    database (the counts of the serving workers' shards; left out when the database does not
    answer, so the rest of the scrape still comes)."""

    def __init__(self) -> None:
        self.snapshot: HealthSnapshot | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.snapshot
        ready = _gauge("event_queue_ready", "Queued messages not yet moved to an unread pool.")
        unread = _gauge("unread_messages", "Messages waiting in the unread pools.")
        shards_ready = _gauge("shards_ready", "This worker's shards with their session up.")
        shard_count = _gauge("shard_count", "The deployment's total number of shards.")
        latency = _gauge(
            "gateway_latency_seconds", "The highest gateway heartbeat latency of its shards."
        )
        if snapshot is not None:
            shards_ready.add_metric([], snapshot.shards_ready)
            shard_count.add_metric([], snapshot.shard_count)
            if snapshot.latency is not None:
                latency.add_metric([], snapshot.latency)
            counts = _database_counts(snapshot.shards) if snapshot.shards else None
            if counts is not None:
                ready.add_metric([], counts[0])
                unread.add_metric([], counts[1])
        yield from (ready, unread, shards_ready, shard_count, latency)


def _database_counts(shards: tuple[ShardSet, ...]) -> tuple[int, int] | None:
    """The ready queued messages and the unread messages of ``shards``; None (logged) when
    the database does not answer."""
    try:
        close_old_connections()  # a connection an outage broke is replaced
        return (
            sum(event_queue_ready_count(shards=shard_set) for shard_set in shards),
            sum(unread_messages_count(shards=shard_set) for shard_set in shards),
        )
    except DatabaseError:
        logger.warning("metrics: could not count the queue and the unread pools", exc_info=True)
        return None


def _gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", documentation)


class WorkerMonitor:
    """The HTTP endpoint (`start`, `stop`); ``registry`` defaults to the process's own."""

    def __init__(
        self,
        health: WorkerHealth,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.health = health
        self.host = host
        self.port = port
        self._registry = registry
        self._collector = WorkerCollector()
        self._scrape = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Listen; returns the port (the one the OS picked when ``port`` is 0)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._registry.register(self._collector)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._registry.unregister(self._collector)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, connections.close_all)
        self._executor.shutdown(wait=False)

    async def _metrics(self, request: web.Request) -> web.Response:
        async with self._scrape:
            self._collector.snapshot = self.health.snapshot()
            loop = asyncio.get_running_loop()
            body = await loop.run_in_executor(self._executor, generate_latest, self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        reason = self.health.snapshot().unready
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")
