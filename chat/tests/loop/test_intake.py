"""The intake in front of the event queue: bursts, duplicates, overflow and catch-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.loop.intake import READ_BACK_ATTEMPTS, Intake
from chat.models import EventQueue, UnreadEvent
from chat.selectors.event_queue import LastIngested, last_ingested, unread_pool_messages
from chat.services.event_queue import OwnIdentity, event_queue_consume
from chat.tests.e2e.conftest import eventually
from chat.tests.factories import message

pytestmark = pytest.mark.django_db(transaction=True)

CHANNELS = [100 + n for n in range(10)]


class History:
    """A REST history read-back the test controls."""

    def __init__(self) -> None:
        self.messages: dict[int, list] = {}
        self.reads: list[tuple[int, int, int]] = []
        self.broken: set[int] = set()
        """Channels whose history cannot be read now."""

    async def read_after(self, channel_id: int, after_id: int, limit: int) -> list:
        self.reads.append((channel_id, after_id, limit))
        if channel_id in self.broken:
            raise ConnectionError(f"channel {channel_id} cannot be read")
        return [m for m in self.messages.get(channel_id, []) if m.id > after_id][:limit]


@contextlib.asynccontextmanager
async def writing(intake: Intake) -> AsyncIterator[None]:
    """The intake's writer runs while open."""
    writer = asyncio.create_task(intake.run())
    try:
        yield
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def drain(intake: Intake) -> None:
    async with writing(intake):
        await eventually(lambda: intake.idle)


async def queued_once_stored(*, channel_id: int, count: int) -> list[int]:
    """The channel's message ids in queue order, once ``count`` of them are stored."""
    rows = EventQueue.objects.filter(channel_id=channel_id).order_by("id")

    async def all_stored() -> bool:
        return await rows.acount() == count

    await eventually(all_stored)
    return await sync_to_async(list)(rows.values_list("message_id", flat=True))


async def test_the_writer_connects_before_the_first_message_arrives():
    intake = Intake(stored=lambda _: None, read_after=History().read_after)

    def connected() -> bool:
        return connections["default"].connection is not None

    async with writing(intake):
        await eventually(lambda: intake._on_own_thread(connected)())
        assert intake.idle  # nothing was written: the connection waits for the first message


async def test_a_burst_of_5000_messages_is_queued_and_pooled_once_in_order():
    burst = [message(content=f"m{n}", channel_id=CHANNELS[n % 10]) for n in range(5000)]
    stored = []
    intake = Intake(stored=lambda _: stored.append(1), read_after=History().read_after)
    for msg in burst + burst[:300]:  # the gateway replays some of them
        intake.put(msg, 7)

    await drain(intake)
    while (await sync_to_async(event_queue_consume)(own=OwnIdentity(bot_user_id=1))).full:
        pass

    assert await EventQueue.objects.acount() == 5000
    assert await UnreadEvent.objects.acount() == 5000
    for channel_id in CHANNELS:
        pooled = await sync_to_async(unread_pool_messages)(channel_id=channel_id)
        assert [m.id for m in pooled] == [m.id for m in burst if m.channel_id == channel_id]
    assert stored  # the scheduler was woken
    await sync_to_async(connections.close_all)()


async def test_with_the_workers_identity_a_burst_reaches_the_pools_as_it_is_stored():
    burst = [message(content=f"m{n}", channel_id=CHANNELS[n % 10]) for n in range(2000)]
    told: list[int] = []
    intake = Intake(
        stored=lambda moved: told.extend(m.id for _, m in moved.unread),
        read_after=History().read_after,
        own=lambda: OwnIdentity(bot_user_id=1),
    )
    for msg in burst + burst[:300]:  # the gateway replays some of them
        intake.put(msg, 7)

    await drain(intake)

    assert sorted(told) == sorted(m.id for m in burst)  # each told once, nothing left over
    assert not await EventQueue.objects.filter(status=EventQueue.Status.READY).aexists()
    for channel_id in CHANNELS:
        pooled = await sync_to_async(unread_pool_messages)(channel_id=channel_id)
        assert [m.id for m in pooled] == [m.id for m in burst if m.channel_id == channel_id]
    await sync_to_async(connections.close_all)()


