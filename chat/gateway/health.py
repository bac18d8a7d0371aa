"""The worker's monitoring endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP.

``runbot`` serves it on ``WORKER_METRICS_PORT`` (bound to ``WORKER_METRICS_HOST``) when that is
set; every worker of the process reports through one `WorkerHealth`.

- ``/metrics``: the process's Prometheus registry in the text format (``prometheus_client``'s
  own exposition): the series of `chat.metrics` this process counted, the process collector's
  CPU and memory, and the gauges read when scraped (`WorkerCollector`): the event queue's
  ready rows and the unread pools' messages of this worker's shards (counted every
  `COUNT_SECONDS` by `QueueCounter`), its shards ready, the deployment's shard count and the
  highest gateway latency of its shards.
- ``/healthz``: 200 while the process's event loop answers; 503 when it does not within
  `LOOP_ANSWER_SECONDS` (a hung loop).
- ``/readyz``: 200 when this process runs a gateway client and every shard it runs has its
  session up (READY with its guilds, or RESUMED); 503 with the reason otherwise (starting,
  waiting as a standby for the shard lease, a shard's socket down or its RESUME unanswered).

The endpoint runs on threads of its own (`WorkerMonitor`), so a scrape neither waits for the
gateway's event loop nor holds it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.db import DatabaseError, close_old_connections, connections
from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from chat.gateway.client import PersonaBotClient
from chat.metrics import NAMESPACE
from chat.selectors.event_queue import event_queue_ready_count, unread_messages_count
from chat.shards import ShardSet

STOP_POLL_SECONDS = 0.1
"""How often the serving thread looks whether it was asked to stop: a stopping worker (and
every test's) waits up to this long for it, not socketserver's 0.5 s."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthSnapshot:
    """What the gateway clients report at one moment (read from the endpoint's threads)."""

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
        """The clients' state now. Read from the endpoint's threads while the event loop
        changes it: each set and dict is copied whole (one step under the GIL)."""
        serving = dict(self._serving)
        clients = list(serving)
        latencies = [latency for client in clients for latency in _latencies(client)]
        counts = [client.shard_count for client in clients if client.shard_count]
        if not clients:
            unready = "no gateway client: waiting for the shard lease"
        else:
            reasons = [reason for client in clients if (reason := client.unready_reason())]
            unready = "; ".join(reasons) or None
        return HealthSnapshot(
            shards=tuple(serving.values()),
            shards_ready=sum(len(client.shards_ready) for client in clients),
            shard_count=self._shard_count or max(counts, default=1),
            latency=max(latencies, default=None),
            unready=unready,
        )


def _latencies(client: PersonaBotClient) -> list[float]:
    """The client's known gateway latencies (none while a shard's session is being replaced
    under the reader: the reading thread does not wait for it)."""
    try:
        return [latency for _, latency in client.latencies if math.isfinite(latency)]
    except (RuntimeError, AttributeError):
        return []


class WorkerCollector(Collector):
    """The gauges read when ``/metrics`` is scraped, from the last `HealthSnapshot` and the
    last `QueueCounter` counts (left out while there are none)."""

    def __init__(self, *, counts: Callable[[], tuple[int, int] | None] | None = None) -> None:
        """``counts`` gives the last counts of the queue's ready rows and the unread messages
        (None: not counted yet, or the database did not answer)."""
        self.snapshot: HealthSnapshot | None = None
        self._counts = counts or (lambda: None)

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
            counts = self._counts() if snapshot.shards else None
            if counts is not None:
                ready.add_metric([], counts[0])
                unread.add_metric([], counts[1])
        yield from (ready, unread, shards_ready, shard_count, latency)


COUNT_SECONDS = 5.0
"""How often the queue's ready rows and the unread messages are counted for ``/metrics``."""


class QueueCounter:
    """Counts the event queue's ready rows and the unread pools' messages of the serving
    workers' shards every `COUNT_SECONDS` (sooner while it has none yet), on a thread of its own
    with one database connection, so a scrape reads the last counts and waits for no query."""

    def __init__(self, health: WorkerHealth, *, every: float = COUNT_SECONDS) -> None:
        self._health = health
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-db", daemon=True)
        self.latest: tuple[int, int] | None = None

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        try:
            while True:
                shards = self._health.snapshot().shards
                self.latest = _database_counts(shards) if shards else None
                if self._stop.wait(self._every if self.latest is not None else 0.2):
                    return
        finally:
            connections.close_all()


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


class _QuietHandler(WSGIRequestHandler):
    """Serves requests without a log line each (a scrape every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a request's thread never holds the process up at exit


LOOP_ANSWER_SECONDS = 5.0
"""How long ``/healthz`` waits for the event loop to run a callback before answering 503."""


class WorkerMonitor:
    """The HTTP endpoint (`start`, `stop`); ``registry`` defaults to the process's own.

    It runs on threads of its own (one per request, as ``prometheus_client``'s own server
    does), so a scrape never waits for the gateway's event loop: the clients' state is read
    from there as it is (sets and counts, copied whole), and the database's counts are the
    `QueueCounter`'s last. Only ``/healthz`` asks the event loop, since whether it answers is
    the question."""

    def __init__(
        self,
        health: WorkerHealth,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry = REGISTRY,
        loop_answer_seconds: float = LOOP_ANSWER_SECONDS,
    ) -> None:
        self.health = health
        self._loop_answer_seconds = loop_answer_seconds
        self.host = host
        self.port = port
        self._registry = registry
        self._counter = QueueCounter(health)
        self._collector = WorkerCollector(counts=lambda: self._counter.latest)
        self._exposition = make_wsgi_app(registry)
        self._scrape = threading.Lock()
        self._server: _Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> int:
        """Listen; returns the port (the one the OS picked when ``port`` is 0). Raises
        OSError when the address cannot be bound."""
        self._loop = asyncio.get_running_loop()
        self._server = make_server(
            self.host, self.port, self._app, server_class=_Server, handler_class=_QuietHandler
        )
        self._registry.register(self._collector)
        self._counter.start()
        self.port = self._server.server_port
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": STOP_POLL_SECONDS},
            name="metrics-http",
            daemon=True,
        ).start()
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._server = None
            self._registry.unregister(self._collector)
        await self._counter.stop()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            with self._scrape:
                self._collector.snapshot = self.health.snapshot()
                return list(self._exposition(environ, start_response))
        if path == "/healthz":
            return _text(start_response, *self._loop_answers())
        if path == "/readyz":
            reason = self.health.snapshot().unready
            if reason is None:
                return _text(start_response, "200 OK", "ready")
            return _text(start_response, "503 Service Unavailable", f"not ready: {reason}")
        return _text(start_response, "404 Not Found", "/metrics, /healthz or /readyz")

    def _loop_answers(self) -> tuple[str, str]:
        assert self._loop is not None
        try:
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self._loop).result(
                self._loop_answer_seconds
            )
        except (TimeoutError, RuntimeError):
            return "503 Service Unavailable", "the event loop does not answer"
        return "200 OK", "ok"


def _text(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = f"{text}\n".encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body]
