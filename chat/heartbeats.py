"""Worker heartbeats: which shards each running worker has connected, and their latency.

The worker's composition root records one every few seconds (`worker_heartbeat_record`); the
dashboard's overview reads them and a row that stopped being renewed is a stopped worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from botproject.live_updates import OVERVIEW_GROUP, WorkerPulse, publish_live_update_on_commit
from chat.models import WorkerHeartbeat


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
    is not known yet (no heartbeat acknowledged) is left out of ``latencies``."""
    shards = sorted(set(shard_ids))
    beat, _ = WorkerHeartbeat.objects.update_or_create(
        holder=holder,
        defaults={
            "shard_ids": shards,
            "shard_count": shard_count,
            "latencies": {str(k): round(v, 4) for k, v in latencies.items()},
            "guild_ids": sorted({str(g) for g in guild_ids}),
        },
    )
    publish_live_update_on_commit(OVERVIEW_GROUP, WorkerPulse(holder=holder, shard_ids=shards))
    return beat


def worker_heartbeat_clear(*, holder: str) -> None:
    """The worker stopped: its row goes (the overview shows no worker for its guilds)."""
    WorkerHeartbeat.objects.filter(holder=holder).delete()
    publish_live_update_on_commit(OVERVIEW_GROUP, WorkerPulse(holder=holder, shard_ids=[]))
