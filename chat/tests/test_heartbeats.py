"""Worker heartbeats of a standby: a worker waiting for its shards' lease records that it
stands by, for which shards and for whom, until it holds the lease and connects or stops."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.heartbeats import worker_heartbeat_record, worker_standby_record
from chat.leases import shard_leases_claim, shard_leases_release
from chat.llm.fake_server import FakeLLMServer
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import ShardLease, WorkerHeartbeat
from chat.shards import ShardSet
from chat.tests.loop.test_control import eventually
from chat.worker import WorkerConfig, run_worker

TWO_OF_FOUR = ShardSet(ids=(0, 2), count=4)
TTL = dt.timedelta(seconds=30)


@pytest.fixture
async def async_db(transactional_db) -> AsyncIterator[None]:
    """The database for a test whose database work runs on sync_to_async's thread: that
    thread's connection is closed at the end, so the test database can be dropped."""
    yield
    await sync_to_async(connections.close_all)()


def _rows() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.all())


@asynccontextmanager
async def _worker(*, neighbour: bool = False) -> AsyncIterator[Callable[[], None]]:
    """``run_worker`` for shards 0 and 2 of 4 (against nothing: it never gets the lease in
    these tests); yields the stop, and waits for the worker to end on leaving."""
    config = WorkerConfig(
        token="unused",
        api_base="http://127.0.0.1:9",
        gateway_url=None,
        shard_ids=[0, 2],
        shard_count=4,
        lease_seconds=1.5,
        heartbeat_seconds=0.5,
    )
    stop = asyncio.Event()
    async with (
        FakeLLMServer() as server,
        OpenAICompatibleClient(base_url=server.base_url, api_key="test") as llm,
    ):
        worker = asyncio.create_task(run_worker(config, llm=llm, stop=stop, neighbour=neighbour))
        try:
            yield stop.set
        finally:
            stop.set()
            await asyncio.wait_for(worker, 10)


async def test_a_worker_waiting_for_a_held_lease_stands_by_in_its_heartbeat_until_it_stops(
    async_db,
):
    await sync_to_async(shard_leases_claim)(shards=ShardSet(ids=(2,), count=4), holder="a", ttl=TTL)

    async with _worker() as stop:
        [beat] = await eventually(sync_to_async(_rows))
        assert (beat.standby_for, beat.shard_count, beat.waiting_for) == ([0, 2], 4, ["a"])
        assert (beat.shard_ids, beat.guild_ids, beat.latencies) == ([], [], {})
        first = beat.updated_at
        # Kept fresh while it waits (every heartbeat period).
        await eventually(
            sync_to_async(lambda: WorkerHeartbeat.objects.filter(updated_at__gt=first).exists())
        )
        stop()

    assert await sync_to_async(_rows)() == []
    assert await ShardLease.objects.filter(holder=beat.holder).acount() == 0


async def test_a_standby_for_a_neighbour_names_the_neighbour_once_it_holds_the_shards(async_db):
    async with _worker(neighbour=True):
        [beat] = await eventually(sync_to_async(_rows))
        assert (beat.standby_for, beat.waiting_for) == ([0, 2], [])
        assert await ShardLease.objects.acount() == 0  # it claims nothing before the neighbour

        await sync_to_async(shard_leases_claim)(shards=TWO_OF_FOUR, holder="neighbour", ttl=TTL)
        await eventually(
            sync_to_async(
                lambda: WorkerHeartbeat.objects.filter(waiting_for=["neighbour"]).exists()
            )
        )
        assert await ShardLease.objects.exclude(holder="neighbour").acount() == 0

    assert await sync_to_async(_rows)() == []
    await sync_to_async(shard_leases_release)(shards=TWO_OF_FOUR, holder="neighbour")


@pytest.mark.django_db
def test_the_serving_heartbeat_replaces_the_standby_row_of_the_same_worker():
    worker_standby_record(holder="w", shards=TWO_OF_FOUR, waiting_for=["a", "b", "a"])
    beat = WorkerHeartbeat.objects.get(holder="w")
    assert (beat.standby_for, beat.shard_count, beat.waiting_for) == ([0, 2], 4, ["a", "b"])
    waited_since = beat.started_at

    worker_heartbeat_record(
        holder="w", shard_ids=[2, 0], shard_count=4, latencies={0: 0.01}, guild_ids=[7]
    )

    beat = WorkerHeartbeat.objects.get(holder="w")
    assert (beat.shard_ids, beat.standby_for, beat.waiting_for) == ([0, 2], [], [])
    serving_since = beat.started_at
    assert serving_since > waited_since  # up since it took over, not since it waited

    worker_heartbeat_record(
        holder="w", shard_ids=[2, 0], shard_count=4, latencies={0: 0.02}, guild_ids=[7]
    )
    assert WorkerHeartbeat.objects.get(holder="w").started_at == serving_since


@pytest.mark.django_db
def test_a_worker_without_shards_stands_by_for_shard_0_of_1():
    beat = worker_standby_record(holder="w", shards=ShardSet(), waiting_for=[])
    assert (beat.standby_for, beat.shard_count) == ([0], 1)
