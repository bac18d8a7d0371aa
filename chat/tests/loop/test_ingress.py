"""The event queue: persisted queue, deduplication, own-message filtering, the unread pool."""

from __future__ import annotations

import json

import pytest

from chat.codec import message_from_json, message_to_json
from chat.models import EventQueue, UnreadEvent
from chat.pipeline.types import Attachment, Author, HistoryMessage
from chat.selectors.event_queue import unread_channel_ids, unread_pool_count, unread_pool_messages
from chat.services.event_queue import (
    OwnIdentity,
    event_ingest_many,
    event_queue_consume,
    unread_pool_mark_read,
    unread_pool_take,
)
from chat.shards import ShardSet
from chat.tests.factories import ALICE, BOB, CHANNEL_ID, T0, message
from chat.tests.privacy import user_privacy

pytestmark = pytest.mark.django_db

BOT = 999
OWN = OwnIdentity(bot_user_id=BOT, webhook_ids={777})


def test_codec_round_trips_a_message_with_attachments():
    original = HistoryMessage(
        id=1_300_000_000_000_000_001,
        channel_id=5,
        author=Author(id=7, display_name="alice"),
        content="see file",
        created_at=T0,
        attachments=(Attachment(id=9, filename="notes.txt", url="https://cdn/notes.txt"),),
    )
    assert message_from_json(message_to_json(original)) == original


def test_a_duplicate_dispatch_is_stored_once():
    msg = message(content="hi")
    event_ingest_many(batch=[(msg, 1)])
    event_ingest_many(batch=[(msg, 1), (msg, 1)])
    assert EventQueue.objects.count() == 1


def test_consume_moves_ready_events_into_the_unread_pool_in_order():
    first, second = message(content="one", channel_id=10), message(content="two", channel_id=10)
    other = message(content="three", channel_id=11)
    for msg in (first, other, second):
        event_ingest_many(batch=[(msg, 1)])

    consumed = event_queue_consume(own=OWN)

    assert consumed.channel_ids == [10, 11]
    assert [m.content for m in unread_pool_messages(channel_id=10)] == ["one", "two"]
    assert set(EventQueue.objects.values_list("status", flat=True)) == {"consumed"}


def test_consume_reports_how_many_unread_messages_each_grown_pool_holds():
    event_ingest_many(batch=[(message(content="left", channel_id=10), 1)])
    event_queue_consume(own=OWN)
    event_ingest_many(
        batch=[(message(content=t, channel_id=c), 1) for t, c in (("a", 10), ("b", 11))]
    )
    event_ingest_many(
        batch=[
            (message(content="mine", channel_id=12, author=Author(id=BOT, display_name="bot")), 1)
        ]
    )

    consumed = event_queue_consume(own=OWN)

    assert consumed.pool_sizes == {10: 2, 11: 1}  # the older message still waits in 10


def test_the_bots_own_messages_and_webhook_echoes_never_count_as_unread():
    own = message(content="from the bot", author=Author(id=BOT, display_name="bot", is_bot=True))
    echo = message(
        content="from a persona webhook",
        author=Author(id=888, display_name="Anon", is_bot=True, webhook_id=777),
    )
    foreign = message(
        content="another bot's webhook",
        author=Author(id=889, display_name="Other", is_bot=True, webhook_id=123),
    )
    for msg in (own, echo, foreign):
        event_ingest_many(batch=[(msg, 1)])

    consumed = event_queue_consume(own=OWN)

    assert [m.content for m in consumed.discarded] == ["from the bot", "from a persona webhook"]
    assert [m.content for m in unread_pool_messages(channel_id=CHANNEL_ID)] == [
        "another bot's webhook"
    ]


def test_a_replayed_message_after_consumption_is_still_deduplicated():
    msg = message(content="hi")
    event_ingest_many(batch=[(msg, 1)])
    event_queue_consume(own=OWN)
    unread_pool_take(channel_id=msg.channel_id)

    event_ingest_many(batch=[(msg, 1)])
    assert EventQueue.objects.get(message_id=msg.id).status == "consumed"
    assert event_queue_consume(own=OWN).unread == []
    assert unread_pool_count(channel_id=msg.channel_id) == 0


