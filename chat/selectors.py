"""Reads that turn the admin's configuration into the pipeline's and the loop's inputs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from chat.loop.triggers import TriggerPersona
from chat.models import ChannelWindowAnchor, ShortTermMemory
from chat.pipeline.types import (
    BlockType,
    ContextNote,
    ModelSettings,
    PersonaSpec,
    Role,
    SampleMessage,
    UserBlock,
)
from personas.models import Block, ChannelConfig, ChannelMode, GuildConfig, Persona, UserPrivacy


@dataclass(frozen=True)
class ChannelSettings:
    """What the loop needs to know about one channel; ``guild`` is None for a DM."""

    channel_id: int
    guild: GuildConfig | None
    mode: ChannelMode
    enabled: bool
    fetch_limit: int
    timezone: str
    channel_note: ContextNote | None
    global_note: ContextNote | None


def channel_settings(*, channel_id: int, guild_id: int | None) -> ChannelSettings | None:
    """The channel's settings; None when the bot does not serve that guild.

    A channel of a configured guild without its own row is reactive, enabled, and uses the
    guild's fetch limit. DMs (``guild_id`` None) are reactive with the default limit.
    """
    if guild_id is None:
        return ChannelSettings(channel_id, None, ChannelMode.REACTIVE, True, 80, "UTC", None, None)
    guild = GuildConfig.objects.filter(guild_id=guild_id).first()
    if guild is None:
        return None
    channel = ChannelConfig.objects.filter(channel_id=channel_id, guild=guild).first()
    return ChannelSettings(
        channel_id=channel_id,
        guild=guild,
        mode=ChannelMode(channel.mode) if channel else ChannelMode.REACTIVE,
        enabled=channel.enabled if channel else True,
        fetch_limit=channel.effective_fetch_limit if channel else guild.message_fetch_limit,
        timezone=guild.timezone,
        channel_note=_note(channel.context_note, channel.context_note_depth) if channel else None,
        global_note=_note(guild.context_note, guild.context_note_depth),
    )


def guild_personas(*, guild: GuildConfig | None) -> list[Persona]:
    """The guild's enabled personas, main first. In a DM (``guild`` None) the bot account speaks
    for itself, so the answer is the first configured main persona, alone."""
    if guild is None:
        main = Persona.objects.filter(is_main=True, enabled=True).order_by("id").first()
        return [main] if main else []
    return list(Persona.objects.filter(guild=guild, enabled=True).order_by("-is_main", "name"))


def persona_spec(persona: Persona) -> PersonaSpec:
    """The pipeline's frozen view of a configured persona."""
    return PersonaSpec(
        name=persona.name,
        system_prompt=persona.system_prompt,
        triggers=tuple(persona.triggers),
        sample_dialogue=tuple(
            SampleMessage(role=Role(line["role"]), content=line["content"])
            for line in persona.sample_dialogue
        ),
        prefill=persona.prefill,
        context_note=_note(persona.context_note, persona.context_note_depth),
        force_lowercase=persona.force_lowercase,
        punctuation_splits=persona.punctuation_splits,
        deliberate_tool_mode=persona.deliberate_tool_mode,
        model=ModelSettings(
            context_window=persona.context_window, max_output_tokens=persona.max_output_tokens
        ),
    )


def trigger_persona(persona: Persona) -> TriggerPersona:
    return TriggerPersona(
        name=persona.name,
        is_main=persona.is_main,
        triggers=tuple(persona.triggers),
        enabled=persona.enabled,
    )


def active_blocks(*, guild: GuildConfig | None, now: dt.datetime) -> list[UserBlock]:
    """Unexpired blocks and mutes, a guild-wide one expanded to every persona of the guild."""
    if guild is None:
        return []
    names = list(Persona.objects.filter(guild=guild).values_list("name", flat=True))
    blocks = Block.objects.filter(guild=guild).select_related("persona")
    blocks = blocks.exclude(expires_at__lte=now)
    return [
        UserBlock(
            persona_name=name,
            user_id=block.user_id,
            type=BlockType(block.type),
            expires_at=block.expires_at,
        )
        for block in blocks
        for name in ([block.persona.name] if block.persona else names)
    ]


@dataclass(frozen=True)
class UserStanding:
    full_privacy: frozenset[int]
    blacklisted: frozenset[int]


def user_standing(*, user_ids: Iterable[int]) -> UserStanding:
    """Which of ``user_ids`` chose full privacy, and which are blacklisted."""
    rows = UserPrivacy.objects.filter(user_id__in=set(user_ids))
    return UserStanding(
        full_privacy=frozenset(r.user_id for r in rows if r.level == "full"),
        blacklisted=frozenset(r.user_id for r in rows if r.blacklisted),
    )


def short_term_memory(*, persona: Persona, channel_id: int) -> ShortTermMemory | None:
    return ShortTermMemory.objects.filter(
        persona=persona, channel_id=channel_id, user_id__isnull=True
    ).first()


def window_anchor(*, channel_id: int) -> ChannelWindowAnchor | None:
    return ChannelWindowAnchor.objects.filter(channel_id=channel_id).first()


def _note(text: str, depth: int) -> ContextNote | None:
    return ContextNote(text=text, depth=depth) if text.strip() else None
