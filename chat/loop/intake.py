"""Ingest that never drops a message: a bounded buffer in front of the event queue, and
catch-up over REST for whatever the buffer could not keep or the worker never saw.

The gateway hands every message to `Intake.put`, which never blocks and never raises. A writer
task stores buffered messages in the persisted event queue in batches; when the database fails
it keeps them and retries with backoff (one log line per failure streak, one on recovery). If
the buffer overflows while the database is away, the channel of a message that could not be
kept is marked with where its read-back starts, and its messages are read back later.

Catch-up (`Intake.catch_up`) reads a channel's messages over REST after the last one this
worker took in (at start: the last one the event queue holds, `Intake.seed`) and puts them
through the same path, so the event queue's (channel, message) key keeps every message exactly
once. The worker runs it whenever it may have missed messages: when a gateway session starts
(at start, and after a resume Discord refused), and for marked channels once the database is
back. The starting points are taken the moment catch-up begins, so live messages arriving
meanwhile never move them past a gap.

The rule all of this keeps: the queue never holds a message newer than a gap in its channel,
so a worker stopped or killed at any point leaves the next one starting points before the gap.
While a shard's new session is caught up, its live messages are held (`Intake.hold`) and
stored with the read-back ones, sorted, once the catch-up has read every channel; a marked
channel's live messages wait for its read-back and are stored sorted with it (while the
buffer is full they are left to the read-back itself). As a shard's messages are stored in
order, the queue holds every message of a guild up to the newest one it holds of that guild:
where a channel it has never seen starts (`Intake.adopt`). What this does not cover: messages
beyond `CATCH_UP_LIMIT` in one channel's read-back, a channel whose history cannot be read
(`READ_BACK_ATTEMPTS`), and a channel the queue never saw whose first messages the buffer
lost, when the worker stops before reading them back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from botproject.failures import FailureStreak
from chat import metrics
from chat.db_connections import connections_renewed
from chat.pipeline.types import HistoryMessage
from chat.selectors.event_queue import LastIngested
from chat.services import event_queue
from chat.services.event_queue import Consumed, OwnIdentity
from chat.shards import EVERY_SHARD, ShardSet

logger = logging.getLogger(__name__)

BUFFER_SIZE = 10_000
BATCH_SIZE = 500
CATCH_UP_LIMIT = 100
"""Most messages read back per channel in one catch-up: the oldest ones after its start (a
channel with more misses the newer ones beyond the limit)."""
RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
READ_BACK_ATTEMPTS = 5
"""Failed read-backs in a row after which a channel's waiting messages are stored without it
(a channel whose history cannot be read must not go unheard for good)."""

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
        self._buffered_at: deque[float] = deque()
        """When each buffered message entered the buffer (`time.perf_counter`), in step with
        ``_buffer``: ingest latency (`chat.metrics.INGEST_SECONDS`) runs from there to the
        commit of its batch."""
        self._buffer_size = buffer_size
        self._pending = asyncio.Event()
        self._sleep = sleep
        self._writing = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-db")
        self.marked: dict[int, int] = {}
        """Channels with messages the buffer could not keep, each with where its read-back
        starts (before the first message lost): caught up once writes succeed. Until then
        their messages are not stored (they are read back)."""
        self.guilds: dict[int, int | None] = {}
        """The guild of each channel seen (None: a DM), for catch-up."""
        self.last_seen: dict[int, int] = {}
        """Per channel, the newest message taken in (the queue's, before this worker's)."""
        self._held: dict[int, list[tuple[HistoryMessage, int | None]]] = {}
        """Per shard being caught up: the messages taken in meanwhile (`hold`)."""
        self._waiting: dict[int, list[tuple[HistoryMessage, int | None]]] = {}
        """Per channel marked or being read back: its live messages since, until its read-back
        is put (`catch_up`)."""
        self._reading: set[int] = set()
        """Channels a catch-up is reading now (it puts their waiting messages with the read)."""
        self._failed: dict[int, int] = {}
        """Per channel, how many read-backs in a row failed."""
        self._caught_up: set[int] = set()
        """Shards this worker has caught up once: it took in everything said there since."""
        self.guilds_oldest: int | None = None
        """The oldest of the newest messages the queue held per guild of this worker's shards
        at start (None: it held nothing): where catch-up starts in a guild it has never seen."""

    def seed(self, last: LastIngested) -> None:
        """Start from what the event queue holds (call before the gateway connects)."""
        for channel_id, message_id in last.ids.items():
            self._saw(channel_id, message_id)
            self.guilds.setdefault(channel_id, last.guild_of(channel_id))
        self.guilds_oldest = min(self._newest_per_guild(last.ids).values(), default=None)

    def adopt(
        self, channels: Mapping[int, int | None], starts: dict[int, int], *, shard_id: int
    ) -> None:
        """Channels (with their guilds) on shard ``shard_id`` whose session is ready, and
        ``starts``, its catch-up starting points taken when the session began: a channel that
        has none (the queue never saw it) starts at the newest start of its guild; in a guild
        with none, at `guilds_oldest` on the shard's first session, at the shard's newest start
        on a later one. Nothing is adopted on a first start, when the queue holds nothing of
        this worker's shards.

        Why these bounds: a guild is on one shard under any shard count, and the worker that
        ran that shard stored its messages in order until it stopped (`hold`), so no gap lies
        before the newest message of the guild. A guild the queue holds nothing of came from an
        old shard whose last point is unknown, and after a reshard to a count that is not a
        multiple of the old one (4 → 6, 8 → 12, 16 → 8) a shard's guilds come from several old
        shards that stopped at different points: the newest of the shard can lie past the gap
        of another old shard. No guild of an old shard is newer than where that shard stopped,
        so the oldest guild's newest lies before every such point (of the old shards with a
        guild the queue holds on this worker's shards). Once this worker has caught the shard
        up, it took in everything said there itself, so the shard's newest start is the
        bound. Each channel still reads at most `CATCH_UP_LIMIT` messages."""
        if self.guilds_oldest is None:
            return
        guild_newest = self._newest_per_guild(starts)
        if shard_id in self._caught_up:
            unseen_guild = max(starts.values(), default=self.guilds_oldest)
        else:
            unseen_guild = self.guilds_oldest
        for channel_id, guild_id in channels.items():
            if channel_id not in starts:
                start = guild_newest.get(guild_id, unseen_guild)
                starts[channel_id] = start
                self.last_seen.setdefault(channel_id, start)
                self.guilds.setdefault(channel_id, guild_id)

    def _newest_per_guild(self, ids: Mapping[int, int]) -> dict[int | None, int]:
        """Of ``ids`` (a message id per channel), the newest per guild of the channels."""
        newest: dict[int | None, int] = {}
        for channel_id, message_id in ids.items():
            guild = self.guilds.get(channel_id)
            newest[guild] = max(newest.get(guild, 0), message_id)
        return newest

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
        shard is caught up); never blocks, never raises. A message of a channel that is marked
        or being read back waits for its read-back (`catch_up`); when the buffer is full it is
        left to that read-back instead."""
        channel_id = message.channel_id
        self.guilds[channel_id] = guild_id
        if shard_id is not None and shard_id in self._held:
            self._held[shard_id].append((message, guild_id))
            return
        full = len(self._buffer) >= self._buffer_size
        if channel_id in self._waiting:
            if full:
                self._mark(channel_id, message.id - 1)
            else:
                self._waiting[channel_id].append((message, guild_id))
            self._pending.set()  # the writer retries the read-back
            return
        if full:
            self._mark(
                channel_id, min(self.last_seen.get(channel_id, message.id - 1), message.id - 1)
            )
            logger.error(
                "ingest buffer full (%d messages): channel %s will be caught up over REST",
                self._buffer_size,
                channel_id,
            )
            return
        self._buffer.append((message, guild_id))
        self._buffered_at.append(time.perf_counter())
        self._saw(channel_id, message.id)
        self._pending.set()

    def _mark(self, channel_id: int, start: int) -> None:
        """Read ``channel_id`` back from ``start`` (or from its mark's, if before); its messages
        wait until then."""
        self.marked[channel_id] = min(start, self.marked.get(channel_id, start))
        self._waiting.setdefault(channel_id, [])

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
        Its database connection is opened at once (the first message does not wait for it)
        and closed when it ends."""
        try:
            await self._on_own_thread(_connect)()
            await self._write_forever()
        finally:
            await asyncio.shield(self._on_own_thread(connections.close_all)())

    async def _write_forever(self) -> None:
        storing = FailureStreak(logger, "storing incoming messages")
        while True:
            await self._pending.wait()
            size = min(BATCH_SIZE, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(size)]
            buffered_at = [self._buffered_at.popleft() for _ in range(size)]
            if not self._buffer:
                self._pending.clear()
            if not batch:
                if self.marked:  # a marked channel's message woke the writer: retry it
                    await self.catch_up(self.marked)
                continue
            self._writing = True
            own = self._own() if self._own is not None else None
            try:
                moved = await self._on_own_thread(_store)(batch, own, self._shards)
            except DatabaseError as error:
                self._writing = False
                self._buffer.extendleft(reversed(batch))
                self._buffered_at.extendleft(reversed(buffered_at))
                self._pending.set()
                storing.failed(error)
                pause = RETRY_SECONDS[min(storing.count, len(RETRY_SECONDS)) - 1]
                await self._sleep(pause)
                continue
            storing.succeeded()
            _ingested(buffered_at)
            self._stored(moved)
            self._writing = False
            if self.marked:
                await self.catch_up(self.marked)

    def session_starts(self, channel_ids: Iterable[int]) -> dict[int, int]:
        """Where the channels' catch-up starts for a session that begins now: the newest
        message taken in so far (later ones arrive live, before the catch-up runs), or a
        marked channel's read-back start when that lies before."""
        return {c: start for c in channel_ids if (start := self._start(c)) is not None}

    def _start(self, channel_id: int, given: int | None = None) -> int | None:
        """Where ``channel_id`` is read back from: ``given``, else the newest message taken in;
        its mark's start when that lies before (or is all there is)."""
        start = given if given is not None else self.last_seen.get(channel_id)
        marked = self.marked.get(channel_id)
        if marked is not None and (start is None or marked < start):
            return marked
        return start

    async def catch_up(
        self,
        channel_ids: Iterable[int] | None = None,
        *,
        starts: Mapping[int, int] | None = None,
        shard_id: int | None = None,
    ) -> int:
        """Read back what each channel (default: every channel taken in or marked so far) has
        after its entry in ``starts`` (taken when its session began: messages that arrived
        live since must not move the start past the gap), else after the newest message taken
        in; a marked channel from its mark's start when that lies before. Returns how many
        messages were read back. A channel with no starting point at all is skipped.

        What is read back is put in order with the channel's live messages since the
        catch-up began (and since it was marked), so none of them is stored before the gap is
        filled. With ``shard_id`` they join the messages held for the shard (`hold`), all
        stored sorted once every channel was read (none if the catch-up is cancelled first).
        A channel whose history cannot be read now is marked from the start it was read from,
        its messages still waiting; the writer retries it after its next batch or message. After
        `READ_BACK_ATTEMPTS` failures in a row its waiting messages are stored without it."""
        given = starts or {}
        chosen = dict.fromkeys(
            [*self.last_seen, *self.marked] if channel_ids is None else channel_ids
        )
        starts = {
            channel_id: start
            for channel_id in chosen
            if (start := self._start(channel_id, given.get(channel_id))) is not None
        }
        ours = {channel_id for channel_id in starts if channel_id not in self._reading}
        for channel_id in ours:
            self.marked.pop(channel_id, None)
            self._waiting.setdefault(channel_id, [])
        self._reading |= ours
        count = 0
        try:
            for channel_id, after in starts.items():
                try:
                    messages = await self._read_after(channel_id, after, CATCH_UP_LIMIT)
                except Exception:
                    if channel_id in ours:
                        self._reading.discard(channel_id)
                        self._read_back_failed(channel_id, after, shard_id=shard_id)
                    continue
                count += len(messages)
                guild = self.guilds.get(channel_id)
                read = [(message, guild) for message in messages]
                if channel_id in ours:
                    self._reading.discard(channel_id)
                    self._failed.pop(channel_id, None)
                    read += self._waiting.pop(channel_id, [])
                    if channel_id in self.marked:  # the buffer overflowed again meanwhile
                        self._waiting[channel_id] = []
                self._put_sorted(read, shard_id=shard_id)
        finally:
            for channel_id in ours & self._reading:  # cancelled: left to the next read-back
                self._reading.discard(channel_id)
                self._mark(channel_id, starts[channel_id])
        if shard_id is not None:
            self._release(shard_id)
        if count:
            logger.info("caught up %d messages in %d channels", count, len(starts))
        return count

    def _read_back_failed(self, channel_id: int, after: int, *, shard_id: int | None) -> None:
        failures = self._failed.get(channel_id, 0) + 1
        if failures < READ_BACK_ATTEMPTS:
            logger.warning("could not catch up channel %s; will retry", channel_id)
            self._failed[channel_id] = failures
            self._mark(channel_id, after)
            return
        logger.error(
            "could not catch up channel %s after %d attempts: storing its new messages without"
            " what it had after message %s",
            channel_id,
            failures,
            after,
        )
        self._failed.pop(channel_id, None)
        self.marked.pop(channel_id, None)
        self._put_sorted(self._waiting.pop(channel_id, []), shard_id=shard_id)

    def _release(self, shard_id: int) -> None:
        self._put_sorted(self._held.pop(shard_id, []))
        self._caught_up.add(shard_id)

    def _put_sorted(
        self, messages: list[tuple[HistoryMessage, int | None]], *, shard_id: int | None = None
    ) -> None:
        """Put ``messages`` oldest first, each id once."""
        unique = {message.id: (message, guild) for message, guild in messages}
        for message_id in sorted(unique):
            self.put(*unique[message_id], shard_id=shard_id)


def _ingested(buffered_at: list[float]) -> None:
    """A batch is committed: how long each of its messages took from the buffer to here."""
    now = time.perf_counter()
    for moment in buffered_at:
        metrics.INGEST_SECONDS.observe(now - moment)


def _connect() -> None:
    """Open this thread's database connection now; when the database is down, the first write
    retries as any write does."""
    try:
        connections["default"].ensure_connection()
    except DatabaseError as error:
        logger.warning("the intake cannot reach the database yet: %s", error)


def _store(
    batch: list[tuple[HistoryMessage, int | None]], own: OwnIdentity | None, shards: ShardSet
) -> Consumed:
    connections_renewed()  # one an outage broke is replaced, not reused
    return event_queue.event_ingest_many(batch=batch, own=own, shards=shards)
