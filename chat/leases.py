"""Shard leases: one worker owns a gateway shard at a time (see `chat.models.ShardLease`).

Times are the database's own clock (``Now()``), so workers on machines whose clocks differ
still agree on when a lease lapsed.
"""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now

from chat.models import ShardLease
from chat.shards import ShardSet

_LAPSED = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


class _Held(Exception):
    """Another worker holds one of the leases: undo the whole claim."""


def shard_leases_claim(*, shards: ShardSet, holder: str, ttl: dt.timedelta) -> bool:
    """Take or renew the leases of every shard in ``shards`` for ``holder``, for ``ttl``.

    All or nothing, in one transaction: a lease is taken when it is free, lapsed, or already
    ``holder``'s; when another worker holds any of them nothing changes and the answer is
    False. Renewing is claiming again before the lease lapses.
    """
    try:
        with transaction.atomic():
            for shard_id, shard_count in shards.lease_keys:
                _ensure_row(shard_id, shard_count)
                taken = (
                    ShardLease.objects.filter(shard_id=shard_id, shard_count=shard_count)
                    .filter(Q(holder=holder) | Q(expires_at__lte=Now()))
                    .update(holder=holder, expires_at=Now() + ttl)
                )
                if not taken:
                    raise _Held
    except _Held:
        return False
    return True


def shard_leases_release(*, shards: ShardSet, holder: str) -> None:
    """Let ``holder``'s leases lapse now, so a standby takes over without waiting."""
    for shard_id, shard_count in shards.lease_keys:
        ShardLease.objects.filter(shard_id=shard_id, shard_count=shard_count, holder=holder).update(
            expires_at=Now()
        )


def shard_lease_holders(*, shards: ShardSet) -> dict[tuple[int, int], str]:
    """Who holds each of the shards' leases now (lapsed ones left out)."""
    rows = ShardLease.objects.filter(expires_at__gt=Now())
    return {
        (row.shard_id, row.shard_count): row.holder
        for row in rows
        if (row.shard_id, row.shard_count) in set(shards.lease_keys)
    }


def _ensure_row(shard_id: int, shard_count: int) -> None:
    try:
        with transaction.atomic():
            ShardLease.objects.get_or_create(
                shard_id=shard_id,
                shard_count=shard_count,
                defaults={"holder": "", "expires_at": _LAPSED},
            )
    except IntegrityError:  # another worker created it at the same moment
        pass
