"""The bot worker's composition root: client, adapter, runtime, scheduler, control listener,
slash commands (synced at start).

`run_worker` is what ``manage.py runbot`` runs. `build_client` builds its gateway client; the
sandbox harness (`chat.sandbox.harness`, for the end-to-end tests) and the benchmarks build the
same client with it, against the sandbox; nothing in the services or the loop imports this
module. This module assembles the gateway parts; the model clients
and the turn runtime come from `chat.runtime`, and the database work it needs at start is done
by services and selectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import logging
import math
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from botproject.live_updates import LiveUpdateType
from chat import selectors
from chat.gateway.client import PersonaBotClient
from chat.gateway.endpoints import configure_discord_endpoints
from chat.gateway.health import WorkerHealth
from chat.gateway.limits import SharedLimits
from chat.gateway.proxies import ProxyResolver
from chat.gateway.slash_commands import PersonaCommandTree
from chat.gateway.stops import client_stop
from chat.heartbeats import (
    worker_heartbeat_clear,
    worker_heartbeat_record,
    worker_standby_record,
)
from chat.leases import (
    FencedPort,
    shard_lease_fenced,
    shard_lease_holders,
    shard_leases_claim,
    shard_leases_release,
)
from chat.llm.attempts import AttemptRunner
from chat.llm.base import LLMClient
from chat.loop.control import listen_for_control
from chat.loop.scheduler import Scheduler
from chat.ports import UNFENCED, LeaseFence, LeaseLost
from chat.runtime import TurnCapabilities, gateway_runtime, turn_capabilities_from_settings
from chat.selectors.event_queue import last_ingested
from chat.services.recovery import Reconciled, turns_reconcile_interrupted
from chat.services.turn_request import TurnRuntime
from chat.shards import ShardSet

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
CONNECTION_CHECK_SECONDS = 1.0
"""How often the database connection of the worker's shared sync thread (the channel loops',
the lease's and the heartbeat's) is checked and replaced when an outage broke it."""


@dataclass(frozen=True)
class WorkerConfig:
    token: str
    api_base: str
    gateway_url: str | None
    shard_ids: list[int] | None = None
    shard_count: int | None = None
    step_delay: float = 2.5
    lease_seconds: float = 15.0
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    """How often the worker's heartbeat row is renewed, serving or standing by."""
    max_concurrency: int | None = None
    """IDENTIFYs Discord lets start at once (None: ask ``GET /gateway/bot``)."""
    shared_limits: bool = False
    """Pace IDENTIFYs and REST requests with the bot's other processes through ``REDIS_URL``
    (`chat.gateway.limits`); ``runbot`` turns it on."""

    @property
    def shards(self) -> ShardSet:
        return ShardSet.of(self.shard_ids, self.shard_count)

    def on_my_shards(self, guild_id: int | None) -> bool:
        """Whether the guild (None: a DM) is on this worker's shards (Discord's rule)."""
        return self.shards.owns(guild_id)


def freeze_startup_heap() -> None:
    """Move every object alive now (Django, the models, every imported module: most of a
    worker's heap) out of the garbage collector's reach (`gc.freeze`), so its full
    collections, which stop every thread, scan only what the worker made since.

    Measured in the gateway ingest bench: a full collection in the middle of a message stream
    took 170 ms of CPU with the startup heap (240,000 objects) and 30 ms without it. Frozen
    objects are still freed when nothing refers to them; only a reference cycle among them
    would never be, and the startup heap is the part of the process that lives as long as it.
    The process entry point calls it once (``runbot``), never code a test process runs many
    times."""
    gc.collect()  # what is already garbage is freed, not frozen
    gc.freeze()


def proxy_resolver_from_settings() -> ProxyResolver | None:
    """The proxy system's API (``PLURALKIT_API_BASE``); None when unset. Close it when done."""
    if not settings.PLURALKIT_API_BASE:
        return None
    return ProxyResolver(api_base=settings.PLURALKIT_API_BASE)


