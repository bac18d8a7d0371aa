"""The worker's heartbeat: connected shards, gateway latency and guilds, stored while it runs."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import WorkerHeartbeat
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import eventually
from chat.worker import HEARTBEAT_SECONDS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _beat_with_latency() -> WorkerHeartbeat | None:
    return WorkerHeartbeat.objects.exclude(latencies={}).first()


async def test_a_running_worker_records_its_shards_latency_and_guilds(world):
    await world.start_worker()
    # The first beat is written at start; the latency is known from the next one on (the
    # gateway's first heartbeat must be acknowledged).
    beat = await eventually(sync_to_async(_beat_with_latency), within=HEARTBEAT_SECONDS * 3)
    assert beat.shard_ids == [0]
    assert set(beat.latencies) == {"0"} and 0 <= beat.latencies["0"] < 5
    assert beat.guild_ids == [str(DEMO_GUILD_ID)]

    await world.stop_worker()
    assert not await WorkerHeartbeat.objects.aexists()
