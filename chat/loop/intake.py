"""Ingest that never drops a message: a bounded buffer in front of the event queue, and
catch-up over REST for whatever the buffer could not keep or the worker never saw.

The gateway hands every message to `Intake.put`, which never blocks and never raises. A writer
task stores buffered messages in the persisted event queue in batches; when the database fails
it keeps them and retries with backoff (one log line per failure streak, one on recovery). If
the buffer overflows while the database is away, the channel of each message that could not be
kept is marked, and the message is read back later.

Catch-up (`Intake.catch_up`) reads a channel's messages over REST after the last one this
worker took in (at start: the last one the event queue holds, `Intake.seed`) and puts them
through the same path, so the event queue's (channel, message) key keeps every message exactly
once. The worker runs it whenever it may have missed messages: when a gateway session starts
(at start, and after a resume Discord refused), and for marked channels once the database is
back. The starting points are taken the moment catch-up begins, so live messages arriving
meanwhile never move them past a gap. While a shard's new session is caught up, its live
messages are held (`Intake.hold`) and stored with the read-back ones, sorted, once the
catch-up has read every channel: the queue never holds a message newer than a gap, so a
worker stopped or killed mid-catch-up leaves the next one starting points before the gap.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import DatabaseError, close_old_connections, connections

from botproject.failures import FailureStreak
from chat.pipeline.types import HistoryMessage
from chat.selectors.event_queue import LastIngested
from chat.services import event_queue
from chat.services.event_queue import Consumed, OwnIdentity
from chat.shards import EVERY_SHARD, ShardSet

logger = logging.getLogger(__name__)

BUFFER_SIZE = 10_000
BATCH_SIZE = 500
CATCH_UP_LIMIT = 100
"""Most messages read back per channel in one catch-up (older ones are left alone)."""
RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)

ReadAfter = Callable[[int, int, int], Awaitable[list[HistoryMessage]]]
"""``(channel_id, after_id, limit)`` → messages newer than ``after_id``, oldest first."""


class Intake:
    """The worker's front door for messages (one per worker, used from its event loop)."""

    def __init__(
        self,
        *,
        stored: Callable[[Consumed], None],
        read_after: ReadAfter,
        own: Callable[[], OwnIdentity] | None = None,
        shards: ShardSet = EVERY_SHARD,
        buffer_size: int = BUFFER_SIZE,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``stored`` is called with what each batch moved into unread pools once it is
        committed (wake those channels); ``read_after`` reads a channel's history over REST.
        With ``own`` (the worker's identity, asked at each batch), messages of guilds on
        ``shards`` go straight into their unread pools with their queue rows
        (`event_queue.event_ingest_many`); without, they are left ready in the queue."""
        self._stored = stored
        self._own = own
        self._shards = shards
        self._read_after = read_after
        self._buffer: deque[tuple[HistoryMessage, int | None]] = deque()
        self._buffer_size = buffer_size
        self._pending = asyncio.Event()
        self._sleep = sleep
        self._writing = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-db")
        self.marked: set[int] = set()
        """Channels with messages the buffer could not keep: caught up once writes succeed."""
        self.guilds: dict[int, int | None] = {}
        """The guild of each channel seen (None: a DM), for catch-up."""
        self.last_seen: dict[int, int] = {}
        """Per channel, the newest message taken in (the queue's, before this worker's)."""
        self._held: dict[int, list[tuple[HistoryMessage, int | None]]] = {}
        """Per shard being caught up: the messages taken in meanwhile (`hold`)."""
        self.shards_newest: int | None = None
        """The newest message the queue held for any channel of this worker's shards at start:
        where catch-up starts in a channel the queue has never seen."""

    def seed(self, last: LastIngested) -> None:
        """Start from what the event queue holds (call before the gateway connects)."""
        for channel_id, message_id in last.ids.items():
            self._saw(channel_id, message_id)
            self.guilds.setdefault(channel_id, last.guild_of(channel_id))
        self.shards_newest = max(last.ids.values(), default=None)

    def adopt(self, channels: Mapping[int, int | None], starts: dict[int, int]) -> None:
        """Channels (with their guilds) on a shard whose session is ready, and ``starts``, its
        catch-up starting points taken when the session began: a channel that has none (the
        queue never saw it) starts at the newest start of its guild, else of the shard, else
        `shards_newest`, as whatever was said there since is newer: the worker that ran the
        shard before stored its messages in order until it stopped. Nothing is adopted on a
        first start, when the queue holds nothing of these shards."""
        if self.shards_newest is None:
            return
        # The queue holds each shard's messages up to a point (`hold`): the newest one of the
        # channel's guild, else of the shard, is a bound no gap lies before; only a shard the
        # queue has nothing of falls back to the newest of all this worker's shards.
        shard_newest = max(starts.values(), default=self.shards_newest)
        guild_newest: dict[int | None, int] = {}
        for channel_id, message_id in starts.items():
            guild = self.guilds.get(channel_id)
            guild_newest[guild] = max(guild_newest.get(guild, 0), message_id)
        for channel_id, guild_id in channels.items():
            if channel_id not in starts:
                start = guild_newest.get(guild_id, shard_newest)
                starts[channel_id] = start
                self.last_seen.setdefault(channel_id, start)
                self.guilds.setdefault(channel_id, guild_id)

    def _saw(self, channel_id: int, message_id: int) -> None:
        if message_id > self.last_seen.get(channel_id, 0):
            self.last_seen[channel_id] = message_id

    def hold(self, shard_id: int) -> None:
        """A new session of ``shard_id`` began: its messages are held until its catch-up
        (`catch_up` with this ``shard_id``) has read every channel, then stored with what it
        read, oldest first. Held messages a stopped worker never stored are read back by the
        next one, from starting points the queue still holds before the gap."""
        self._held.setdefault(shard_id, [])

    def put(
        self, message: HistoryMessage, guild_id: int | None, *, shard_id: int | None = None
    ) -> None:
        """Take one message from the gateway (from ``shard_id``'s session: held while that
        shard is caught up); never blocks, never raises."""
        self.guilds[message.channel_id] = guild_id
        if shard_id is not None and shard_id in self._held:
            self._held[shard_id].append((message, guild_id))
            return
        if len(self._buffer) >= self._buffer_size:
            self.marked.add(message.channel_id)
            logger.error(
                "ingest buffer full (%d messages): channel %s will be caught up over REST",
                self._buffer_size,
                message.channel_id,
            )
            return
        self._buffer.append((message, guild_id))
        self._saw(message.channel_id, message.id)
        self._pending.set()

    @property
    def idle(self) -> bool:
        """Nothing buffered and no batch being written (every message taken in is queued)."""
        return not self._buffer and not self._writing

    def _on_own_thread(self, func):
        """``func`` run on the intake's own thread, with its own database connection, so the
        writes of a burst never queue behind the turns' database work (and vice versa)."""
        return sync_to_async(func, thread_sensitive=False, executor=self._executor)

    async def run(self) -> None:
        """Store buffered messages until cancelled; retry forever while the database fails.
        Its database connection is closed when it ends."""
        try:
            await self._write_forever()
        finally:
            await asyncio.shield(self._on_own_thread(connections.close_all)())

    async def _write_forever(self) -> None:
        storing = FailureStreak(logger, "storing incoming messages")
        while True:
            await self._pending.wait()
            batch = [self._buffer.popleft() for _ in range(min(BATCH_SIZE, len(self._buffer)))]
            if not self._buffer:
                self._pending.clear()
            if not batch:
                continue
            self._writing = True
            own = self._own() if self._own is not None else None
            try:
                moved = await self._on_own_thread(_store)(batch, own, self._shards)
            except DatabaseError as error:
                self._writing = False
                self._buffer.extendleft(reversed(batch))
                self._pending.set()
                storing.failed(error)
                pause = RETRY_SECONDS[min(storing.count, len(RETRY_SECONDS)) - 1]
                await self._sleep(pause)
                continue
            storing.succeeded()
            self._stored(moved)
            self._writing = False
            if self.marked:
                await self.catch_up(self.marked)

    def session_starts(self, channel_ids: Iterable[int]) -> dict[int, int]:
        """Where the channels' catch-up starts for a session that begins now: the newest
        message taken in so far (later ones arrive live, before the catch-up runs)."""
        return {c: self.last_seen[c] for c in channel_ids if c in self.last_seen}

    async def catch_up(
        self,
        channel_ids: Iterable[int] | None = None,
        *,
        starts: Mapping[int, int] | None = None,
        shard_id: int | None = None,
    ) -> int:
        """Read back what each channel (default: every channel taken in so far) has after the
        newest message taken in, or after its entry in ``starts`` (taken when its session
        began: messages that arrived live since must not move the start past the gap);
        returns how many messages were put through. A channel with no starting point is
        skipped; one whose history cannot be read now stays marked. With ``shard_id``, the
        messages held for that shard (`hold`) are stored with the read-back ones once every
        channel was read (none if the catch-up is cancelled first)."""
        given = starts or {}
        starts = {
            channel_id: given.get(channel_id, self.last_seen[channel_id])
            for channel_id in (self.last_seen if channel_ids is None else list(channel_ids))
            if channel_id in self.last_seen
        }
        self.marked.difference_update(starts)
        count = 0
        for channel_id, after in starts.items():
            try:
                messages = await self._read_after(channel_id, after, CATCH_UP_LIMIT)
            except Exception:
                logger.warning("could not catch up channel %s; will retry", channel_id)
                self.marked.add(channel_id)
                continue
            for message in messages:
                self.put(message, self.guilds.get(channel_id), shard_id=shard_id)
            count += len(messages)
        if shard_id is not None:
            self._release(shard_id)
        if count:
            logger.info("caught up %d messages in %d channels", count, len(starts))
        return count

    def _release(self, shard_id: int) -> None:
        held = {message.id: (message, guild) for message, guild in self._held.pop(shard_id, [])}
        for message_id in sorted(held):
            self.put(*held[message_id])


def _store(
    batch: list[tuple[HistoryMessage, int | None]], own: OwnIdentity | None, shards: ShardSet
) -> Consumed:
    close_old_connections()  # a connection broken by an outage is replaced, not reused
    return event_queue.event_ingest_many(batch, own=own, shards=shards)
