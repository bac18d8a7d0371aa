"""Reads of guild configuration."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
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
from personas.models import Block, ChannelConfig, GuildConfig, ModelPrice, Persona, UserPrivacy


def config_export(*, guild_ids: Iterable[int] | None = None, prices: bool = True) -> dict:
    """The configuration of the given guilds (all when ``None``) as a version-1 document, with
    the operator's price table first when ``prices`` is set and it has rows.

    The result is what ``config_import`` accepts: importing it back changes nothing. Snowflakes
    are strings; rows are ordered (prices by model; personas main first, then by name;
    channels, blocks and users by id) so the same database always exports the same bytes.
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
    document: dict = {"version": CONFIG_VERSION}
    table = [price_row(price) for price in ModelPrice.objects.order_by("model")] if prices else []
    if table:
        document["prices"] = table
    document["guilds"] = [_guild(guild) for guild in guilds]
    return document


def price_row(price: ModelPrice) -> dict:
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
        "personas": [row_from_instance(PERSONA_SETTINGS, p) for p in guild.personas.all()],
        "channels": [row_from_instance(CHANNEL_SETTINGS, c) for c in guild.channels.all()],
        "blocks": [row_from_instance(BLOCK_SETTINGS, b) for b in guild.blocks.all()],
        "users": [row_from_instance(USER_SETTINGS, u) for u in guild.users.all()],
    }


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