async def test_an_overflowing_buffer_marks_the_channel_and_catch_up_reads_it_back():
    history = History()
    kept, lost = message(content="kept", channel_id=5), message(content="lost", channel_id=5)
    history.messages[5] = [kept, lost]
    intake = Intake(stored=lambda _: None, read_after=history.read_after, buffer_size=1)

    intake.put(kept, 7)
    intake.put(lost, 7)  # no room: dropped, and channel 5 marked

    assert intake.marked == {5: kept.id}
    await drain(intake)  # stores `kept`, then catches channel 5 up after it
    assert history.reads == [(5, kept.id, 100)]
    await drain(intake)
    ids = await sync_to_async(list)(EventQueue.objects.values_list("message_id", flat=True))
    assert sorted(ids) == [kept.id, lost.id]
    assert intake.marked == {}
    await sync_to_async(connections.close_all)()


async def test_catch_up_starts_where_the_session_began_not_after_live_arrivals():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    seen = message(content="before the gap", channel_id=CHANNELS[0])
    intake.put(seen, 7)
    starts = intake.session_starts([CHANNELS[0]])  # the new session begins here
    gap = message(content="said while no session was open", channel_id=CHANNELS[0])
    live = message(content="arrived live before the shard was ready", channel_id=CHANNELS[0])
    history.messages[CHANNELS[0]] = [seen, gap, live]
    intake.put(live, 7)

    await intake.catch_up(starts=starts)

    assert history.reads == [(CHANNELS[0], seen.id, 100)]
    await drain(intake)
    stored = await sync_to_async(
        lambda: sorted(EventQueue.objects.values_list("message_id", flat=True))
    )()
    assert stored == [seen.id, gap.id, live.id]
    await sync_to_async(connections.close_all)()


async def test_a_channel_the_queue_never_saw_is_caught_up_from_its_guilds_newest_message():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    known = message(content="the last one the previous worker took in", channel_id=CHANNELS[0])
    await sync_to_async(
        lambda: EventQueue.objects.create(
            channel_id=known.channel_id, message_id=known.id, guild_id=7, event={}
        )
    )()
    intake.seed(await sync_to_async(last_ingested)())
    first = message(content="the first message of a new channel", channel_id=CHANNELS[1])
    history.messages[CHANNELS[1]] = [first]
    starts: dict[int, int] = {}

    intake.adopt({CHANNELS[1]: 7}, starts, shard_id=0)
    await intake.catch_up(starts=starts)

    assert starts == {CHANNELS[1]: known.id}
    assert (CHANNELS[1], known.id, 100) in history.reads
    assert intake.guilds[CHANNELS[1]] == 7
    await sync_to_async(connections.close_all)()


async def test_a_shards_live_messages_wait_for_its_catch_up_and_are_lost_with_it_not_stored():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    seen = message(content="before the gap", channel_id=CHANNELS[0])
    intake.put(seen, 7)
    await drain(intake)
    gap = message(content="said while no session was open", channel_id=CHANNELS[0])
    live = message(content="arrived live while catching up", channel_id=CHANNELS[0])
    history.messages[CHANNELS[0]] = [seen, gap, live]

    # A catch-up cancelled (the worker stopped) stores none of the session's live messages:
    # the queue still ends before the gap, where the next worker's catch-up starts.
    intake.hold(3)
    starts = intake.session_starts([CHANNELS[0]])
    intake.put(live, 7, shard_id=3)
    await drain(intake)
    stored = sync_to_async(lambda: sorted(EventQueue.objects.values_list("message_id", flat=True)))
    assert await stored() == [seen.id]
    assert (await sync_to_async(last_ingested)()).ids == {CHANNELS[0]: seen.id}

    # Finished, it stores what it read and what was held, oldest first, once each.
    await intake.catch_up(starts, starts=starts, shard_id=3)
    intake.put(message(content="after the catch-up", channel_id=CHANNELS[1]), 7, shard_id=3)
    assert [m.id for m, _ in intake._buffer] == [gap.id, live.id, intake._buffer[-1][0].id]
    await drain(intake)
    assert (await stored())[:3] == [seen.id, gap.id, live.id]
    await sync_to_async(connections.close_all)()


def test_a_new_channel_starts_at_its_guilds_newest_message_else_the_oldest_guilds():
    intake = Intake(stored=lambda _: None, read_after=History().read_after)
    intake.seed(
        LastIngested(
            ids={CHANNELS[0]: 300, CHANNELS[1]: 500}, guilds={CHANNELS[0]: 7, CHANNELS[1]: 8}
        )
    )
    starts = {CHANNELS[0]: 300, CHANNELS[1]: 500}

    intake.adopt({CHANNELS[2]: 7, CHANNELS[3]: 9}, starts, shard_id=0)

    assert starts[CHANNELS[2]] == 300  # guild 7's newest
    assert starts[CHANNELS[3]] == 300  # guild 9 never seen: the oldest guild's newest


