"""Reads of the event queue and the unread pools (the writes are `chat.services.event_queue`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Max

from chat.codec import message_from_json_text
from chat.models import (
    EventQueue,
    UnreadEvent,
)
from chat.pipeline.types import (
    HistoryMessage,
)
from chat.shards import EVERY_SHARD, ShardSet


@dataclass(frozen=True)
class LastIngested:
    """Per channel, the newest message the event queue holds, and its guild (None: a DM)."""

    ids: dict[int, int]
    guilds: dict[int, int | None]

    def get(self, channel_id: int) -> int | None:
        return self.ids.get(channel_id)

    def guild_of(self, channel_id: int) -> int | None:
        return self.guilds.get(channel_id)


def last_ingested(*, shards: ShardSet = EVERY_SHARD) -> LastIngested:
    """Per channel of guilds on ``shards``: the newest message the event queue holds (where a
    worker's catch-up starts)."""
    rows = (
        shards.filter(EventQueue.objects.all())
        .values("channel_id", "guild_id")
        .annotate(newest=Max("message_id"))
        .order_by()
    )
    ids: dict[int, int] = {}
    guilds: dict[int, int | None] = {}
    for row in rows:
        if row["newest"] > ids.get(row["channel_id"], 0):
            ids[row["channel_id"]] = row["newest"]
            guilds[row["channel_id"]] = row["guild_id"]
    return LastIngested(ids=ids, guilds=guilds)


def event_queue_has_ready(*, shards: ShardSet = EVERY_SHARD) -> bool:
    return shards.filter(EventQueue.objects.filter(status=EventQueue.Status.READY)).exists()


def event_queue_ready_count(*, shards: ShardSet = EVERY_SHARD) -> int:
    """How many queued messages of guilds on ``shards`` wait to be moved to an unread pool."""
    return shards.filter(EventQueue.objects.filter(status=EventQueue.Status.READY)).count()


def unread_messages_count(*, shards: ShardSet = EVERY_SHARD) -> int:
    """How many messages the unread pools of guilds on ``shards`` hold, all channels together."""
    return shards.filter(UnreadEvent.objects.all()).count()


def unread_pool_messages(*, channel_id: int) -> list[HistoryMessage]:
    """The channel's unread messages, oldest first, without taking them. A busy channel's
    loop reads its pool for every batch, so this is one hand-written statement (the ORM's
    query building costs twice the read) whose JSON text is validated in one pass."""
    table = connection.ops.quote_name(UnreadEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT CAST(event AS TEXT) FROM {table} WHERE channel_id = %s ORDER BY message_id",
            [channel_id],
        )
        return [message_from_json_text(text) for (text,) in cursor.fetchall()]


def unread_pool_count(*, channel_id: int) -> int:
    return UnreadEvent.objects.filter(channel_id=channel_id).count()


def unread_pool_counts(*, channel_ids: Iterable[int]) -> dict[int, int]:
    """How many unread messages each of ``channel_ids`` holds, in one query (an empty pool is
    left out)."""
    rows = UnreadEvent.objects.filter(channel_id__in=list(channel_ids)).order_by()
    return dict(rows.values_list("channel_id").annotate(count=Count("id")))


def unread_channel_ids(*, shards: ShardSet = EVERY_SHARD) -> list[int]:
    """Channels of guilds on ``shards`` with a non-empty unread pool (the worker resumes their
    loops at start)."""
    rows = shards.filter(UnreadEvent.objects.all()).order_by("channel_id")
    return list(rows.values_list("channel_id", flat=True).distinct())