def build_client(
    config: WorkerConfig,
    *,
    llm: LLMClient,
    runner: AttemptRunner | None = None,
    holder: str | None = None,
    capabilities: TurnCapabilities | None = None,
    proxies: ProxyResolver | None = None,
    fence: LeaseFence = UNFENCED,
):
    """A client whose ``setup_hook`` wires the scheduler once the bot user is known, and which
    records a heartbeat under ``holder`` (default: a fresh name) while it runs;
    ``capabilities`` are what its turns are given (the vision model, the transcript service,
    the moderation service, …; default: the settings', the vision model asked through ``llm``,
    `turn_capabilities_from_settings`); ``proxies`` the proxy system's API (None: proxied
    members are not recognised); ``fence`` is asked before every send, edit, reaction and
    planner step (`LeaseKeeper` under a lease)."""
    holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    configure_discord_endpoints(api_base=config.api_base, gateway_url=config.gateway_url)
    runtimes: list[TurnRuntime] = []

    async def start(client: PersonaBotClient) -> None:
        # Where catch-up starts is fixed before the gateway can deliver anything new.
        client.intake.seed(await sync_to_async(last_ingested)(shards=config.shards))
        client.background(client.intake.run())
        own_webhooks = await sync_to_async(selectors.own_webhook_ids)()
        client.adapter.webhook_ids.update(own_webhooks)
        await _load_main_personas(client)
        taken_at = timezone.now()
        settled = await turns_reconcile_interrupted(
            port=client.adapter, on_shard=config.on_my_shards
        )
        if settled != Reconciled():
            logger.info("turns left by the previous run: %s", settled)
        client.background(_settle_left_behind(client, config, taken_at))
        runtime = gateway_runtime(
            port=FencedPort(client.adapter, fence=fence),
            fence=fence,
            windows=client.windows,
            runner=runner or AttemptRunner(client=llm),
            capabilities=capabilities or turn_capabilities_from_settings(vision_client=llm),
        )
        await sync_to_async(_configurations_warm)(runtime, config.shards)
        if client.closing:
            return  # closed while starting (the lease was lost): no loops for a closed client
        client.scheduler = Scheduler(
            runtime=runtime,
            own=client.own_identity,
            step_delay=config.step_delay,
            shards=config.shards,
        )
        client.scheduler.start()
        runtimes.append(runtime)
        synced = await _sync_commands(tree)
        logger.info("slash commands synced (%s scope(s))", synced)

        async def config_changed(message: Mapping[str, Any]) -> None:
            await _load_main_personas(client)
            await _sync_commands(tree)  # a guild configured since gets the commands
            runtime.caches.forget_contexts()
            logger.info("configuration changed; reloaded")

        client.background(listen_for_control({LiveUpdateType.CONFIG_CHANGED: config_changed}))
        client.background(_heartbeat(client, config, holder))
        logger.info("worker started (shards %s of %s)", config.shard_ids, config.shard_count)

    client = PersonaBotClient(
        shard_ids=config.shard_ids,
        shard_count=config.shard_count,
        on_start=start,
        proxies=proxies,
        window_channels=settings.WORKER_WINDOW_CHANNELS,
        recent_messages=settings.WORKER_RECENT_MESSAGES,
        limits=SharedLimits.from_url(
            settings.REDIS_URL,
            token=config.token,
            max_concurrency=config.max_concurrency,
            rest_per_second=settings.DISCORD_REST_PER_SECOND,
        )
        if config.shared_limits
        else None,
    )
    tree = client.tree = PersonaCommandTree(
        client, runtime=lambda: runtimes[0] if runtimes else None
    )
    return client


def known_latencies(latencies: Iterable[tuple[int, float]]) -> dict[int, float]:
    """The shards' gateway latencies (seconds) that are known. discord.py reports NaN until a
    shard's first heartbeat is acknowledged and infinity while it has no heartbeat running
    (between a lost session and the next); neither is a latency, and JSON cannot store them."""
    return {shard_id: latency for shard_id, latency in latencies if math.isfinite(latency)}


