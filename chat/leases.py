"""Shard leases: one worker owns a guild at a time, whatever the shard count (see
`chat.models.ShardLease`), and a fencing token that every act with side effects checks.

A guild lives on shard ``(guild_id >> 22) % count``. Two leases taken under different counts,
``(s, n)`` and ``(t, m)``, cover a guild in common exactly when ``s ≡ t (mod gcd(n, m))`` (the
Chinese remainder theorem), so a claim is refused while any live lease of another worker
overlaps one of its shards, under any count: during a reshard (4 → 8 shards, workers restarted
one by one) an old and a new worker never serve one channel. A worker without shards holds
``(0, 1)``, which overlaps everything.

Each fresh claim takes a new fencing token, one higher than any token given before, kept with
the lease; renewals keep it. A worker asks `shard_lease_fenced` before acting, so a worker that
lost its lease (lapsed while its database call hung, or taken over) acts no more.

Times are the database's own clock (`DatabaseNow`), so workers on machines whose clocks differ
still agree on when a lease lapsed; a lease lapses at the instant it expires (``expires_at`` is
no longer after now). Claims are serialised: on PostgreSQL by a transaction-level advisory lock,
on SQLite by its single writer.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.db.models import Max
from django.db.models.functions import Now

from botproject.live_updates import OVERVIEW_GROUP, ShardLeaseChanged, publish_live_update_on_commit
from chat.models import ShardLease
from chat.pipeline.types import HistoryMessage, NameDirectory
from chat.pipeline.window_reuse import GatewayCacheView
from chat.ports import ChannelPlace, Delivered, DiscordPort, LeaseFence, Speaker
from chat.shards import ShardSet

_LAPSED = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_CLAIM_LOCK = 0x5348_4C53  # the advisory lock id that serialises claims on PostgreSQL
# SQLite's clock in the text form Django writes datetimes in; 'NOW' is one instant within a
# statement. (The percent signs are doubled twice: once for the template, once for the query.)
_SQLITE_NOW = (
    "CASE WHEN SUBSTR(STRFTIME('%%%%f', 'NOW'), 4) = '000'"
    " THEN STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%S', 'NOW')"
    " ELSE STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW') END"
)


class DatabaseNow(Now):
    """The database's clock, as Django's `Now`, but on SQLite read in the text form Django
    stores datetimes in (``str(datetime)``: six fraction digits, none when all are zero).

    SQLite keeps datetimes as text and compares them as text. Its `Now` reads ``…:05.123``
    while a stored time (``Now() + ttl`` too) reads ``…:05.123000``, and the longer string
    sorts after the shorter: a lease that lapsed at ``.123`` looked live for the rest of that
    millisecond. In one text form the comparison is exact.
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template=_SQLITE_NOW, **extra_context)


def lease_keys_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether shard ``a`` = (id, count) and shard ``b`` share a guild: ids congruent modulo
    the counts' greatest common divisor."""
    (shard_a, count_a), (shard_b, count_b) = a, b
    return (shard_a - shard_b) % math.gcd(count_a, count_b) == 0


def guild_shard(guild_id: int | None, shard_count: int) -> int:
    """The shard of ``guild_id`` under ``shard_count`` (Discord's rule; DMs on shard 0)."""
    return (guild_id >> 22) % shard_count if guild_id else 0


def shard_leases_claim(*, shards: ShardSet, holder: str, ttl: dt.timedelta) -> int | None:
    """Take or renew the leases of every shard in ``shards`` for ``holder``, for ``ttl``; the
    fencing token they are held under, or None when another worker's live lease overlaps any
    of them (under any shard count: then nothing changes).

    All or nothing, in one transaction. A renewal (every lease still live and ``holder``'s
    under one token) keeps the token; any other claim takes a new one, higher than any before.
    """
    keys = shards.lease_keys
    with transaction.atomic():
        _serialise_claims()
        others = ShardLease.objects.filter(expires_at__gt=DatabaseNow()).exclude(holder=holder)
        live = [(row.shard_id, row.shard_count) for row in others]
        if any(lease_keys_overlap(key, other) for key in keys for other in live):
            return None
        mine = {
            (row.shard_id, row.shard_count): row
            for row in ShardLease.objects.filter(holder=holder, expires_at__gt=DatabaseNow())
            if (row.shard_id, row.shard_count) in keys
        }
        fences = {row.fence for row in mine.values()}
        if len(mine) == len(keys) and len(fences) == 1:
            fence = fences.pop()
        else:
            fence = (ShardLease.objects.aggregate(top=Max("fence"))["top"] or 0) + 1
            announced = ShardLeaseChanged(
                holder=holder, shards=[list(k) for k in keys], fence=fence
            )
            publish_live_update_on_commit(OVERVIEW_GROUP, announced)
        for shard_id, shard_count in keys:
            ShardLease.objects.update_or_create(
                shard_id=shard_id,
                shard_count=shard_count,
                defaults={"holder": holder, "fence": fence, "expires_at": DatabaseNow() + ttl},
            )
    return fence


