"""The intake in front of the event queue: bursts, duplicates, overflow and catch-up."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.loop.intake import Intake
from chat.models import EventQueue, UnreadEvent
from chat.selectors.event_queue import last_ingested, unread_pool_messages
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

    async def read_after(self, channel_id: int, after_id: int, limit: int) -> list:
        self.reads.append((channel_id, after_id, limit))
        return [m for m in self.messages.get(channel_id, []) if m.id > after_id][:limit]


async def drain(intake: Intake) -> None:
    writer = asyncio.create_task(intake.run())
    try:
        await eventually(lambda: intake.idle)
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


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

    assert intake.marked == {5}
    await drain(intake)  # stores `kept`, then catches channel 5 up after it
    assert history.reads == [(5, kept.id, 100)]
    await drain(intake)
    ids = await sync_to_async(list)(EventQueue.objects.values_list("message_id", flat=True))
    assert sorted(ids) == [kept.id, lost.id]
    assert intake.marked == set()
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


async def test_a_channel_the_queue_never_saw_is_caught_up_from_the_shards_newest_message():
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

    intake.adopt({CHANNELS[1]: 7}, starts)
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


def test_a_new_channel_starts_at_its_guilds_newest_message_else_its_shards():
    intake = Intake(stored=lambda _: None, read_after=History().read_after)
    intake.shards_newest = 900  # another shard's newest: beyond this shard's gap
    intake.guilds.update({CHANNELS[0]: 7, CHANNELS[1]: 8})
    starts = {CHANNELS[0]: 300, CHANNELS[1]: 500}

    intake.adopt({CHANNELS[2]: 7, CHANNELS[3]: 9}, starts)

    assert starts[CHANNELS[2]] == 300  # guild 7's newest
    assert starts[CHANNELS[3]] == 500  # guild 9 never seen: the shard's newest
