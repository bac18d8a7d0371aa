"""Shard leases and shard filters: one worker per shard, each taking only its shards' work."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connections

from chat.leases import shard_lease_holders, shard_leases_claim, shard_leases_release
from chat.selectors.event_queue import unread_channel_ids
from chat.services.event_queue import OwnIdentity, event_ingest_many, event_queue_consume
from chat.shards import EVERY_SHARD, ShardSet
from chat.tests.factories import message

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
def test_a_claim_is_all_or_nothing_and_a_release_frees_at_once():
    assert shard_leases_claim(shards=ShardSet(ids=(2,), count=4), holder="b", ttl=TTL)

    assert not shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)
    assert shard_lease_holders(shards=TWO_OF_FOUR) == {(2, 4): "b"}  # shard 0 not taken

    shard_leases_release(shards=ShardSet(ids=(2,), count=4), holder="b")
    assert shard_leases_claim(shards=TWO_OF_FOUR, holder="a", ttl=TTL)


@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_at_once_get_one_lease():
    start = threading.Barrier(2)
    won: dict[str, bool] = {}

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

    assert sorted(won.values()) == [False, True]


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
        event_ingest_many([(message(content="hi", channel_id=channel_id), guild_id)])

    consumed = event_queue_consume(own=OwnIdentity(bot_user_id=9), shards=TWO_OF_FOUR)

    assert sorted(consumed.channel_ids) == [1, 3, 4]
    assert unread_channel_ids(shards=TWO_OF_FOUR) == [1, 3, 4]
    assert event_queue_consume(own=OwnIdentity(bot_user_id=9)).channel_ids == [2]