def test_take_up_to_a_message_leaves_later_arrivals_unread():
    msgs = [message(content=str(n), channel_id=20) for n in range(4)]
    for msg in msgs:
        event_ingest_many(batch=[(msg, 1)])
    event_queue_consume(own=OWN)

    taken = unread_pool_take(channel_id=20, up_to_message_id=msgs[1].id)

    assert [m.content for m in taken] == ["0", "1"]
    assert [m.content for m in unread_pool_messages(channel_id=20)] == ["2", "3"]
    assert unread_channel_ids() == [20]


def test_consume_is_idempotent_when_the_pool_already_has_the_message():
    msg = message(content="hi")
    event_ingest_many(batch=[(msg, 1)])
    UnreadEvent.objects.create(
        channel_id=msg.channel_id, message_id=msg.id, author_id=42, event=message_to_json(msg)
    )

    event_queue_consume(own=OWN)

    assert unread_pool_count(channel_id=msg.channel_id) == 1


def test_a_consumed_queue_row_keeps_only_its_key():
    msg = message(content="hello there")
    event_ingest_many(batch=[(msg, 1)])

    event_queue_consume(own=OWN)

    row = EventQueue.objects.get(message_id=msg.id)
    assert (row.channel_id, row.status, row.event) == (msg.channel_id, "consumed", {})


def test_one_batch_over_several_guilds_withholds_each_guilds_full_privacy_users_only():
    user_privacy(ALICE.id, guild_id=1, level="full")
    user_privacy(BOB.id, guild_id=2, level="partial")
    batch = [
        (message(content="secret in one", author=ALICE, channel_id=10), 1),
        (message(content="open in two", author=ALICE, channel_id=20), 2),
        (message(content="partial in two", author=BOB, channel_id=20), 2),
        (message(content="secret in a dm", author=ALICE, channel_id=30), None),
    ]
    event_ingest_many(batch=batch)
    event_queue_consume(own=OWN)

    kept = {m.content for c in (10, 20, 30) for m in unread_pool_messages(channel_id=c)}
    assert kept == {"", "open in two", "partial in two"}  # full in guild 1 holds in DMs too


def test_a_full_privacy_users_words_are_stored_nowhere():
    user_privacy(ALICE.id, guild_id=1, level="full")
    secret = message(
        content="my secret plans",
        author=ALICE,
        attachments=(Attachment(id=9, filename="plans.txt", url="https://cdn/plans.txt"),),
    )
    event_ingest_many(batch=[(secret, 1), (message(content="hi all", author=BOB), 1)])
    event_queue_consume(own=OWN)

    stored = [json.dumps(row.event) for row in UnreadEvent.objects.all()]
    stored += [json.dumps(row.event) for row in EventQueue.objects.all()]
    assert not any("secret" in text or "plans" in text for text in stored)
    [kept] = [m for m in unread_pool_messages(channel_id=CHANNEL_ID) if m.id == secret.id]
    assert (kept.author.id, kept.content, kept.attachments) == (ALICE.id, "", ())
    assert any(m.content == "hi all" for m in unread_pool_messages(channel_id=CHANNEL_ID))


def test_marking_read_up_to_a_message_leaves_later_arrivals_and_other_channels_unread():
    msgs = [message(content=str(n), channel_id=20) for n in range(4)]
    elsewhere = message(content="other", channel_id=21)
    event_ingest_many(batch=[(msg, 1) for msg in (*msgs, elsewhere)])
    event_queue_consume(own=OWN)

    removed = unread_pool_mark_read(channel_id=20, up_to_message_id=msgs[1].id)

    assert removed == 2
    assert [m.content for m in unread_pool_messages(channel_id=20)] == ["2", "3"]
    assert [m.content for m in unread_pool_messages(channel_id=21)] == ["other"]


def test_a_loop_takes_only_what_it_planned_from_the_pool():
    caught_up = message(1, "read back later, older", channel_id=10)
    live = message(2, "came live", channel_id=10)
    event_ingest_many(batch=[(live, 1)])
    event_queue_consume(own=OWN)
    planned = [m.id for m in unread_pool_messages(channel_id=10)]
    event_ingest_many(batch=[(caught_up, 1)])
    event_queue_consume(own=OWN)

    removed = unread_pool_mark_read(channel_id=10, up_to_message_id=live.id, message_ids=planned)
    shown = unread_pool_take(channel_id=10, message_ids=[caught_up.id, live.id])

    assert removed == 1 and [m.id for m in shown] == [caught_up.id]
    assert unread_pool_messages(channel_id=10) == []


