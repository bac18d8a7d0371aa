"""The event queue's hot write: a batch of incoming messages into the queue and, where the
worker owns them, straight into the unread pools, as few statements as the database allows.

This is the one write every message makes, a thousand times a second on a busy worker, so it
is built by hand instead of through the ORM: on PostgreSQL, one statement binds each column as
one binary array (``unnest``) and inserts the queue rows and the pool rows together (a data-
modifying ``WITH``), about a twentieth of the CPU `QuerySet.bulk_create` spends on the same rows
(it quotes every JSON value in Python), and the same statement reads how many messages the
grown pools held before it: a single statement is its own transaction, so a batch costs one
round trip and no BEGIN or COMMIT (each round trip is a wait for the interpreter lock again on
a busy worker). Elsewhere (SQLite), two multi-row ``INSERT … RETURNING`` statements and a count,
in one transaction. Both report which queue keys were new: only those messages reach a pool, so
a replayed or duplicated message is never pooled twice.

The other write of every batch, a channel loop marking what it read (`unread_pool_delete`), is
hand-written for the same reasons.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from chat.models import EventQueue, UnreadEvent
from chat.pipeline.types import HistoryMessage
from chat.selectors.event_queue import unread_pool_counts

Key = tuple[int, int]
"""(channel id, message id): the event queue's deduplication key."""

_EMPTY_EVENT = "{}"
"""What a consumed or discarded queue row keeps of its message: nothing but the key."""
_SQLITE_ROWS_PER_STATEMENT = 500
"""Well under SQLite's 32,766 bound variables per statement (seven per row at most)."""


@dataclass(frozen=True)
class IngestRow:
    """One incoming message as it is written: its queue status decides where it goes
    (``ready``: the queue keeps it for its owner; ``consumed``: into the unread pool;
    ``discarded``: the bot wrote it, only the key is kept)."""

    message: HistoryMessage
    guild_id: int | None
    status: str
    event: str
    """The message as JSON text (`chat.codec.message_to_json_text`)."""

    @property
    def key(self) -> Key:
        return (self.message.channel_id, self.message.id)

    @property
    def pooled(self) -> bool:
        return self.status == EventQueue.Status.CONSUMED

    @property
    def queued_event(self) -> str:
        """What the queue row holds: the message while it waits, else only its key."""
        return self.event if self.status == EventQueue.Status.READY else _EMPTY_EVENT


@dataclass(frozen=True)
class Inserted:
    new_keys: set[Key]
    """The queue keys that were new (their messages were stored; the pooled ones pooled)."""
    pool_sizes: dict[int, int]
    """For each channel whose pool grew: how many unread messages it holds now."""


def ingest_rows_insert(*, rows: Sequence[IngestRow]) -> Inserted:
    """Insert ``rows`` into the event queue (a key already taken is skipped) and the new
    ``consumed`` ones into the unread pools, together (one transaction)."""
    if not rows:
        return Inserted(set(), {})
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _insert_postgresql(rows, now)
    with transaction.atomic():
        return _insert_generic(rows, now)


def _grown(rows: Sequence[IngestRow], new_keys: set[Key]) -> Counter[int]:
    """How many messages each channel's pool gained."""
    return Counter(r.message.channel_id for r in rows if r.pooled and r.key in new_keys)


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _insert_postgresql(rows: Sequence[IngestRow], now: dt.datetime) -> Inserted:
    import psycopg

    queue, pool = _table(EventQueue), _table(UnreadEvent)
    statement = f"""
        WITH incoming AS (
            SELECT * FROM unnest(
                %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::text[], %b::text[], %b::text[]
            ) WITH ORDINALITY AS t(channel_id, message_id, guild_id, author_id, status,
                                   queued_event, event, n)
        ), queued AS (
            INSERT INTO {queue} (channel_id, message_id, guild_id, status, event, created_at)
            SELECT channel_id, message_id, guild_id, status, queued_event::jsonb, %b
            FROM incoming ORDER BY n
            ON CONFLICT (channel_id, message_id) DO NOTHING
            RETURNING channel_id, message_id
        ), pooled AS (
            INSERT INTO {pool} (channel_id, message_id, guild_id, author_id, event, created_at)
            SELECT i.channel_id, i.message_id, i.guild_id, i.author_id, i.event::jsonb, %b
            FROM incoming i JOIN queued q USING (channel_id, message_id)
            WHERE i.status = %b
            ON CONFLICT (channel_id, message_id) DO NOTHING
        )
        SELECT 'new', channel_id, message_id FROM queued
        UNION ALL
        SELECT 'waiting', channel_id, count(*) FROM {pool}
        WHERE channel_id IN (SELECT channel_id FROM incoming WHERE status = %b)
        GROUP BY channel_id
    """
    params = [
        [r.message.channel_id for r in rows],
        [r.message.id for r in rows],
        [r.guild_id for r in rows],
        [r.message.author.id for r in rows],
        [str(r.status) for r in rows],
        [r.queued_event for r in rows],
        [r.event for r in rows],
        now,
        now,
        str(EventQueue.Status.CONSUMED),
        str(EventQueue.Status.CONSUMED),
    ]
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # server-side binding: binary arrays
        cursor.execute(statement, params)
        answer = cursor.fetchall()
    new_keys = {(channel_id, value) for kind, channel_id, value in answer if kind == "new"}
    # The statement's snapshot is from before its own inserts: it counted what was waiting.
    waiting = {channel_id: value for kind, channel_id, value in answer if kind == "waiting"}
    grown = _grown(rows, new_keys)
    return Inserted(new_keys, {c: waiting.get(c, 0) + n for c, n in grown.items()})