def _guild(top: int) -> int:
    """A guild id whose shard under ``n`` shards is ``top % n``."""
    return top << 22


async def test_a_reshard_from_4_to_6_shards_reads_a_new_guild_back_from_its_old_shards_gap():
    # New shard 0 of 6 takes guilds from old shards 0 and 2 of 4: guild A (old shard 0, whose
    # worker ran until message 500) and guilds B and C (old shard 2, whose worker stopped after
    # message 300). C's channel, never in the queue, had message 400 said after old shard 2
    # stopped. The newest of the new shard (500) is past that gap; the oldest guild's is not.
    guild_a, guild_b, guild_c = _guild(12), _guild(6), _guild(18)
    assert [(g >> 22) % 4 for g in (guild_a, guild_b, guild_c)] == [0, 2, 2]
    assert {(g >> 22) % 6 for g in (guild_a, guild_b, guild_c)} == {0}
    chan_a, chan_b, chan_c = CHANNELS[:3]
    queued_a, queued_b = message(500, channel_id=chan_a), message(300, channel_id=chan_b)
    gap = message(400, "said while old shard 2 was down", channel_id=chan_c)
    history = History()
    history.messages = {chan_a: [queued_a], chan_b: [queued_b], chan_c: [gap]}
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    intake.seed(
        LastIngested(
            ids={chan_a: queued_a.id, chan_b: queued_b.id},
            guilds={chan_a: guild_a, chan_b: guild_b},
        )
    )

    intake.hold(0)
    starts = intake.session_starts([chan_a, chan_b])
    intake.adopt({chan_a: guild_a, chan_b: guild_b, chan_c: guild_c}, starts, shard_id=0)
    await intake.catch_up(starts, starts=starts, shard_id=0)

    assert starts[chan_c] == queued_b.id
    assert [m.id for m, _ in intake._buffer] == [gap.id]
    assert intake.guilds[chan_c] == guild_c


async def test_a_new_guild_on_a_later_session_starts_at_the_shards_newest_message_taken_in():
    # Once this worker has caught a shard up it took in everything said there, in order: a
    # guild joined since starts where the shard's last session stood, not further back.
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    old, new = message(300, channel_id=CHANNELS[0]), message(500, channel_id=CHANNELS[1])
    intake.seed(LastIngested(ids={CHANNELS[0]: old.id}, guilds={CHANNELS[0]: 7}))
    intake.hold(0)
    starts = intake.session_starts([CHANNELS[0]])
    intake.adopt({CHANNELS[0]: 7}, starts, shard_id=0)
    await intake.catch_up(starts, starts=starts, shard_id=0)
    intake.put(new, 8, shard_id=0)

    intake.hold(0)
    starts = intake.session_starts([CHANNELS[0], CHANNELS[1]])
    intake.adopt({CHANNELS[0]: 7, CHANNELS[1]: 8, CHANNELS[2]: 9}, starts, shard_id=0)

    assert starts[CHANNELS[2]] == new.id


