"""When a reactive turn counts as queued (its trigger waited); what a batch's plans read."""

from __future__ import annotations

import datetime as dt

import pytest
from pytest_django import DjangoAssertNumQueries

from chat.loop.reactive import trigger_plans, trigger_waited
from chat.pipeline.types import MessageReference
from chat.selectors import channel_configuration
from chat.tests.factories import message
from personas.models import ChannelConfig, GuildConfig, Persona


@pytest.mark.parametrize(
    ("message_id", "previous_reply_id", "pending_ids", "queued"),
    [
        (10, None, [10], False),  # the first message of a stretch, alone
        (30, 20, [30], False),  # posted after the previous reply appeared
        (15, 20, [15], True),  # posted before the previous reply was delivered
        (10, None, [10, 11], True),  # another message stands between it and its reply
        (30, 20, [25, 30], False),  # an older pending message does not stand between
    ],
)
def test_a_turn_is_queued_only_when_its_trigger_waited(
    message_id, previous_reply_id, pending_ids, queued
) -> None:
    waited = trigger_waited(
        message_id, previous_reply_id=previous_reply_id, pending_ids=pending_ids
    )

    assert waited is queued


@pytest.mark.django_db
def test_a_batch_of_chatter_nobody_could_address_is_planned_without_a_query(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    guild = GuildConfig.objects.create(guild_id=10, name="g")
    ChannelConfig.objects.create(channel_id=20, guild=guild)
    Persona.objects.create(guild=guild, name="Tomori", is_main=True, triggers=["tomori"])
    now = dt.datetime(2026, 7, 11, 12, tzinfo=dt.UTC)
    configuration = channel_configuration(channel_id=20, guild_id=10, now=now)
    chatter = [message(content=text, channel_id=20) for text in ("lunch?", "tomorikun", "ok")]
    addressed = message(content="hey tomori", channel_id=20)
    reply = message(content="agreed", channel_id=20, reference=MessageReference(1, 20))

    with django_assert_num_queries(0):
        quiet = trigger_plans(configuration=configuration, pending=chatter, bot_user_id=999)
    with django_assert_num_queries(3):  # standing, replied-to authors, proxy replacements
        mixed = trigger_plans(
            configuration=configuration, pending=[*chatter, addressed, reply], bot_user_id=999
        )

    assert [p.answers for p in quiet] == [(), (), ()]
    assert [[persona.name for persona, _ in p.answers] for p in mixed] == [
        [],
        [],
        [],
        ["Tomori"],
        [],
    ]