def _insert_generic(rows: Sequence[IngestRow], now: dt.datetime) -> Inserted:
    queue, pool = _table(EventQueue), _table(UnreadEvent)
    created = connection.ops.adapt_datetimefield_value(now)
    queued = _insert_chunked(
        queue,
        ("channel_id", "message_id", "guild_id", "status", "event", "created_at"),
        [
            (r.message.channel_id, r.message.id, r.guild_id, str(r.status), r.queued_event, created)
            for r in rows
        ],
        returning=True,
    )
    new: set[Key] = {(channel_id, message_id) for channel_id, message_id in queued}
    _insert_chunked(
        pool,
        ("channel_id", "message_id", "guild_id", "author_id", "event", "created_at"),
        [
            (r.message.channel_id, r.message.id, r.guild_id, r.message.author.id, r.event, created)
            for r in rows
            if r.pooled and r.key in new
        ],
    )
    grown = _grown(rows, new)
    return Inserted(new, unread_pool_counts(channel_ids=grown) if grown else {})


def _insert_chunked(
    table: str,
    columns: Sequence[str],
    values: Sequence[tuple[object, ...]],
    *,
    returning: bool = False,
) -> list[tuple[int, int]]:
    """Multi-row ``INSERT … ON CONFLICT (channel_id, message_id) DO NOTHING`` of ``values``
    into ``table``, at most `_SQLITE_ROWS_PER_STATEMENT` rows a statement; with ``returning``,
    the (channel id, message id) of each row inserted."""
    inserted: list[tuple[int, int]] = []
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(values), _SQLITE_ROWS_PER_STATEMENT):
            chunk = values[start : start + _SQLITE_ROWS_PER_STATEMENT]
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                + ", ".join([row] * len(chunk))
                + " ON CONFLICT (channel_id, message_id) DO NOTHING"
                + (" RETURNING channel_id, message_id" if returning else ""),
                [value for one in chunk for value in one],  # type: ignore[misc]
            )
            if returning:
                inserted += cursor.fetchall()
    return inserted


def unread_pool_delete(
    *, channel_id: int, message_ids: Iterable[int], up_to_message_id: int | None = None
) -> int:
    """Delete these messages (with ``up_to_message_id``, those up to it) from the channel's
    unread pool; returns how many were there. The other write a busy channel makes with each
    batch (its loop marks it read), so, like the ingest, it is hand-written: one statement
    that is its own transaction on PostgreSQL (`QuerySet.delete` wraps its statement in BEGIN
    and COMMIT, three round trips where one does); on SQLite, one per chunk of ids."""
    ids = sorted(set(message_ids))
    table = connection.ops.quote_name(UnreadEvent._meta.db_table)
    bound = "" if up_to_message_id is None else " AND message_id <= %s"
    limit = [] if up_to_message_id is None else [up_to_message_id]
    deleted = 0
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"DELETE FROM {table} WHERE channel_id = %s{bound} AND message_id = ANY(%s)",
                [channel_id, *limit, ids],
            )
            return int(cursor.rowcount)
        for start in range(0, len(ids), _SQLITE_ROWS_PER_STATEMENT):
            chunk = ids[start : start + _SQLITE_ROWS_PER_STATEMENT]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"DELETE FROM {table} WHERE channel_id = %s{bound} AND message_id IN ({marks})",
                [channel_id, *limit, *chunk],
            )
            deleted += cursor.rowcount
    return deleted
