"""Reads of guild configuration."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Prefetch

from personas.config_schema import CONFIG_VERSION
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy


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


def _note(text: str, depth: int) -> dict:
    return {"text": text, "depth": depth}


def _guild(guild: GuildConfig) -> dict:
    return {
        "id": str(guild.guild_id),
        "name": guild.name,
        "timezone": guild.timezone,
        "message_fetch_limit": guild.message_fetch_limit,
        "context_note": _note(guild.context_note, guild.context_note_depth),
        "lorebook": guild.lorebook,
        "personas": [_persona(persona) for persona in guild.personas.all()],
        "channels": [
            {
                "id": str(channel.channel_id),
                "mode": channel.mode,
                "enabled": channel.enabled,
                "message_fetch_limit": channel.message_fetch_limit,
                "context_note": _note(channel.context_note, channel.context_note_depth),
            }
            for channel in guild.channels.all()
        ],
        "blocks": [
            {
                "persona": block.persona.name if block.persona else None,
                "user_id": str(block.user_id),
                "type": block.type,
                "reason": block.reason,
                "expires_at": block.expires_at.isoformat() if block.expires_at else None,
            }
            for block in guild.blocks.all()
        ],
        "users": [
            {"id": str(user.user_id), "privacy": user.level, "blacklisted": user.blacklisted}
            for user in guild.users.all()
        ],
    }


def _persona(persona: Persona) -> dict:
    return {
        "name": persona.name,
        "main": persona.is_main,
        "enabled": persona.enabled,
        "avatar_url": persona.avatar_url or None,
        "system_prompt": persona.system_prompt,
        "triggers": list(persona.triggers),
        "context_note": _note(persona.context_note, persona.context_note_depth),
        "prefill": persona.prefill,
        "deliberate_tool_mode": persona.deliberate_tool_mode,
        "tools_enabled": persona.tools_enabled,
        "short_term_memory": {
            "refresh_every": persona.stm_refresh_every,
            "depth": persona.stm_depth,
        },
        "force_lowercase": persona.force_lowercase,
        "punctuation_splits": persona.punctuation_splits,
        "delivery_mode": persona.delivery_mode,
        "sample_dialogue": list(persona.sample_dialogue),
        "llm": {
            "model": persona.llm_model or None,
            "temperature": persona.temperature,
            "max_output_tokens": persona.max_output_tokens,
            "context_window": persona.context_window,
            "fallback_models": list(persona.fallback_models),
            "api": persona.llm_api,
            "instruct_template": persona.instruct_template,
            "vision": persona.llm_vision,
            "prefill": persona.llm_prefill,
            "merge_same_role": persona.llm_merge_same_role,
            "reasoning_in_think_tags": persona.reasoning_in_think_tags,
            "verbatim_tool_nudge": persona.verbatim_tool_nudge,
        },
        "lorebook": persona.lorebook,
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