async def _heartbeat(client: PersonaBotClient, config: WorkerConfig, holder: str) -> None:
    """Every ``config.heartbeat_seconds``: record the connected shards, their gateway latency
    and their guilds (`chat.heartbeats`); the row is removed when the client closes."""
    try:
        while True:
            latencies = known_latencies(client.latencies)
            connected = [s.id for s in client.shards.values() if not s.is_closed()]
            try:
                await sync_to_async(worker_heartbeat_record)(
                    holder=holder,
                    shard_ids=connected,
                    shard_count=client.shard_count,
                    latencies=latencies,
                    guild_ids=[g.id for g in client.guilds],
                )
            except DatabaseError:
                logger.warning("could not record the worker heartbeat", exc_info=True)
            await asyncio.sleep(config.heartbeat_seconds)
    finally:
        with contextlib.suppress(DatabaseError):
            await asyncio.shield(sync_to_async(worker_heartbeat_clear)(holder=holder))


async def _settle_left_behind(
    client: PersonaBotClient, config: WorkerConfig, taken_at: dt.datetime
) -> None:
    """Every lease time: settle the turns of this worker's guilds begun before it took them
    (``taken_at``) and still running or delivering (`turns_reconcile_interrupted`). A worker
    that lost the lease to this one can write a turn's state after this worker's start-up
    pass (only its acts are fenced, not its database writes); without this the turn would stay
    so until the next start."""
    while True:
        await asyncio.sleep(config.lease_seconds)
        try:
            settled = await turns_reconcile_interrupted(
                port=client.adapter, on_shard=config.on_my_shards, started_before=taken_at
            )
        except DatabaseError:
            logger.warning("could not settle turns left by the previous holder", exc_info=True)
            continue
        if settled != Reconciled():
            logger.info("turns left by the previous holder, settled: %s", settled)


def _configurations_warm(runtime: TurnRuntime, shards: ShardSet) -> None:
    """Before the gateway delivers anything: read the configuration of every channel
    configured on this worker's shards into the runtime's `ChannelConfigurations`, on the
    database thread the channel loops use (opening its connection). The first pass of each
    channel then checks a version stamp instead of reading its whole configuration, so the
    worker's first second of traffic costs what any other second does."""
    now = timezone.now()
    for channel_id, guild_id in selectors.configured_channels(shards=shards):
        runtime.configurations(channel_id=channel_id, guild_id=guild_id, now=now)


async def _sync_commands(tree: PersonaCommandTree) -> int:
    """Register the slash commands for every configured guild not synced yet (or globally,
    with ``DISCORD_GLOBAL_COMMANDS``); how many scopes were synced now."""
    return await tree.sync_commands(
        guild_ids=await sync_to_async(selectors.configured_guild_ids)(),
        global_scope=settings.DISCORD_GLOBAL_COMMANDS,
    )


async def _load_main_personas(client: PersonaBotClient) -> None:
    """Which persona speaks through the bot account in each guild (for history attribution)."""
    names = await sync_to_async(selectors.main_persona_names)()
    client.adapter.main_persona_name.update(names)


async def run_worker(
    config: WorkerConfig,
    *,
    llm: LLMClient,
    stop: asyncio.Event,
    capabilities: TurnCapabilities | None = None,
    proxies: ProxyResolver | None = None,
    neighbour: bool = False,
    health: WorkerHealth | None = None,
) -> None:
    """Run until ``stop`` is set, then close the gateway and cancel every loop; while a
    gateway client runs, ``health`` (the process's monitoring endpoint) reports it.

    The worker first takes the lease of its shards (`chat.leases`), waiting as a standby while
    another worker holds one; it renews the lease while it runs. A worker that loses its lease
    (it could not renew in time) closes its gateway at once and becomes a standby again, so a
    shard never has two workers answering it. With ``neighbour`` the shards are another
    worker's own: this one first waits until that worker holds them (`LeaseKeeper.acquire`).
    At the end the worker's leases are released and its heartbeat row removed.
    """
    keeper = LeaseKeeper(
        config.shards,
        ttl=dt.timedelta(seconds=config.lease_seconds),
        heartbeat_seconds=config.heartbeat_seconds,
    )
    upkeep = asyncio.create_task(_replace_broken_connections(), name="database-upkeep")
    try:
        while await keeper.acquire(stop, after_holder=neighbour):
            neighbour = False
            running = _run_client(
                config,
                llm=llm,
                stop=stop,
                keeper=keeper,
                capabilities=capabilities,
                proxies=proxies,
                health=health or WorkerHealth(),
            )
            if not await running:
                return
            logger.warning("lost the lease of shards %s; waiting as a standby", config.shard_ids)
    finally:
        upkeep.cancel()
        await asyncio.gather(upkeep, return_exceptions=True)
        await sync_to_async(shard_leases_release)(shards=config.shards, holder=keeper.holder)
        with contextlib.suppress(DatabaseError):  # a standby's row (a serving one is gone)
            await sync_to_async(worker_heartbeat_clear)(holder=keeper.holder)