class GatedHistory(History):
    """A history whose reads wait for ``gate`` (the test acts while one is under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def read_after(self, channel_id: int, after_id: int, limit: int) -> list:
        found = await super().read_after(channel_id, after_id, limit)
        await self.gate.wait()
        return found


async def test_an_overflowed_channels_live_messages_wait_for_its_read_back():
    # Message `lost` found the buffer full. Once the database is back, channel 5 is read back;
    # `live`, arriving meanwhile, must not reach the queue before `lost` does: a worker killed
    # between the two would leave the next one starting after the gap.
    history = GatedHistory()
    kept = message(content="kept", channel_id=5)
    other = message(content="fills the buffer", channel_id=6)
    lost = message(content="lost", channel_id=5)
    live = message(content="arrived live during the read-back", channel_id=5)
    history.messages[5] = [kept, lost, live]
    intake = Intake(stored=lambda _: None, read_after=history.read_after, buffer_size=2)
    intake.put(kept, 7)
    intake.put(other, 7)
    intake.put(lost, 7)
    assert intake.marked == {5: kept.id}

    async with writing(intake):
        await eventually(lambda: history.reads)
        intake.put(live, 7)
        history.gate.set()
        order = await queued_once_stored(channel_id=5, count=3)
    assert order == [kept.id, lost.id, live.id]
    assert history.reads == [(5, kept.id, 100)]
    await sync_to_async(connections.close_all)()


async def test_a_channel_first_seen_in_an_overflow_is_read_back_from_before_its_message():
    history = History()
    kept = message(content="kept", channel_id=6)
    first = message(content="the first message of a channel, dropped", channel_id=5)
    history.messages[5] = [first]
    intake = Intake(stored=lambda _: None, read_after=history.read_after, buffer_size=1)
    intake.put(kept, 7)
    intake.put(first, 7)  # no room: channel 5, never seen, is marked from before `first`

    await drain(intake)  # stores `kept`, then reads channel 5 back
    await drain(intake)

    assert history.reads == [(5, first.id - 1, 100)]
    assert intake.marked == {}
    stored = await sync_to_async(list)(EventQueue.objects.values_list("message_id", flat=True))
    assert sorted(stored) == [kept.id, first.id]
    await sync_to_async(connections.close_all)()


async def test_a_channel_a_shard_catch_up_cannot_read_keeps_its_start_before_the_gap():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    seen = message(content="before the gap", channel_id=CHANNELS[0])
    intake.put(seen, 7)
    gap = message(content="said while no session was open", channel_id=CHANNELS[0])
    live = message(content="arrived live while catching up", channel_id=CHANNELS[0])
    intake.hold(3)
    starts = intake.session_starts([CHANNELS[0]])
    intake.put(live, 7, shard_id=3)
    history.broken.add(CHANNELS[0])

    await intake.catch_up(starts, starts=starts, shard_id=3)

    assert intake.marked == {CHANNELS[0]: seen.id}
    assert [m.id for m, _ in intake._buffer] == [seen.id]  # `live` waits behind the gap
    history.broken.clear()
    history.messages[CHANNELS[0]] = [seen, gap, live]
    await intake.catch_up(intake.marked)
    assert [m.id for m, _ in intake._buffer] == [seen.id, gap.id, live.id]


async def test_a_marked_channels_next_message_makes_the_writer_retry_its_read_back():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    seen = message(content="before the gap", channel_id=5)
    gap = message(content="said while the channel could not be read", channel_id=5)
    live = message(content="the next message", channel_id=5)
    intake.put(seen, 7)
    await drain(intake)
    history.broken.add(5)
    await intake.catch_up([5])
    assert intake.marked == {5: seen.id}
    history.broken.clear()
    history.messages[5] = [seen, gap, live]

    async with writing(intake):
        intake.put(live, 7)
        order = await queued_once_stored(channel_id=5, count=3)
    assert order == [seen.id, gap.id, live.id]
    await sync_to_async(connections.close_all)()


async def test_a_channel_that_cannot_be_read_back_is_heard_again_after_the_last_attempt():
    history = History()
    intake = Intake(stored=lambda _: None, read_after=history.read_after)
    seen = message(content="before the gap", channel_id=5)
    live = message(content="said in a channel whose history cannot be read", channel_id=5)
    intake.put(seen, 7)
    intake._buffer.clear()  # stored
    history.broken.add(5)
    intake.hold(3)
    starts = intake.session_starts([5])
    intake.put(live, 7, shard_id=3)

    await intake.catch_up(starts, starts=starts, shard_id=3)
    for _ in range(READ_BACK_ATTEMPTS - 2):
        await intake.catch_up(intake.marked)
    assert intake.marked == {5: seen.id}
    assert not intake._buffer  # `live` still waits for the read-back
    await intake.catch_up(intake.marked)

    assert len(history.reads) == READ_BACK_ATTEMPTS
    assert intake.marked == {}
    assert [m.id for m, _ in intake._buffer] == [live.id]


async def test_each_stored_message_is_timed_once_from_the_buffer_to_its_commit():
    from prometheus_client import REGISTRY

    def observed() -> float:
        return REGISTRY.get_sample_value("personabot_ingest_seconds_count") or 0.0

    burst = [message(content=f"m{n}", channel_id=CHANNELS[n % 10]) for n in range(1200)]
    intake = Intake(stored=lambda _: None, read_after=History().read_after, buffer_size=1000)
    before = observed()
    for msg in burst:
        intake.put(msg, 7)  # the last 200 overflow: read back later, not timed now

    await drain(intake)

    assert observed() - before == 1000
    assert await EventQueue.objects.acount() == 1000
    await sync_to_async(connections.close_all)()