def _serialise_claims() -> None:
    """Let one claim at a time read the live leases and write its own (PostgreSQL: an advisory
    lock released at commit; SQLite: a write takes the database's single write lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK])
    else:
        ShardLease.objects.filter(pk__lt=0).update(holder="")


def shard_lease_fenced(*, holder: str, fence: int, guild_id: int | None) -> bool:
    """Whether ``holder`` still holds, under token ``fence``, a live lease covering the guild
    (None: a DM)."""
    rows = ShardLease.objects.filter(holder=holder, fence=fence, expires_at__gt=DatabaseNow())
    return any(
        guild_shard(guild_id, row.shard_count) == row.shard_id
        for row in rows.only("shard_id", "shard_count")
    )


def shard_leases_release(*, shards: ShardSet, holder: str) -> None:
    """Let ``holder``'s leases lapse now, so a standby takes over without waiting."""
    released = 0
    for shard_id, shard_count in shards.lease_keys:
        released += ShardLease.objects.filter(
            shard_id=shard_id, shard_count=shard_count, holder=holder
        ).update(expires_at=DatabaseNow())
    if released:
        announced = ShardLeaseChanged(
            holder=holder, shards=[list(k) for k in shards.lease_keys], fence=None
        )
        publish_live_update_on_commit(OVERVIEW_GROUP, announced)


def shard_lease_holders(*, shards: ShardSet) -> dict[tuple[int, int], str]:
    """Who holds a live lease overlapping the shards (under any count), by (shard id, count)."""
    keys = shards.lease_keys
    return {
        (row.shard_id, row.shard_count): row.holder
        for row in ShardLease.objects.filter(expires_at__gt=DatabaseNow())
        if any(lease_keys_overlap((row.shard_id, row.shard_count), key) for key in keys)
    }


class FencedPort:
    """A Discord port whose acts (send, edit, react, a sticker) first ask ``fence`` whether this
    worker still holds the channel's guild; everything else is ``port``'s own, passed through.
    It implements `DiscordPort` member by member (the type checker holds it to the protocol)."""

    def __init__(self, port: DiscordPort, *, fence: LeaseFence) -> None:
        self._port = port
        self._fence = fence

    @property
    def bot_user_id(self) -> int:
        return self._port.bot_user_id

    async def _check(self, channel_id: int) -> None:
        place = await self._port.locate_channel(channel_id)
        await self._fence.check(place.guild_id if place is not None else None)

    # -- acts: fenced -------------------------------------------------------------------------

    async def deliver(
        self,
        *,
        channel_id: int,
        speaker: Speaker,
        text: str,
        reply_to: int | None,
        notice: str | None = None,
        nonce_seed: str | None = None,
        as_notice: bool = False,
    ) -> list[Delivered]:
        await self._check(channel_id)
        return await self._port.deliver(
            channel_id=channel_id,
            speaker=speaker,
            text=text,
            reply_to=reply_to,
            notice=notice,
            nonce_seed=nonce_seed,
            as_notice=as_notice,
        )

    async def edit_message(
        self, *, channel_id: int, speaker: Speaker, message_id: int, text: str
    ) -> None:
        await self._check(channel_id)
        await self._port.edit_message(
            channel_id=channel_id, speaker=speaker, message_id=message_id, text=text
        )

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        await self._check(channel_id)
        await self._port.react(channel_id, message_id, emoji)

    async def send_sticker(
        self, *, channel_id: int, speaker: Speaker, sticker_id: int
    ) -> Delivered:
        await self._check(channel_id)
        return await self._port.send_sticker(
            channel_id=channel_id, speaker=speaker, sticker_id=sticker_id
        )

    # -- everything else: the port's own -------------------------------------------------------

    def typing(self, channel_id: int) -> AbstractAsyncContextManager[None]:
        return self._port.typing(channel_id)

    async def find_delivery(
        self, *, channel_id: int, speaker: Speaker, reply_to: int, limit: int = 50
    ) -> list[Delivered]:
        return await self._port.find_delivery(
            channel_id=channel_id, speaker=speaker, reply_to=reply_to, limit=limit
        )

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        return await self._port.fetch_history(channel_id, limit)

    async def fetch_history_before(
        self, channel_id: int, before_id: int, limit: int
    ) -> list[HistoryMessage]:
        return await self._port.fetch_history_before(channel_id, before_id, limit)

    async def fetch_history_after(
        self, channel_id: int, after_id: int, limit: int
    ) -> list[HistoryMessage]:
        return await self._port.fetch_history_after(channel_id, after_id, limit)

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        return self._port.cache_view(channel_id)

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        return await self._port.fetch_message(channel_id, message_id)

    async def thread_starter(self, channel_id: int) -> HistoryMessage | None:
        return await self._port.thread_starter(channel_id)

    async def superseded_originals(self, messages: Sequence[HistoryMessage]) -> frozenset[int]:
        return await self._port.superseded_originals(messages)

    async def locate_channel(self, channel_id: int) -> ChannelPlace | None:
        return await self._port.locate_channel(channel_id)

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        return self._port.names(guild_id, user_ids)

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        return self._port.guild_stickers(guild_id)

    async def refresh_attachment_urls(self, urls: Sequence[str]) -> dict[str, str]:
        return await self._port.refresh_attachment_urls(urls)

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        return await self._port.read_attachment(url, max_bytes=max_bytes)


if TYPE_CHECKING:

    def _fenced_is_a_port(port: FencedPort) -> DiscordPort:
        return port  # the type checker holds FencedPort to the protocol