async def _replace_broken_connections() -> None:
    """Every `CONNECTION_CHECK_SECONDS`, on the sync thread the worker's loops share: a
    connection a database outage broke is closed, so the next statement opens a new one. A
    long-lived process has no requests whose start would do it (Django's
    ``close_old_connections``); without it, a connection cut in the middle of a statement
    stays closed, and every later pass, lease renewal and heartbeat fails on it. The threads
    with connections of their own (the intake, the queue consumer, the spend counters) do the
    same before each statement."""
    while True:
        await asyncio.sleep(CONNECTION_CHECK_SECONDS)
        await sync_to_async(close_old_connections)()


async def _run_client(
    config: WorkerConfig,
    *,
    llm: LLMClient,
    stop: asyncio.Event,
    keeper: LeaseKeeper,
    capabilities: TurnCapabilities | None = None,
    proxies: ProxyResolver | None = None,
    health: WorkerHealth,
) -> bool:
    """Run one gateway client while the lease holds; True when the lease was lost. Raises
    `chat.gateway.stops.GatewayStop` when Discord refuses the bot for good (a bad token,
    disallowed intents)."""
    client = build_client(
        config,
        llm=llm,
        holder=keeper.holder,
        capabilities=capabilities,
        proxies=proxies,
        fence=keeper,
    )
    async with client, health.serving(client, shards=config.shards):
        runner = asyncio.create_task(client.start(config.token), name="discord-client")
        stopper = asyncio.create_task(stop.wait(), name="stop-signal")
        renewer = asyncio.create_task(keeper.keep(), name="lease-renewal")
        done, _ = await asyncio.wait(
            {runner, stopper, renewer}, return_when=asyncio.FIRST_COMPLETED
        )
        for task in (stopper, renewer):
            task.cancel()
        if runner in done:
            try:
                runner.result()  # a login failure surfaces here
            except Exception as error:
                stop = client_stop(error, client=client)
                if stop is None:
                    raise
                raise stop from None
            return False
        await client.close()
        # discord.py keeps retrying a shard whose first connection was under way at the close
        # (with the closed session, for ever): the client's task ends here.
        runner.cancel()
        await asyncio.gather(runner, stopper, renewer, return_exceptions=True)
        return renewer in done


