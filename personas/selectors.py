"""Reads of guild configuration."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Prefetch

from personas.case_schema import CASE_FILE_VERSION
from personas.config_fields import (
    BLOCK_SETTINGS,
    CHANNEL_SETTINGS,
    GUILD_SETTINGS,
    PERSONA_SETTINGS,
    USER_SETTINGS,
    row_from_instance,
)
from personas.config_schema import CONFIG_VERSION
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy
from personas.models_cases import PersonaTestCase


def config_export(*, guild_ids: Iterable[int] | None = None) -> dict:
    """The configuration of the given guilds (all when ``None``) as a version-1 document.

    The result is what ``config_import`` accepts: importing it back changes nothing. Snowflakes
    are strings; rows are ordered (personas main first, then by name; channels, blocks and users
    by id) so the same database always exports the same bytes.
    """
    guilds = GuildConfig.objects.order_by("guild_id").prefetch_related(
        Prefetch("personas", queryset=Persona.objects.order_by("-is_main", "name")),
        Prefetch("personas__test_cases", queryset=PersonaTestCase.objects.order_by("name", "id")),
        Prefetch("channels", queryset=ChannelConfig.objects.order_by("channel_id")),
        Prefetch(
            "blocks",
            queryset=Block.objects.select_related("persona").order_by("user_id", "type", "id"),
        ),
        Prefetch("users", queryset=UserPrivacy.objects.order_by("user_id")),
    )
    if guild_ids is not None:
        guilds = guilds.filter(guild_id__in=list(guild_ids))
    return {"version": CONFIG_VERSION, "guilds": [_guild(guild) for guild in guilds]}


def _guild(guild: GuildConfig) -> dict:
    return {
        **row_from_instance(GUILD_SETTINGS, guild),
        "personas": [_persona(p) for p in guild.personas.all()],
        "channels": [row_from_instance(CHANNEL_SETTINGS, c) for c in guild.channels.all()],
        "blocks": [row_from_instance(BLOCK_SETTINGS, b) for b in guild.blocks.all()],
        "users": [row_from_instance(USER_SETTINGS, u) for u in guild.users.all()],
    }


def _persona(persona: Persona) -> dict:
    """A persona's row, with its test cases as ``tests`` when it has any."""
    row = row_from_instance(PERSONA_SETTINGS, persona)
    cases = [case.spec for case in persona.test_cases.all()]
    return {**row, "tests": cases} if cases else row


def persona_cases_file(*, personas: Iterable[Persona]) -> dict:
    """The test cases of ``personas`` as a test file (`personas.case_schema.CaseFile`: each
    case naming its guild and persona), cases by persona then name: what
    `personas.case_services.persona_cases_import` reads back unchanged."""
    cases = []
    for persona in personas:
        for case in persona.test_cases.order_by("name", "id"):
            cases.append(
                {
                    "name": case.spec["name"],
                    "guild": str(persona.guild.guild_id),
                    "persona": persona.name,
                    **case.spec,
                }
            )
    return {"version": CASE_FILE_VERSION, "cases": cases}


def persona_names(*, guild: GuildConfig) -> list[str]:
    """The guild's persona names, main first, then alphabetical."""
    return list(guild.personas.order_by("-is_main", "name").values_list("name", flat=True))


def config_changes(*, instance: models.Model, limit: int = 10) -> list[LogEntry]:
    """The latest recorded changes of one configuration row, newest first (with their user)."""
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(type(instance)),
            object_id=str(instance.pk),
        )
        .select_related("user")
        .order_by("-action_time", "-id")[:limit]
    )
