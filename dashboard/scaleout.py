"""Reads behind the overview's scale-out panel: every worker, the shard leases it holds, and a
reshard in progress.

A worker is known by its heartbeat (`WorkerHeartbeat`, written every 5 s while its gateway runs)
and by the leases it holds (`ShardLease`, the same ``holder`` name): a worker holding leases
without a fresh heartbeat is still connecting (or hung), one with a heartbeat and no live lease
has lost it; a standby's heartbeat names the shards it waits for and their holders. Leases are
read live only (``expires_at`` after now).

The shard map is drawn under the *newest* shard count: the count of the live lease taken last
(the highest fencing token), since a rolling reshard starts new workers under the new count
while old ones still hold the old. Live leases under more than one count mean a reshard is in
progress; each shard of the newest count is then held, waiting for an old lease that shares
guilds with it (`chat.leases.lease_keys_overlap`: a claim is refused while one lives), or
unowned with nothing in its way (no worker has claimed it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from chat.leases import lease_keys_overlap
from chat.models import ShardLease, WorkerHeartbeat


@dataclass(frozen=True)
class LeaseRow:
    shard_id: int
    shard_count: int
    holder: str
    fence: int
    expires_at: dt.datetime
    expires_in: float
    """Seconds from the reading until the lease lapses unless renewed."""

    @property
    def label(self) -> str:
        return f"shard {self.shard_id} of {self.shard_count}"


@dataclass(frozen=True)
class WorkerRow:
    """One worker: its heartbeat (None: no fresh one) and the live leases it holds; a standby's
    heartbeat has the shards it waits for (``standby_for``, of ``shard_count``) and the workers
    holding them (``waiting_for``) instead of connected shards."""

    holder: str
    leases: tuple[LeaseRow, ...]
    heartbeat_age: float | None = None
    """Seconds since the last heartbeat; None when there is no fresh one."""
    connected: tuple[int, ...] = ()
    shard_count: int | None = None
    latency_ms: float | None = None
    guilds: int = 0
    started_at: dt.datetime | None = None
    standby_for: tuple[int, ...] = ()
    waiting_for: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """``serving`` (heartbeat and lease), ``connecting`` (lease, no heartbeat yet, or a
        standby's heartbeat: it took the lease and has not connected yet), ``standby`` (a
        standby's heartbeat, no lease: it waits for ``standby_for``), ``no lease`` (heartbeat
        only: lost its lease, or runs without one)."""
        if self.heartbeat_age is None:
            return "connecting"
        if self.standby_for:
            return "connecting" if self.leases else "standby"
        return "serving" if self.leases else "no lease"


@dataclass(frozen=True)
class ShardCell:
    """One shard of the newest count: who holds it, or which live leases under another count
    share guilds with it (its claim waits for them)."""

    shard_id: int
    holder: str | None = None
    fence: int | None = None
    waiting_for: tuple[LeaseRow, ...] = ()

    @property
    def state(self) -> str:
        if self.holder is not None:
            return "held"
        return "waiting" if self.waiting_for else "unowned"


@dataclass(frozen=True)
class ScaleOut:
    workers: tuple[WorkerRow, ...]
    shard_count: int | None
    """The newest shard count (None: no live lease)."""
    shards: tuple[ShardCell, ...]
    counts: tuple[int, ...]
    """Every shard count live leases are held under, newest first."""

    @property
    def resharding(self) -> bool:
        return len(self.counts) > 1

    @property
    def unowned(self) -> tuple[int, ...]:
        """Shards of the newest count no live lease under that count holds."""
        return tuple(cell.shard_id for cell in self.shards if cell.holder is None)

    @property
    def old_leases(self) -> tuple[LeaseRow, ...]:
        """Live leases under a count other than the newest, by count and shard."""
        rows = {row for worker in self.workers for row in worker.leases}
        return tuple(
            sorted(
                (row for row in rows if row.shard_count != self.shard_count),
                key=lambda row: (row.shard_count, row.shard_id),
            )
        )


def scale_out(*, now: dt.datetime | None = None) -> ScaleOut:
    """The workers (fresh heartbeats and holders of live leases, by name), the newest shard
    count and each of its shards' state, and every count live leases are held under."""
    now = now or timezone.now()
    leases = [
        LeaseRow(
            shard_id=row.shard_id,
            shard_count=row.shard_count,
            holder=row.holder,
            fence=row.fence,
            expires_at=row.expires_at,
            expires_in=round((row.expires_at - now).total_seconds(), 1),
        )
        for row in ShardLease.objects.filter(expires_at__gt=now).order_by("shard_count", "shard_id")
    ]
    beats = {
        beat.holder: beat
        for beat in WorkerHeartbeat.objects.filter(
            updated_at__gte=now - dt.timedelta(seconds=WorkerHeartbeat.STALE_AFTER_SECONDS)
        )
    }
    workers = []
    for holder in sorted(set(beats) | {row.holder for row in leases}):
        held = tuple(row for row in leases if row.holder == holder)
        beat = beats.get(holder)
        if beat is None:
            workers.append(WorkerRow(holder=holder, leases=held))
            continue
        latencies = list(beat.latencies.values())
        workers.append(
            WorkerRow(
                holder=holder,
                leases=held,
                heartbeat_age=round(max((now - beat.updated_at).total_seconds(), 0.0), 1),
                connected=tuple(sorted(beat.shard_ids)),
                shard_count=beat.shard_count,
                latency_ms=round(sum(latencies) / len(latencies) * 1000, 1) if latencies else None,
                guilds=len(beat.guild_ids),
                started_at=beat.started_at,
                standby_for=tuple(sorted(beat.standby_for)),
                waiting_for=tuple(beat.waiting_for),
            )
        )
    newest = max(leases, key=lambda row: row.fence, default=None)
    count = newest.shard_count if newest is not None else None
    counts = sorted({row.shard_count for row in leases}, key=lambda n: (n != count, n))
    return ScaleOut(
        workers=tuple(workers),
        shard_count=count,
        shards=_shard_cells(count, leases) if count is not None else (),
        counts=tuple(counts),
    )


def _shard_cells(count: int, leases: list[LeaseRow]) -> tuple[ShardCell, ...]:
    held = {row.shard_id: row for row in leases if row.shard_count == count}
    others = [row for row in leases if row.shard_count != count]
    cells = []
    for shard in range(count):
        row = held.get(shard)
        if row is not None:
            cells.append(ShardCell(shard_id=shard, holder=row.holder, fence=row.fence))
            continue
        waiting = tuple(
            other
            for other in others
            if lease_keys_overlap((shard, count), (other.shard_id, other.shard_count))
        )
        cells.append(ShardCell(shard_id=shard, waiting_for=waiting))
    return tuple(cells)
