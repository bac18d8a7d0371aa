"""Shard leases and shard filters: one worker per guild whatever the shard count, each taking
only its shards' work, and fenced out of acting once it lost its lease."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db.models import DateTimeField, ExpressionWrapper

from chat.leases import (
    DatabaseNow,
    FencedPort,
    lease_keys_overlap,
    shard_lease_fenced,
    shard_lease_holders,
    shard_leases_claim,
    shard_leases_release,
)
from chat.models import ShardLease
from chat.ports import ChannelPlace, LeaseLost
from chat.selectors.event_queue import unread_channel_ids
from chat.services.event_queue import OwnIdentity, event_ingest_many, event_queue_consume
from chat.shards import EVERY_SHARD, ShardSet
from chat.tests.factories import message
from chat.worker import LeaseKeeper

TTL = dt.timedelta(seconds=30)
TWO_OF_FOUR = ShardSet(ids=(0, 2), count=4)


def guild_on(shard: int, count: int = 4) -> int:
    return ((1_000 * count + shard) << 22) | 12345


@pytest.mark.django_db
def test_a_held_lease_keeps_a_second_worker_waiting_until_it_lapses():
    assert shard_leases_claim(shards=EVERY_SHARD, holder="a", ttl=TTL)
    assert not shard_leases_claim(shards=EVERY_SHARD, holder="b", ttl=TTL)
    assert shard_leases_claim(shards=EVERY_SHARD, holder="a", ttl=TTL)  # renewal
    assert shard_lease_holders(shards=EVERY_SHARD) == {(0, 1): "a"}

    assert shard_leases_claim(shards=EVERY_SHARD, holder="a", ttl=dt.timedelta(0))  # lapses now
    assert shard_leases_claim(shards=EVERY_SHARD, holder="b", ttl=TTL)
    assert not shard_leases_claim(shards=EVERY_SHARD, holder="a", ttl=TTL)


@pytest.mark.django_db
def test_a_lease_expiring_at_the_database_clock_has_lapsed_at_it():
    """The database reads one instant within a statement: a time computed from it (as a
    claim computes ``expires_at``) is not after it, whatever text form SQLite gives each."""
    ShardLease.objects.create(
        shard_id=0, shard_count=1, holder="a", expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    )
    expiry = ExpressionWrapper(DatabaseNow() + dt.timedelta(0), output_field=DateTimeField())

    live = ShardLease.objects.annotate(expiry=expiry).filter(expiry__gt=DatabaseNow())

    assert not live.exists()


@pytest.mark.django_db
def test_a_claim_is_all_or_nothing_and_a_release_frees_at_once():
    assert shard_leases_claim(shards=ShardSet(ids=(2,), count=4), holder="b", ttl=TTL)

    assert not shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)
    assert shard_lease_holders(shards=TWO_OF_FOUR) == {(2, 4): "b"}  # shard 0 not taken

    shard_leases_release(shards=ShardSet(ids=(2,), count=4), holder="b")
    assert shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)


@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_at_once_get_one_lease():
    start = threading.Barrier(2)
    won: dict[str, int | None] = {}

    def claim(holder: str) -> None:
        start.wait()
        try:
            won[holder] = shard_leases_claim(shards=TWO_OF_FOUR, holder=holder, ttl=TTL)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(fence is not None for fence in won.values()) == [False, True]


@pytest.mark.parametrize(
    ("guild_id", "expected"),
    [(None, True), (guild_on(0), True), (guild_on(1), False), (guild_on(2), True)],
)
def test_a_shard_set_owns_its_guilds_and_dms_on_shard_zero(guild_id, expected):
    assert TWO_OF_FOUR.owns(guild_id) is expected
    assert EVERY_SHARD.owns(guild_id)


@pytest.mark.django_db
def test_a_worker_consumes_and_resumes_only_its_shards_channels():
    for channel_id, guild_id in [(1, guild_on(0)), (2, guild_on(1)), (3, None), (4, guild_on(2))]:
        event_ingest_many(batch=[(message(content="hi", channel_id=channel_id), guild_id)])

    consumed = event_queue_consume(own=OwnIdentity(bot_user_id=9), shards=TWO_OF_FOUR)

    assert sorted(consumed.channel_ids) == [1, 3, 4]
    assert unread_channel_ids(shards=TWO_OF_FOUR) == [1, 3, 4]
    assert event_queue_consume(own=OwnIdentity(bot_user_id=9)).channel_ids == [2]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ((0, 1), (3, 8), True),
        ((1, 4), (5, 8), True),
        ((1, 4), (2, 8), False),
        ((2, 6), (1, 4), False),
        ((2, 6), (0, 4), True),
    ],
)
def test_shards_under_two_counts_overlap_when_they_share_a_guild(a, b, overlap):
    assert lease_keys_overlap(a, b) is overlap
    guilds_a = {g for g in range(48) if g % a[1] == a[0]}
    assert bool(guilds_a & {g for g in range(48) if g % b[1] == b[0]}) is overlap


@pytest.mark.django_db
def test_a_reshard_never_lets_two_workers_hold_one_guild():
    assert shard_leases_claim(shards=ShardSet(ids=(0, 1), count=4), holder="old", ttl=TTL)

    # Under 8 shards, 4 and 5 hold the guilds of the old worker's 0 and 1; 2 and 6 do not.
    assert shard_leases_claim(shards=ShardSet(ids=(4,), count=8), holder="new", ttl=TTL) is None
    assert shard_leases_claim(shards=ShardSet(ids=(5,), count=8), holder="new", ttl=TTL) is None
    assert shard_leases_claim(shards=EVERY_SHARD, holder="new", ttl=TTL) is None
    assert shard_leases_claim(shards=ShardSet(ids=(2, 6), count=8), holder="new", ttl=TTL)
    assert shard_lease_holders(shards=ShardSet(ids=(0,), count=8)) == {(0, 4): "old"}

    shard_leases_release(shards=ShardSet(ids=(0, 1), count=4), holder="old")
    assert shard_leases_claim(shards=ShardSet(ids=(4, 5), count=8), holder="new", ttl=TTL)
    assert shard_leases_claim(shards=ShardSet(ids=(0,), count=4), holder="old", ttl=TTL) is None


@pytest.mark.django_db
def test_each_taking_of_a_lease_gets_a_higher_fence_and_renewals_keep_it():
    first = shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)
    assert shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL) == first

    shard_leases_release(shards=TWO_OF_FOUR, holder="a")
    second = shard_leases_claim(shards=TWO_OF_FOUR, holder="b", ttl=TTL)
    assert second > first
    shard_leases_release(shards=TWO_OF_FOUR, holder="b")
    assert shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL) > second


@pytest.mark.django_db
def test_only_the_holder_under_its_current_fence_may_act_in_a_guild():
    fence_a = shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)
    assert shard_lease_fenced(holder="a", fence=fence_a, guild_id=guild_on(2))
    assert shard_lease_fenced(holder="a", fence=fence_a, guild_id=None)  # DMs: shard 0
    assert not shard_lease_fenced(holder="a", fence=fence_a, guild_id=guild_on(1))

    shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=dt.timedelta(0))  # lapses now
    fence_b = shard_leases_claim(shards=EVERY_SHARD, holder="b", ttl=TTL)
    assert not shard_lease_fenced(holder="a", fence=fence_a, guild_id=guild_on(2))
    assert shard_lease_fenced(holder="b", fence=fence_b, guild_id=guild_on(2))


class _RecordingPort:
    """Stands in for Discord behind the fence: records what it was asked to do."""

    def __init__(self) -> None:
        self.acts: list[str] = []

    async def locate_channel(self, channel_id: int) -> ChannelPlace:
        return ChannelPlace(guild_id=guild_on(2))

    async def deliver(self, *, channel_id: int, **kwargs) -> list:
        self.acts.append(f"deliver {kwargs['text']}")
        return []

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        self.acts.append(f"react {emoji}")


@pytest.mark.django_db(transaction=True)
async def test_a_worker_whose_lease_was_taken_over_sends_and_reacts_no_more():
    keeper = LeaseKeeper(TWO_OF_FOUR, ttl=TTL)
    assert await keeper.acquire(asyncio.Event())
    inner = _RecordingPort()
    port = FencedPort(inner, fence=keeper)
    await port.deliver(channel_id=1, text="first", speaker=None, reply_to=None)

    await sync_to_async(shard_leases_release)(shards=TWO_OF_FOUR, holder=keeper.holder)
    assert await sync_to_async(shard_leases_claim)(shards=TWO_OF_FOUR, holder="b", ttl=TTL)

    with pytest.raises(LeaseLost):
        await port.deliver(channel_id=1, text="second", speaker=None, reply_to=None)
    with pytest.raises(LeaseLost):
        await port.react(1, 2, "👍")
    with pytest.raises(LeaseLost):
        await keeper.check(guild_on(2))
    assert inner.acts == ["deliver first"]


@pytest.mark.postgres_only(reason="hangs a renewal on PostgreSQL's advisory lock")
@pytest.mark.django_db(transaction=True)
async def test_a_renewal_hung_in_the_database_loses_the_lease_at_its_deadline():
    keeper = LeaseKeeper(TWO_OF_FOUR, ttl=dt.timedelta(seconds=1.5))
    assert await keeper.acquire(asyncio.Event())
    locked, release = threading.Event(), threading.Event()

    def hold_the_claim_lock() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [0x5348_4C53])
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    blocker = threading.Thread(target=hold_the_claim_lock)
    blocker.start()
    try:
        assert await asyncio.to_thread(locked.wait, 10)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(keeper.keep(), timeout=5)  # returns though the claim hangs
        assert loop.time() >= keeper.valid_until
        with pytest.raises(LeaseLost):
            await keeper.check(guild_on(2))  # refused without asking the hung database
        assert blocker.is_alive()  # the renewal was still hanging when the lease was given up
    finally:
        release.set()
        await asyncio.to_thread(blocker.join, 30)
        await sync_to_async(connections.close_all)()  # after the abandoned renewal returned
