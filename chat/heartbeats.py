"""Worker heartbeats: which shards each running worker has connected, and their latency; or,
for a worker waiting as a standby, which shards it waits for and whom it waits for.

The worker's composition root records one every few seconds (`worker_heartbeat_record` while
its gateway runs, `worker_standby_record` while it waits for its shards' lease); the
dashboard's overview reads them and a row that stopped being renewed is a stopped worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.utils import timezone

from botproject.live_updates import OVERVIEW_GROUP, WorkerPulse, publish_live_update_on_commit
from chat.models import WorkerHeartbeat
from chat.shards import ShardSet


def worker_heartbeat_record(
    *,
    holder: str,
    shard_ids: Iterable[int],
    shard_count: int | None,
    latencies: Mapping[int, float],
    guild_ids: Iterable[int],
) -> WorkerHeartbeat:
    """Store the worker's pulse (one row per worker, ``holder`` its lease name) and announce it
    to the dashboard's overview after the commit. Latencies are seconds; a shard whose latency
    is not known yet (no heartbeat acknowledged) is left out of ``latencies``. A standby row
    of the same worker becomes this serving one, up since now: the overview says since when
    it serves, not since when it waited."""
    shards = sorted(set(shard_ids))
    took_over = WorkerHeartbeat.objects.filter(holder=holder).exclude(standby_for=[]).exists()
    beat, _ = WorkerHeartbeat.objects.update_or_create(
        holder=holder,
        defaults={
            **({"started_at": timezone.now()} if took_over else {}),
            "shard_ids": shards,
            "shard_count": shard_count,
            "latencies": {str(k): round(v, 4) for k, v in latencies.items()},
            "guild_ids": sorted({str(g) for g in guild_ids}),
            "standby_for": [],
            "waiting_for": [],
        },
    )
    publish_live_update_on_commit(OVERVIEW_GROUP, WorkerPulse(holder=holder, shard_ids=shards))
    return beat


def worker_standby_record(
    *, holder: str, shards: ShardSet, waiting_for: Iterable[str]
) -> WorkerHeartbeat:
    """Store that the worker ``holder`` stands by for ``shards`` (their lease keys: a worker
    without shards waits for shard 0 of 1), waiting for the workers ``waiting_for`` that hold
    them (empty: none does yet), and announce it to the overview after the commit. A standby
    has no gateway: no connected shards, latencies or guilds."""
    keys = shards.lease_keys
    standby_for = sorted({shard for shard, _ in keys})
    beat, _ = WorkerHeartbeat.objects.update_or_create(
        holder=holder,
        defaults={
            "shard_ids": [],
            "shard_count": keys[0][1],
            "latencies": {},
            "guild_ids": [],
            "standby_for": standby_for,
            "waiting_for": sorted(set(waiting_for)),
        },
    )
    publish_live_update_on_commit(
        OVERVIEW_GROUP, WorkerPulse(holder=holder, shard_ids=[], standby_for=standby_for)
    )
    return beat


def worker_heartbeat_clear(*, holder: str) -> None:
    """The worker stopped: its row goes (the overview shows no worker for its guilds); the
    overview hears of it when there was a row."""
    deleted, _ = WorkerHeartbeat.objects.filter(holder=holder).delete()
    if deleted:
        publish_live_update_on_commit(OVERVIEW_GROUP, WorkerPulse(holder=holder, shard_ids=[]))
