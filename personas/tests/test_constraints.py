"""Each database constraint is proven by a write that tries to break it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from chat.models import ChannelWindowAnchor, EventQueue, MessageIndex, ShortTermMemory, UnreadEvent
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy

pytestmark = pytest.mark.django_db


@pytest.fixture
def guild() -> GuildConfig:
    return GuildConfig.objects.create(guild_id=1, name="Lounge")


@pytest.fixture
def persona(guild: GuildConfig) -> Persona:
    return Persona.objects.create(guild=guild, name="Tomori", is_main=True)


def assert_rejected(create) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        create()


def test_persona_names_are_unique_per_guild_ignoring_case(guild, persona):
    assert_rejected(lambda: Persona.objects.create(guild=guild, name="TOMORI"))


def test_same_persona_name_is_allowed_in_another_guild(persona):
    other = GuildConfig.objects.create(guild_id=2, name="Other")
    Persona.objects.create(guild=other, name="tomori", is_main=True)
    assert Persona.objects.filter(name__iexact="tomori").count() == 2


def test_a_guild_has_at_most_one_main_persona(guild, persona):
    Persona.objects.create(guild=guild, name="Anon", is_main=False)
    assert_rejected(lambda: Persona.objects.create(guild=guild, name="Rana", is_main=True))


@pytest.mark.parametrize("limit", [19, 101, 0])
def test_guild_fetch_limit_outside_20_to_100_is_rejected(limit):
    assert_rejected(
        lambda: GuildConfig.objects.create(guild_id=9, name="x", message_fetch_limit=limit)
    )


@pytest.mark.parametrize("limit", [20, 100])
def test_guild_fetch_limit_bounds_are_accepted(limit):
    GuildConfig.objects.create(guild_id=9, name="x", message_fetch_limit=limit)


def test_note_depth_above_100_is_rejected(guild):
    assert_rejected(lambda: Persona.objects.create(guild=guild, name="D", context_note_depth=101))


@pytest.mark.parametrize("temperature", [-0.1, 2.01])
def test_temperature_outside_0_to_2_is_rejected(guild, temperature):
    assert_rejected(lambda: Persona.objects.create(guild=guild, name="T", temperature=temperature))


def test_context_window_must_exceed_max_output_tokens(guild):
    assert_rejected(
        lambda: Persona.objects.create(
            guild=guild, name="W", max_output_tokens=4096, context_window=4096
        )
    )


def test_unknown_channel_mode_is_rejected(guild):
    assert_rejected(lambda: ChannelConfig.objects.create(channel_id=5, guild=guild, mode="chaos"))


def test_channel_fetch_limit_override_is_range_checked_but_may_be_empty(guild):
    ChannelConfig.objects.create(channel_id=5, guild=guild, message_fetch_limit=None)
    assert_rejected(
        lambda: ChannelConfig.objects.create(channel_id=6, guild=guild, message_fetch_limit=10)
    )


def test_channel_ids_are_unique(guild):
    ChannelConfig.objects.create(channel_id=5, guild=guild)
    assert_rejected(lambda: ChannelConfig.objects.create(channel_id=5, guild=guild))


def test_block_is_unique_per_persona_user_and_type(guild, persona):
    Block.objects.create(guild=guild, persona=persona, user_id=7, type="block")
    Block.objects.create(guild=guild, persona=persona, user_id=7, type="mute")
    assert_rejected(
        lambda: Block.objects.create(guild=guild, persona=persona, user_id=7, type="block")
    )


def test_guild_wide_block_is_unique_per_user_and_type(guild):
    Block.objects.create(guild=guild, persona=None, user_id=7, type="block")
    assert_rejected(
        lambda: Block.objects.create(guild=guild, persona=None, user_id=7, type="block")
    )


def test_unknown_block_type_is_rejected(guild, persona):
    assert_rejected(
        lambda: Block.objects.create(guild=guild, persona=persona, user_id=7, type="ban")
    )


def test_unknown_privacy_level_is_rejected(guild):
    assert_rejected(lambda: UserPrivacy.objects.create(guild=guild, user_id=3, level="secret"))


def test_privacy_is_one_row_per_guild_and_user(guild):
    UserPrivacy.objects.create(guild=guild, user_id=3, level="full")
    other = GuildConfig.objects.create(guild_id=2, name="Other")
    UserPrivacy.objects.create(guild=other, user_id=3, level="minimal")
    assert_rejected(lambda: UserPrivacy.objects.create(guild=guild, user_id=3, level="minimal"))


def test_event_queue_deduplicates_channel_and_message():
    EventQueue.objects.create(channel_id=1, message_id=2, event={})
    EventQueue.objects.create(channel_id=9, message_id=2, event={})
    assert_rejected(lambda: EventQueue.objects.create(channel_id=1, message_id=2, event={}))


def test_unread_pool_holds_a_message_once():
    UnreadEvent.objects.create(channel_id=1, message_id=2, author_id=3, event={})
    assert_rejected(
        lambda: UnreadEvent.objects.create(channel_id=1, message_id=2, author_id=3, event={})
    )


def test_a_message_is_indexed_once():
    MessageIndex.objects.create(message_id=1, channel_id=2)
    assert_rejected(lambda: MessageIndex.objects.create(message_id=1, channel_id=3))


def test_window_anchor_limit_is_range_checked():
    assert_rejected(
        lambda: ChannelWindowAnchor.objects.create(channel_id=1, anchor_message_id=2, limit=200)
    )


def test_short_term_memory_is_one_per_persona_and_channel_or_dm_user(persona):
    ShortTermMemory.objects.create(persona=persona, channel_id=1)
    ShortTermMemory.objects.create(persona=persona, channel_id=2, user_id=50)
    assert_rejected(lambda: ShortTermMemory.objects.create(persona=persona, channel_id=1))
    assert_rejected(
        lambda: ShortTermMemory.objects.create(persona=persona, channel_id=3, user_id=50)
    )


def test_snowflakes_above_32_bits_round_trip(guild):
    snowflake = 1_234_567_890_123_456_789
    MessageIndex.objects.create(message_id=snowflake, channel_id=snowflake - 1)
    assert MessageIndex.objects.get(message_id=snowflake).channel_id == snowflake - 1