class LeaseKeeper:
    """Holds this worker's shard leases: waits for them, renews them, notices losing them, and
    fences every act with side effects (`chat.ports.LeaseFence`).

    The lease is trusted locally until ``ttl * 0.9`` after the start of the last claim that
    succeeded (``valid_until``): a renewal that hangs in the database past it loses the lease
    at that moment, not when the call returns, and `check` refuses from then on without asking
    the database."""

    def __init__(
        self, shards: ShardSet, *, ttl: dt.timedelta, heartbeat_seconds: float = HEARTBEAT_SECONDS
    ) -> None:
        self.shards = shards
        self.ttl = ttl
        self.heartbeat_seconds = heartbeat_seconds
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.fence: int | None = None
        self.valid_until = 0.0

    @property
    def _interval(self) -> float:
        return self.ttl.total_seconds() / 3

    def _remaining(self) -> float:
        return self.valid_until - asyncio.get_running_loop().time()

    async def acquire(self, stop: asyncio.Event, *, after_holder: bool = False) -> bool:
        """Wait until this worker holds every lease; False when ``stop`` was set first. With
        ``after_holder`` (a standby for a neighbour's own shards: that worker may start after
        this one) it first waits until another worker holds them, and claims them only then.

        While it waits the worker records a standby heartbeat (`StandbyPulse`): the shards and
        the workers holding them. The row stays when this returns; the client's heartbeat
        replaces it once connected, `run_worker` removes it at the end."""
        announced: bool | None = None
        pulse = StandbyPulse(
            holder=self.holder, shards=self.shards, every_seconds=self.heartbeat_seconds
        )
        try:
            while not stop.is_set():
                if not after_holder and await self._claim():
                    logger.info(
                        "holding the lease of shards %s (fence %s)",
                        self.shards.lease_keys,
                        self.fence,
                    )
                    return True
                holders = await self._holders()
                if holders is not None:
                    pulse.waiting_for(holders.values())
                    after_holder = after_holder and not holders
                if announced != after_holder:  # once while no worker holds them, once after
                    if after_holder:
                        logger.info(
                            "standby for shards %s: no worker holds them yet",
                            self.shards.lease_keys,
                        )
                    else:
                        logger.info("standby: waiting for the lease of shards held by %s", holders)
                    announced = after_holder
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._interval)
            return False
        finally:
            await pulse.stop()

    async def keep(self) -> None:
        """Renew every third of the lease time; return when the lease is lost: another
        worker took it, or no renewal succeeded before it lapsed (a hung call included)."""
        while True:
            await asyncio.sleep(self._interval)
            held = self.fence
            try:
                claimed = await asyncio.wait_for(self._claim(), max(self._remaining(), 0.0))
            except TimeoutError:
                claimed = None
            if claimed and self.fence == held:
                continue
            if claimed is False or (claimed and self.fence != held):
                logger.error("another worker holds the lease of shards %s", self.shards.lease_keys)
                self.valid_until = 0.0
                return
            if self._remaining() <= 0:
                logger.error("could not renew the shard lease before it lapsed")
                return

    async def check(self, guild_id: int | None) -> None:
        """Raise `LeaseLost` unless this worker still holds the guild's lease under its token:
        at once when the lease's local time ran out, else as the database says (an answer
        that comes too late counts as no)."""
        if self.fence is None or self._remaining() <= 0:
            raise LeaseLost(f"no live lease for guild {guild_id}")
        try:
            fenced = await asyncio.wait_for(
                sync_to_async(shard_lease_fenced)(
                    holder=self.holder, fence=self.fence, guild_id=guild_id
                ),
                self._remaining(),
            )
        except (TimeoutError, DatabaseError):
            fenced = False
        if not fenced:
            raise LeaseLost(f"the lease of guild {guild_id} is no longer fence {self.fence}")

    async def _holders(self) -> dict[tuple[int, int], str] | None:
        """Who holds live leases overlapping this worker's shards; None: no database answer."""
        try:
            return await sync_to_async(shard_lease_holders)(shards=self.shards)
        except DatabaseError:
            logger.warning("could not reach the database to read the shard lease holders")
            return None

    async def _claim(self) -> bool | None:
        """True: held; False: another worker holds one; None: the database did not answer."""
        started = asyncio.get_running_loop().time()
        try:
            fence = await sync_to_async(shard_leases_claim)(
                shards=self.shards, holder=self.holder, ttl=self.ttl
            )
        except DatabaseError:
            logger.warning("could not reach the database to claim the shard lease")
            return None
        if fence is None:
            return False
        self.fence = fence
        self.valid_until = started + self.ttl.total_seconds() * 0.9
        return True


class StandbyPulse:
    """A standby worker's heartbeat (`worker_standby_record`): written at once when whom it
    waits for changes (`waiting_for`), else renewed every ``every_seconds`` until `stop`."""

    def __init__(self, *, holder: str, shards: ShardSet, every_seconds: float) -> None:
        self.holder = holder
        self.shards = shards
        self.every_seconds = every_seconds
        self._holders: tuple[str, ...] | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def waiting_for(self, holders: Iterable[str]) -> None:
        """The workers holding the shards now (empty: none); starts the pulse at the first."""
        waiting = tuple(sorted(set(holders)))
        if waiting != self._holders:
            self._holders = waiting
            self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="standby-heartbeat")

    async def stop(self) -> None:
        """Stop renewing (the row stays)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            try:
                await sync_to_async(worker_standby_record)(
                    holder=self.holder, shards=self.shards, waiting_for=self._holders or ()
                )
            except DatabaseError:
                logger.warning("could not record the standby heartbeat", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.every_seconds)