def test_marking_a_large_planned_batch_read_removes_exactly_those_up_to_the_bound():
    """More ids than SQLite binds in one statement: every planned message up to the bound
    goes, the one past it and the unplanned one stay."""
    msgs = [message(content=str(n), channel_id=30) for n in range(1_201)]
    unplanned = msgs[600]
    event_ingest_many(batch=[(msg, 1) for msg in msgs], own=OWN)
    planned = [m.id for m in msgs if m is not unplanned]

    removed = unread_pool_mark_read(
        channel_id=30, up_to_message_id=msgs[-2].id, message_ids=planned
    )

    assert removed == 1_199
    assert [m.content for m in unread_pool_messages(channel_id=30)] == ["600", "1200"]


# -- the worker's path: queue rows and unread pools in one transaction -----------------------

TWO_OF_FOUR = ShardSet(ids=(2,), count=4)
ON_SHARD_TWO, ON_SHARD_ONE = 2 << 22, 1 << 22


def test_the_workers_own_shards_messages_reach_the_pool_with_their_queue_rows():
    mine = message(content="mine", channel_id=10)
    others = message(content="not mine", channel_id=20)
    by_the_bot = message(
        content="our reply", channel_id=10, author=Author(id=BOT, display_name="T")
    )

    moved = event_ingest_many(
        batch=[(mine, ON_SHARD_TWO), (others, ON_SHARD_ONE), (by_the_bot, ON_SHARD_TWO)],
        own=OWN,
        shards=TWO_OF_FOUR,
    )

    assert [(guild, m.content) for guild, m in moved.unread] == [(ON_SHARD_TWO, "mine")]
    assert [m.content for m in moved.discarded] == ["our reply"]
    assert moved.pool_sizes == {10: 1}
    assert [m.content for m in unread_pool_messages(channel_id=10)] == ["mine"]
    rows = {row.message_id: (row.status, row.event) for row in EventQueue.objects.all()}
    assert rows[mine.id] == ("consumed", {})  # the key alone stays, as after a consume
    assert rows[by_the_bot.id] == ("discarded", {})
    assert rows[others.id][0] == "ready"  # left for the worker that owns shard 1
    assert message_from_json(rows[others.id][1]) == others
    assert event_queue_consume(own=OWN).channel_ids == [20]


def test_a_message_seen_again_is_never_pooled_twice():
    msg = message(content="hi", channel_id=10)
    first = event_ingest_many(batch=[(msg, 1), (msg, 1)], own=OWN)
    unread_pool_mark_read(channel_id=10, up_to_message_id=msg.id)  # answered

    again = event_ingest_many(batch=[(msg, 1)], own=OWN)  # replayed after a RESUME

    assert [m.id for _, m in first.unread] == [msg.id]
    assert again.unread == [] and again.pool_sizes == {}
    assert unread_pool_messages(channel_id=10) == []
    assert EventQueue.objects.count() == 1


def test_a_pooled_message_reads_back_exactly_as_it_came():
    original = message(
        content="see file",
        channel_id=10,
        attachments=(Attachment(id=9, filename="notes.txt", url="https://cdn/notes.txt"),),
    )
    event_ingest_many(batch=[(original, 1)], own=OWN)
    assert unread_pool_messages(channel_id=10) == [original]


def test_the_pool_sizes_count_what_was_already_waiting():
    event_ingest_many(
        batch=[(message(content=str(n), channel_id=10), 1) for n in range(3)], own=OWN
    )
    moved = event_ingest_many(batch=[(message(content="more", channel_id=10), 1)], own=OWN)
    assert moved.pool_sizes == {10: 4}


def test_a_full_privacy_users_words_reach_no_pool_on_the_workers_path():
    user_privacy(ALICE.id, guild_id=1, level="full")
    secret = message(content="my secret plans", author=ALICE, channel_id=10)
    event_ingest_many(batch=[(secret, 1)], own=OWN)

    stored = [json.dumps(row.event) for row in UnreadEvent.objects.all()]
    stored += [json.dumps(row.event) for row in EventQueue.objects.all()]
    assert not any("secret" in text for text in stored)
    assert [m.content for m in unread_pool_messages(channel_id=10)] == [""]
