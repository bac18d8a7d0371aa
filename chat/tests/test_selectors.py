"""Selectors: configuration and records read into the loop's and the pipeline's inputs; the
deployment's model settings are read when asked for, not at import."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings

from chat.models import MessageIndex
from chat.pipeline.types import PrivacyLevel
from chat.selectors import (
    KnownGuild,
    channel_configuration,
    channel_guild_id,
    persona_model_specs,
    planner_model_specs,
    replied_persona_names,
    user_standing,
)
from chat.services.event_queue import (
    OwnIdentity,
    event_ingest_many,
    event_queue_consume,
    unread_pool_take,
)
from chat.tests.config_writes import rows_update
from chat.tests.factories import message
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_persona_models_are_its_model_then_its_fallbacks_without_blanks_or_repeats(
    settings: Settings,
) -> None:
    settings.LLM_MODEL = "deployment-model"
    persona = Persona(
        name="Tomori",
        llm_model="",
        fallback_models=["backup", " ", "deployment-model", "backup", "last"],
        temperature=0.2,
        max_output_tokens=300,
    )

    specs = persona_model_specs(persona=persona, stop=("\nAnn:",))

    assert [spec.name for spec in specs] == ["deployment-model", "backup", "last"]
    assert {(s.temperature, s.max_output_tokens, s.stop) for s in specs} == {
        (0.2, 300, ("\nAnn:",))
    }
    assert not any(spec.supports_vision or spec.supports_prefill for spec in specs)


def test_a_persona_model_overrides_the_deployment_default(settings: Settings) -> None:
    settings.LLM_MODEL = "deployment-model"
    persona = Persona(name="Tomori", llm_model="own-model", fallback_models=[])

    assert [spec.name for spec in persona_model_specs(persona=persona)] == ["own-model"]


# -- configuration and records ---------------------------------------------------------------------


@pytest.mark.django_db
def test_a_channel_configuration_is_one_read_at_one_instant():
    now = dt.datetime(2026, 7, 11, 12, tzinfo=dt.UTC)
    guild = GuildConfig.objects.create(guild_id=10, name="g", message_fetch_limit=40)
    ChannelConfig.objects.create(channel_id=20, guild=guild, message_fetch_limit=30)
    main = Persona.objects.create(guild=guild, name="Tomori", is_main=True)
    Persona.objects.create(guild=guild, name="Anon")
    Persona.objects.create(guild=guild, name="Off", enabled=False)
    Block.objects.create(guild=guild, persona=main, user_id=7, type="mute")
    Block.objects.create(guild=guild, persona=None, user_id=8, type="block")
    Block.objects.create(guild=guild, user_id=9, type="block", expires_at=now)

    configuration = channel_configuration(channel_id=20, guild_id=10, now=now)

    assert configuration is not None
    assert (configuration.settings.fetch_limit, configuration.read_at) == (30, now)
    assert [p.name for p in configuration.personas] == ["Tomori", "Anon"]
    assert sorted((b.persona_name, b.user_id) for b in configuration.blocks) == [
        ("Anon", 8),
        ("Off", 8),
        ("Tomori", 7),
        ("Tomori", 8),
    ]
    assert configuration.persona_named("anon").name == "Anon"
    assert channel_configuration(channel_id=20, guild_id=11, now=now) is None


@pytest.mark.django_db
def test_a_channels_guild_is_what_its_messages_were_ingested_with():
    guild_message = message(content="hi", channel_id=30)
    dm = message(content="psst", channel_id=31)
    event_ingest_many(batch=[(guild_message, 10)])
    event_ingest_many(batch=[(dm, None)])
    event_queue_consume(own=OwnIdentity(bot_user_id=1))
    unread_pool_take(channel_id=30)  # an empty pool still knows its guild

    assert channel_guild_id(channel_id=30) == KnownGuild(10)
    assert channel_guild_id(channel_id=31) == KnownGuild(None)
    assert channel_guild_id(channel_id=32) is None  # never seen: unknown, not a DM


@pytest.mark.django_db
def test_privacy_levels_are_read_as_the_pipelines_enum():
    guild = GuildConfig.objects.create(guild_id=10, name="g")
    UserPrivacy.objects.create(guild=guild, user_id=1, level="full")
    UserPrivacy.objects.create(guild=guild, user_id=2, level="partial", blacklisted=True)

    standing = user_standing(user_ids=[1, 2, 3], guild_id=10)

    assert standing.privacy == {1: PrivacyLevel.FULL, 2: PrivacyLevel.PARTIAL}
    assert (standing.full_privacy, standing.blacklisted) == ({1}, {2})


@pytest.mark.django_db
def test_privacy_is_the_guilds_and_in_direct_messages_the_strictest_anywhere():
    a = GuildConfig.objects.create(guild_id=10, name="a")
    b = GuildConfig.objects.create(guild_id=11, name="b")
    UserPrivacy.objects.create(guild=a, user_id=1, level="full")
    UserPrivacy.objects.create(guild=b, user_id=1, level="minimal", blacklisted=True)
    UserPrivacy.objects.create(guild=a, user_id=2, level="minimal")
    UserPrivacy.objects.create(guild=b, user_id=2, level="partial")

    in_a = user_standing(user_ids=[1, 2], guild_id=10)
    in_b = user_standing(user_ids=[1, 2], guild_id=11)
    in_dms = user_standing(user_ids=[1, 2], guild_id=None)

    assert in_a.privacy == {1: PrivacyLevel.FULL, 2: PrivacyLevel.MINIMAL}
    assert (in_a.full_privacy, in_a.blacklisted) == ({1}, set())
    assert in_b.privacy == {1: PrivacyLevel.MINIMAL, 2: PrivacyLevel.PARTIAL}
    assert (in_b.full_privacy, in_b.blacklisted) == (set(), {1})
    assert in_dms.privacy == {1: PrivacyLevel.FULL, 2: PrivacyLevel.PARTIAL}
    assert in_dms.blacklisted == {1}


@pytest.mark.django_db
def test_replied_persona_names_come_from_the_message_index():
    guild = GuildConfig.objects.create(guild_id=10, name="g")
    anon = Persona.objects.create(guild=guild, name="Anon")
    MessageIndex.objects.create(message_id=100, channel_id=20, persona=anon)
    MessageIndex.objects.create(message_id=101, channel_id=20)

    assert replied_persona_names(message_ids=[100, 101, 102]) == {100: "Anon"}


def test_model_capabilities_come_from_the_name_and_the_persona_overrides_its_first_model(
    settings: Settings,
) -> None:
    settings.LLM_MODEL = "deployment-model"
    persona = Persona(
        name="Tomori", llm_model="llama3:8b", fallback_models=["gpt-4o"], llm_prefill=True
    )

    first, fallback = persona_model_specs(persona=persona)

    assert (first.supports_vision, first.supports_prefill, first.merge_same_role) == (
        False,
        True,
        False,
    )
    assert (fallback.supports_vision, fallback.supports_prefill) == (True, False)


@pytest.mark.django_db
def test_dms_are_answered_by_the_persona_the_admin_chose_with_its_guilds_blocks():
    now = dt.datetime(2026, 7, 11, 12, tzinfo=dt.UTC)
    first = GuildConfig.objects.create(guild_id=10, name="first")
    second = GuildConfig.objects.create(guild_id=11, name="second")
    Persona.objects.create(guild=first, name="Tomori", is_main=True)
    anon = Persona.objects.create(guild=second, name="Anon")
    Block.objects.create(guild=second, persona=anon, user_id=7, type="block")
    Block.objects.create(guild=first, user_id=8, type="block")

    off_by_default = channel_configuration(channel_id=99, guild_id=None, now=now)
    rows_update(Persona.objects.filter(pk=anon.pk), answers_dms=True)
    chosen = channel_configuration(channel_id=99, guild_id=None, now=now)

    assert off_by_default is not None and off_by_default.personas == ()
    assert [p.name for p in chosen.personas] == ["Anon"]
    assert [(b.persona_name, b.user_id) for b in chosen.blocks] == [("Anon", 7)]


@pytest.mark.django_db
def test_the_planner_model_is_the_guilds_else_the_deployments_else_the_main_personas(
    settings: Settings,
):
    now = dt.datetime(2026, 7, 11, 12, tzinfo=dt.UTC)
    guild = GuildConfig.objects.create(guild_id=10, name="g")
    Persona.objects.create(guild=guild, name="Tomori", is_main=True, llm_model="persona-model")
    settings.LLM_PLANNER_MODEL = ""

    def planner_model() -> str:
        configuration = channel_configuration(channel_id=20, guild_id=10, now=now)
        return planner_model_specs(configuration=configuration)[0].name

    by_persona = planner_model()
    settings.LLM_PLANNER_MODEL = "deployment-planner"
    by_deployment = planner_model()
    rows_update(GuildConfig.objects.filter(pk=guild.pk), planner_model="guild-planner")

    assert (by_persona, by_deployment, planner_model()) == (
        "persona-model",
        "deployment-planner",
        "guild-planner",
    )
