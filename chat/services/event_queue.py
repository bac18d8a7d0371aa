"""The event queue and the unread pools (seed 003, phases 1–2): every incoming message is
persisted, deduplicated, then moved into its channel's unread pool, from which turns take what
they answer.

The (channel, message) unique key of `EventQueue` is the deduplication set: a dispatch the
gateway replays, or a message seen again after a RESUME, finds its key taken and is dropped.
Consumed rows stay as keys (without the message) for ``DEDUP_RETENTION_DAYS``, then
`chat.services.retention.records_prune` removes them.
Nothing is lost on a crash: a row is either still ``ready`` (consumed again at start) or already
in the unread pool; the move is one transaction. The reads (what is ready, what a pool holds)
are in `chat.selectors`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from asgiref.sync import sync_to_async
from django.db import transaction

from chat import selectors
from chat.codec import message_from_json, message_to_json_text
from chat.models import EventQueue, UnreadEvent
from chat.pipeline.types import HistoryMessage
from chat.ports import DiscordPort
from chat.selectors.event_queue import unread_pool_counts, unread_pool_messages
from chat.services.event_queue_rows import IngestRow, ingest_rows_insert, unread_pool_delete
from chat.shards import EVERY_SHARD, ShardSet


@dataclass(frozen=True)
class OwnIdentity:
    """How the worker recognises its own messages: the bot account and its managed webhooks.

    A webhook id enters ``webhook_ids`` before the webhook's first message is sent, so an echo
    that reaches the gateway before the send returns is still recognised as ours.
    """

    bot_user_id: int
    webhook_ids: Collection[int] = ()
    application_id: int | None = None

    def wrote(self, message: HistoryMessage) -> bool:
        return (
            message.author.id == self.bot_user_id
            or message.author.webhook_id in self.webhook_ids
            or (self.application_id is not None and message.author.id == self.application_id)
        )


def event_ingest_many(
    *,
    batch: Sequence[tuple[HistoryMessage, int | None]],
    own: OwnIdentity | None = None,
    shards: ShardSet = EVERY_SHARD,
) -> Consumed:
    """Persist incoming messages (each with its guild id, None for a DM) in one transaction;
    keys already taken (replays, duplicates, catch-up of messages already seen) are skipped.

    Without ``own`` every new row is left ``ready`` for `event_queue_consume`. With ``own``
    (the worker's identity: it owns the guilds on ``shards``), phases 1 and 2 happen together:
    a new row of a guild on ``shards`` is stored already consumed, its message in the channel's
    unread pool (or discarded, when the bot or one of its webhooks wrote it), in the same
    transaction (`ingest_rows_insert`), so nothing is lost between the two and no consumer has
    to read the row back.
    Rows of other guilds stay ``ready`` for the worker that owns them.

    A user who chose full privacy has the text and media of their messages withheld here, so
    their words are stored nowhere (one query for the whole batch, whatever guilds it spans).
    Returns what moved into unread pools, with the sizes of the pools that grew.
    """
    if not batch:
        return Consumed(unread=[], discarded=[])
    authors: dict[int | None, set[int]] = {}
    for message, guild_id in batch:
        authors.setdefault(guild_id, set()).add(message.accountable_user_id)
    private = selectors.full_privacy_by_guild(user_ids_by_guild=authors)
    rows: list[IngestRow] = []
    for message, guild_id in dict(((m.channel_id, m.id), (m, g)) for m, g in batch).values():
        kept = (
            withheld(message=message)
            if message.accountable_user_id in private[guild_id]
            else message
        )
        status = EventQueue.Status.READY
        if own is not None and shards.owns(guild_id):
            wrote = own.wrote(message)
            status = EventQueue.Status.DISCARDED if wrote else EventQueue.Status.CONSUMED
        rows.append(IngestRow(kept, guild_id, status, message_to_json_text(kept)))
    inserted = ingest_rows_insert(rows=rows)
    new = inserted.new_keys
    return Consumed(
        unread=[(r.guild_id, r.message) for r in rows if r.pooled and r.key in new],
        discarded=[
            r.message for r in rows if r.status == EventQueue.Status.DISCARDED and r.key in new
        ],
        pool_sizes=inserted.pool_sizes,
    )


def withheld(*, message: HistoryMessage) -> HistoryMessage:
    """``message`` without anything its author wrote or attached: who, where and when only."""
    return replace(
        message,
        content="",
        attachments=(),
        stickers=(),
        embeds=(),
        containers=(),
        snapshots=(),
        reactions=(),
    )


@dataclass(frozen=True)
class Consumed:
    """What `event_queue_consume` did: messages now in unread pools, and discarded own ones."""

    unread: list[tuple[int | None, HistoryMessage]]
    discarded: list[HistoryMessage]
    full: bool = False
    """As many rows as asked for were moved: more may be ready."""
    pool_sizes: Mapping[int, int] = field(default_factory=dict)
    """How many unread messages each channel whose pool grew held once the move committed."""

    @property
    def channel_ids(self) -> list[int]:
        """Channels whose pools grew, in first-arrival order (each loop wakes once)."""
        return list(dict.fromkeys(message.channel_id for _, message in self.unread))


def event_queue_consume(
    *, own: OwnIdentity, shards: ShardSet = EVERY_SHARD, limit: int = 500
) -> Consumed:
    """Move up to ``limit`` ready events of guilds on ``shards``, oldest first, into their
    channels' unread pools (another worker owns the other shards' events).

    One transaction, set-based: lock the ready rows (``SKIP LOCKED``, so two workers never move
    the same event), insert the others' messages into the unread pools in one statement
    (idempotently), and mark every row consumed or — when the bot or one of its webhooks wrote
    it (own messages never count as unread) — discarded. The moved rows keep only their key.
    ``Consumed.full`` says whether more may be waiting; ``Consumed.pool_sizes`` how many unread
    messages the grown pools hold (one grouped count, in the same transaction).
    """
    unread: list[tuple[int | None, HistoryMessage]] = []
    discarded: list[HistoryMessage] = []
    with transaction.atomic():
        ready = EventQueue.objects.select_for_update(skip_locked=True).filter(
            status=EventQueue.Status.READY
        )
        rows = list(shards.filter(ready).order_by("id")[:limit])
        pool, consumed_ids, discarded_ids = [], [], []
        for row in rows:
            message = message_from_json(row.event)
            if own.wrote(message):
                discarded.append(message)
                discarded_ids.append(row.id)
                continue
            pool.append(
                UnreadEvent(
                    channel_id=row.channel_id,
                    message_id=row.message_id,
                    guild_id=row.guild_id,
                    author_id=message.author.id,
                    event=row.event,
                )
            )
            unread.append((row.guild_id, message))
            consumed_ids.append(row.id)
        UnreadEvent.objects.bulk_create(pool, ignore_conflicts=True)
        for status, ids in (
            (EventQueue.Status.CONSUMED, consumed_ids),
            (EventQueue.Status.DISCARDED, discarded_ids),
        ):
            if ids:
                EventQueue.objects.filter(id__in=ids).update(status=status, event={})
        grown = {message.channel_id for _, message in unread}
        pool_sizes = unread_pool_counts(channel_ids=grown) if grown else {}
    return Consumed(
        unread=unread, discarded=discarded, full=len(rows) == limit, pool_sizes=pool_sizes
    )


def unread_pool_take(
    *,
    channel_id: int,
    up_to_message_id: int | None = None,
    message_ids: Iterable[int] | None = None,
) -> list[HistoryMessage]:
    """Remove and return the channel's unread messages, oldest first.

    With ``up_to_message_id`` only messages up to and including that id are taken (a turn marks
    read what its history covered; later arrivals stay unread for the next step); with
    ``message_ids`` only those (what a step was shown: a message caught up over REST may be
    older than one that came live, and arrive in the pool after it was planned).
    """
    with transaction.atomic():
        rows = UnreadEvent.objects.select_for_update().filter(channel_id=channel_id)
        if up_to_message_id is not None:
            rows = rows.filter(message_id__lte=up_to_message_id)
        if message_ids is not None:
            rows = rows.filter(message_id__in=set(message_ids))
        taken = list(rows.order_by("message_id"))
        UnreadEvent.objects.filter(id__in=[row.id for row in taken]).delete()
    return [message_from_json(row.event) for row in taken]


def unread_pool_mark_read(
    *, channel_id: int, up_to_message_id: int, message_ids: Iterable[int] | None = None
) -> int:
    """Remove the channel's unread messages up to and including ``up_to_message_id`` (with
    ``message_ids``, of those only) without reading them back (the caller has them: a turn's
    trigger and what came before it); returns how many were removed."""
    if message_ids is None:
        rows = UnreadEvent.objects.filter(channel_id=channel_id, message_id__lte=up_to_message_id)
        deleted, _ = rows.delete()
        return deleted
    return unread_pool_delete(
        channel_id=channel_id, message_ids=message_ids, up_to_message_id=up_to_message_id
    )


def unread_pool_discard(*, channel_id: int, message_ids: Iterable[int]) -> int:
    """Drop these messages from the channel's unread pool (a proxy system replaced them: their
    proxied copies are answered instead); returns how many were there."""
    return unread_pool_delete(channel_id=channel_id, message_ids=message_ids)


async def unread_pool_without_superseded(
    *, port: DiscordPort, channel_id: int
) -> list[HistoryMessage]:
    """The channel's unread messages, oldest first, once originals a proxy system replaced
    are discarded from the pool (`DiscordPort.superseded_originals`)."""
    pending = await sync_to_async(unread_pool_messages)(channel_id=channel_id)
    return await pool_without_superseded(pending=pending, port=port, channel_id=channel_id)


async def pool_without_superseded(
    *, pending: list[HistoryMessage], port: DiscordPort, channel_id: int
) -> list[HistoryMessage]:
    """``pending`` (the channel's unread messages) once the originals a proxy system replaced
    are discarded from the pool."""
    superseded = await port.superseded_originals(pending) if pending else frozenset()
    if not superseded:
        return pending
    await sync_to_async(unread_pool_discard)(channel_id=channel_id, message_ids=superseded)
    return [m for m in pending if m.id not in superseded]
