"""Which guilds a worker serves: Discord's shard rule, in Python and as a database filter.

A guild lives on shard ``(guild_id >> 22) % shard_count``; DMs on shard 0 (Discord's rule).
A worker started without shards serves everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Mod


@dataclass(frozen=True)
class ShardSet:
    """The shards one worker runs: ``ids`` of ``count`` (both None: every guild, one worker)."""

    ids: tuple[int, ...] | None = None
    count: int | None = None

    @classmethod
    def of(cls, ids: list[int] | tuple[int, ...] | None, count: int | None) -> ShardSet:
        """The shards ``ids`` of ``count``; every guild when either is None."""
        if ids is None or count is None:
            return EVERY_SHARD
        return cls(ids=tuple(ids), count=count)

    @property
    def everything(self) -> bool:
        return self.ids is None or self.count is None

    @property
    def lease_keys(self) -> list[tuple[int, int]]:
        """(shard id, shard count) for each shard whose lease this worker must hold."""
        if self.everything:
            return [(0, 1)]
        return [(shard, self.count) for shard in self.ids]

    def owns(self, guild_id: int | None) -> bool:
        """Whether the guild (None: a DM) is on one of these shards."""
        if self.everything:
            return True
        shard = (guild_id >> 22) % self.count if guild_id else 0
        return shard in self.ids

    def filter(self, rows: QuerySet, field: str = "guild_id") -> QuerySet:
        """``rows`` whose ``field`` (a guild id, NULL for DMs) is on these shards."""
        if self.everything:
            return rows
        shard = Mod(F(field).bitrightshift(22), self.count)
        on_shards = Q(**{f"{field}__isnull": False}) & Q(_shard__in=self.ids)
        if 0 in self.ids:
            on_shards |= Q(**{f"{field}__isnull": True})
        return rows.annotate(_shard=shard).filter(on_shards)


EVERY_SHARD = ShardSet()
"""A worker started without shards: every guild and every DM."""
