"""The scheduler (seed 003, phases 2–5): consumes the event queue and runs each channel's loop.

The worker's own messages reach the unread pools with their queue rows (the intake writes
both in one transaction) and wake their channels through `Scheduler.pools_grew`. One consumer
task moves what is still ready in the queue (rows of this worker's shards that another process
stored, or a crash left) into unread pools and wakes the channels they touched. It works on its
own thread with its own database connection, as the intake does, so new messages reach the
pools while the channel loops' database work (turns, reads, takes) keeps the shared thread busy.
Each channel runs one loop at a time: a *busy stretch* lasts while the channel has unread
messages. Turns share the channel's history window within a stretch and across the idle gaps
between stretches (`chat.windows`). At most ``max_loops`` channel loops run at once; channels
woken beyond that wait their turn in arrival order.

A pass first learns where the channel is — in which guild, or a DM — from Discord (the gateway's
channel cache, else REST), else from the guild recorded with the channel's messages at ingest;
never from whether the unread pool happens to be empty. Then reactive channels go to
`ReactiveLoop` (trigger rules) and autonomous ones to `AutonomousLoop` (the planner).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import connections

from botproject.failures import FailureStreak
from botproject.live_updates import (
    LoopState,
    LoopStateName,
    channel_group,
    publish_live_update,
)
from chat import selectors
from chat.db_connections import connections_renewed
from chat.loop.autonomous import AutonomousLoop
from chat.loop.reactive import ReactiveLoop
from chat.loop.unread_counts import UnreadCounts
from chat.selectors.event_queue import event_queue_has_ready, unread_channel_ids
from chat.services import event_queue
from chat.services.event_queue import OwnIdentity
from chat.services.turn_request import TurnRuntime
from chat.shards import EVERY_SHARD, ShardSet
from personas.models import ChannelMode

logger = logging.getLogger(__name__)

POLL_SECONDS = 5.0
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
MAX_LOOPS = 64
"""Channel loops running at once; more woken channels wait (bounded memory and connections)."""


class Scheduler:
    """Runs the worker's queue consumer and channel loops on one event loop."""

    def __init__(
        self,
        *,
        runtime: TurnRuntime,
        own: Callable[[], OwnIdentity],
        step_delay: float = 2.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        before_loop_exit: Callable[[int], Awaitable[None]] | None = None,
        shards: ShardSet = EVERY_SHARD,
        max_loops: int = MAX_LOOPS,
    ) -> None:
        """``before_loop_exit`` is awaited as a channel loop ends, after its last pass and
        before it is deregistered (a seam for tests of that window)."""
        self._runtime = runtime
        self._shards = shards
        self._loop_slots = asyncio.Semaphore(max_loops)
        self.running_loops = 0
        """Channel loops holding a slot now (never more than ``max_loops``)."""
        self.most_running_loops = 0
        self._before_loop_exit = before_loop_exit
        self._stopping = False
        self._own = own
        self._counts = UnreadCounts()
        self._reactive = ReactiveLoop(runtime=runtime, own=own, counts=self._counts)
        self._autonomous = AutonomousLoop(runtime=runtime, step_delay=step_delay, sleep=sleep)
        self._wakeup = asyncio.Event()
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._dirty: set[int] = set()
        self._failures: dict[int, FailureStreak] = {}
        self._consumer: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self._queue_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="queue-db")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start consuming; pools left by an earlier run are resumed at once."""
        self._consumer = asyncio.create_task(self._consume_forever(), name="queue-consumer")
        self.wake()

    async def stop(self) -> None:
        """Cancel the consumer and every channel loop, and wait for them to end; then close
        the database connections of the queue's and the spend counters' threads."""
        self._stopping = True
        tasks = [
            t for t in (self._consumer, *self._loops.values(), *self._publishing) if t is not None
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()
        await self._counts.close()
        await self._on_queue_thread(connections.close_all)()
        await self._runtime.spend.close()

    def wake(self) -> None:
        """New events are in the queue."""
        self._wakeup.set()

    def pools_grew(self, moved: event_queue.Consumed) -> None:
        """The intake moved messages straight into unread pools (`Intake`, with the queue
        rows): the dashboard hears the new pool sizes at once (a channel whose loop is busy
        with a turn would otherwise say so only after it), then their channels run a pass, as
        after a consume."""
        if self._stopping or not moved.unread:
            return
        task = asyncio.create_task(self._announce_and_schedule(moved))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _announce_and_schedule(self, moved: event_queue.Consumed) -> None:
        await self._counts.announce(moved.pool_sizes)
        for channel_id in moved.channel_ids:
            self.schedule(channel_id)

    async def idle(self) -> None:
        """Wait until the queue is consumed, every pool that grew has its loop scheduled, no
        channel loop runs and every model call is counted (used by tests)."""
        while True:
            await asyncio.sleep(0.05)
            ready = await sync_to_async(event_queue_has_ready)(shards=self._shards)
            busy = self._loops or self._publishing
            if not busy and not ready and not self._wakeup.is_set():
                await self._runtime.spend.settled()
                return

    # -- consumption -------------------------------------------------------------------------

    def _on_queue_thread(self, func):
        """``func`` run on the consumer's own thread (and database connection)."""
        return sync_to_async(func, thread_sensitive=False, executor=self._queue_thread)

    async def _consume_forever(self) -> None:
        first = True
        consuming = FailureStreak(logger, "consuming the event queue")
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=POLL_SECONDS)
            self._wakeup.clear()
            try:
                consumed = await self._on_queue_thread(self._consume)(self._own())
                channel_ids = consumed.channel_ids
                if first:
                    channel_ids += await self._on_queue_thread(unread_channel_ids)(
                        shards=self._shards
                    )
                    first = False
            except Exception as error:
                consuming.failed(error)
                continue
            consuming.succeeded()
            if consumed.full:  # drain: more rows are ready, no need to wait for a wake-up
                self._wakeup.set()
            await self._counts.announce(consumed.pool_sizes)
            for channel_id in dict.fromkeys(channel_ids):
                self.schedule(channel_id)

    def _consume(self, own: OwnIdentity) -> event_queue.Consumed:
        connections_renewed()  # one an outage broke is replaced, not reused
        return event_queue.event_queue_consume(own=own, shards=self._shards)

    def schedule(self, channel_id: int) -> None:
        """Make sure the channel's loop runs another pass (start it if it is not running)."""
        self._dirty.add(channel_id)
        if channel_id not in self._loops and not self._stopping:
            task = asyncio.create_task(self._channel_loop(channel_id), name=f"channel-{channel_id}")
            self._loops[channel_id] = task
            task.add_done_callback(lambda _: self._loop_ended(channel_id))

    def _retry_later(self, channel_id: int, error: Exception) -> None:
        """A pass failed (the database or Discord went away): its messages stay unread and
        the channel is tried again after a pause that grows with each failure in a row."""
        streak = self._failures.setdefault(
            channel_id, FailureStreak(logger, f"a pass over channel {channel_id}")
        )
        streak.failed(error)
        delay = RETRY_SECONDS[min(streak.count, len(RETRY_SECONDS)) - 1]
        asyncio.get_running_loop().call_later(delay, self.schedule, channel_id)

    def _loop_ended(self, channel_id: int) -> None:
        """A channel loop ended. Work that arrived while it was ending (after its last pass
        looked, before this deregistration) starts a new loop: no wake-up is lost."""
        self._loops.pop(channel_id, None)
        if channel_id in self._dirty:
            self.schedule(channel_id)

    async def _channel_loop(self, channel_id: int) -> None:
        """One busy stretch: run until no new work arrived during the last pass."""
        async with self._loop_slots:
            self.running_loops += 1
            self.most_running_loops = max(self.most_running_loops, self.running_loops)
            try:
                await self._busy_stretch(channel_id)
            finally:
                self.running_loops -= 1

    async def _busy_stretch(self, channel_id: int) -> None:
        group = channel_group(channel_id)
        await publish_live_update(group, LoopState(state=LoopStateName.BUSY))
        try:
            while channel_id in self._dirty:
                self._dirty.discard(channel_id)
                try:
                    await self._channel_pass(channel_id)
                except Exception as error:
                    self._retry_later(channel_id, error)
                    return
                streak = self._failures.pop(channel_id, None)
                if streak is not None:
                    streak.succeeded()
        finally:
            await publish_live_update(group, LoopState(state=LoopStateName.IDLE))
            if self._before_loop_exit is not None:
                await self._before_loop_exit(channel_id)

    async def _channel_pass(self, channel_id: int) -> None:
        guild = await self._channel_guild(channel_id)
        if guild is None:
            logger.warning(
                "channel %s: Discord cannot say where it is and nothing was recorded; "
                "its messages stay unread",
                channel_id,
            )
            return
        configuration = await sync_to_async(self._runtime.configurations)(
            channel_id=channel_id, guild_id=guild.guild_id, now=self._runtime.clock()
        )
        if configuration is None or not configuration.settings.enabled:
            taken = await sync_to_async(event_queue.unread_pool_take)(channel_id=channel_id)
            logger.info("channel %s is not served; %d messages dropped", channel_id, len(taken))
            return
        if configuration.settings.mode == ChannelMode.AUTONOMOUS:
            await self._autonomous.run(configuration)
        else:
            await self._reactive.run(configuration)

    async def _channel_guild(self, channel_id: int) -> selectors.KnownGuild | None:
        """Where the channel is: Discord's answer, else the guild its messages were ingested
        with; None when neither knows."""
        place = await self._runtime.port.locate_channel(channel_id)
        if place is not None:
            return selectors.KnownGuild(place.guild_id)
        return await sync_to_async(selectors.channel_guild_id)(channel_id=channel_id)
