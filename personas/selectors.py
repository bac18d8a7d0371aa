"""Reads of guild configuration."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.db.models import Prefetch

from personas.config_fields import (
    BLOCK_SETTINGS,
    CHANNEL_SETTINGS,
    GUILD_SETTINGS,
    PERSONA_SETTINGS,
    USER_SETTINGS,
    row_from_instance,
)
from personas.config_schema import CONFIG_VERSION
from personas.models import Block, ChannelConfig, ConfigChange, GuildConfig, Persona, UserPrivacy

AUDITED_TYPES: dict[type[models.Model], str] = {
    GuildConfig: "guild",
    Persona: "persona",
    ChannelConfig: "channel",
    Block: "block",
    UserPrivacy: "user",
}
"""The name of each configured row's type in the audit trail."""


def config_export(*, guild_ids: Iterable[int] | None = None) -> dict:
    """The configuration of the given guilds (all when ``None``) as a version-1 document.

    The result is what ``config_import`` accepts: importing it back changes nothing. Snowflakes
    are strings; rows are ordered (personas main first, then by name; channels, blocks and users
    by id) so the same database always exports the same bytes.
    """
    guilds = GuildConfig.objects.order_by("guild_id").prefetch_related(
        Prefetch("personas", queryset=Persona.objects.order_by("-is_main", "name")),
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
        "personas": [row_from_instance(PERSONA_SETTINGS, p) for p in guild.personas.all()],
        "channels": [row_from_instance(CHANNEL_SETTINGS, c) for c in guild.channels.all()],
        "blocks": [row_from_instance(BLOCK_SETTINGS, b) for b in guild.blocks.all()],
        "users": [row_from_instance(USER_SETTINGS, u) for u in guild.users.all()],
    }


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
