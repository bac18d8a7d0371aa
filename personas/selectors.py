"""Reads of guild configuration."""

from __future__ import annotations

from collections.abc import Iterable

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
from personas.models import (
    Block,
    ChannelConfig,
    ConfigChange,
    GuildConfig,
    ModelPrice,
    Persona,
    UserPrivacy,
)
from personas.models_cases import PersonaTestCase

AUDITED_TYPES: dict[type[models.Model], str] = {
    GuildConfig: "guild",
    Persona: "persona",
    ChannelConfig: "channel",
    Block: "block",
    UserPrivacy: "user",
    PersonaTestCase: "test case",
}
"""The name of each configured row's type in the audit trail."""


def config_export(*, guild_ids: Iterable[int] | None = None, prices: bool = True) -> dict:
    """The configuration of the given guilds (all when ``None``) as a version-1 document, with
    the operator's price table first when ``prices`` is set and it has rows.

    The result is what ``config_import`` accepts: importing it back changes nothing. Snowflakes
    are strings; rows are ordered (prices by model; personas main first, then by name;
    channels, blocks and users by id) so the same database always exports the same bytes.
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
    document: dict = {"version": CONFIG_VERSION}
    table = (
        [price_row(price=price) for price in ModelPrice.objects.order_by("model")] if prices else []
    )
    if table:
        document["prices"] = table
    document["guilds"] = [_guild(guild) for guild in guilds]
    return document


def price_row(*, price: ModelPrice) -> dict:
    """A price table row as the configuration file writes it (prices as JSON numbers: six
    decimal places at most, so each reads back as the same decimal)."""
    per_million = {"input": float(price.input)}
    if price.cached_input is not None:
        per_million["cached_input"] = float(price.cached_input)
    per_million["output"] = float(price.output)
    return {"model": price.model, "usd_per_million": per_million}


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


def config_changes(*, instance: models.Model, limit: int = 10) -> list[ConfigChange]:
    """The latest recorded changes of one configuration row, newest first (the audit trail's
    rows for it, with their author's account)."""
    object_type = AUDITED_TYPES[type(instance)]
    return list(
        ConfigChange.objects.filter(object_type=object_type, object_pk=str(instance.pk))
        .select_related("actor")
        .order_by("-created_at", "-id")[:limit]
    )


def guild_audit(
    *, guild_id: int, person: str = "", kind: str = ""
) -> models.QuerySet[ConfigChange]:
    """The guild's audit trail, newest first; ``person`` (an ``actor_key``) and ``kind`` (a
    `ChangeKind` value) narrow it when set."""
    changes = ConfigChange.objects.filter(guild_id=guild_id).select_related("actor")
    if person:
        changes = changes.filter(actor_key=person)
    if kind:
        changes = changes.filter(kind=kind)
    return changes.order_by("-created_at", "-id")


def guild_audit_people(*, guild_id: int) -> list[tuple[str, str, int | None]]:
    """Everyone in the guild's audit trail, for its filter: (key, name, Discord id), by
    name."""
    rows = (
        ConfigChange.objects.filter(guild_id=guild_id)
        .values_list("actor_key", "actor_name", "actor_discord_id")
        .order_by("actor_key", "-id")
    )
    people: dict[str, tuple[str, str, int | None]] = {}
    for key, name, discord_id in rows:
        people.setdefault(key, (key, name, discord_id))
    return sorted(people.values(), key=lambda person: person[1].casefold())
