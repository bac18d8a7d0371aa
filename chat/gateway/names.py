"""Gateway objects to `NameRecord`s: the names the dashboard shows, taken from what discord.py
holds after GUILD_CREATE (the guild, its channels, threads and the members it has chunked),
and from guild, channel, thread and member updates."""

from __future__ import annotations

from collections.abc import Iterable

import discord

from chat.models import DiscordName
from chat.services.discord_names import NameRecord


def guild_names(guild: discord.Guild) -> list[NameRecord]:
    """The guild, every channel and active thread it has, and every member discord.py holds."""
    return [
        guild_name(guild),
        *channel_names(guild.channels),
        *channel_names(guild.threads),
        *member_names(guild.members),
    ]


def guild_name(guild: discord.Guild) -> NameRecord:
    return NameRecord(DiscordName.Kind.GUILD, guild.id, guild.name)


def channel_names(
    channels: Iterable[discord.abc.GuildChannel | discord.Thread],
) -> list[NameRecord]:
    """Channels and threads (categories are not places anyone speaks in: left out)."""
    found = []
    for channel in channels:
        if isinstance(channel, discord.CategoryChannel):
            continue
        if isinstance(channel, discord.Thread):
            found.append(
                NameRecord(
                    DiscordName.Kind.THREAD,
                    channel.id,
                    channel.name,
                    guild_id=channel.guild.id,
                    parent_id=channel.parent_id,
                )
            )
        else:
            found.append(
                NameRecord(
                    DiscordName.Kind.CHANNEL, channel.id, channel.name, guild_id=channel.guild.id
                )
            )
    return found


def member_names(members: Iterable[discord.Member]) -> list[NameRecord]:
    """Each member as the guild shows them (nick, else global name, else user name), with
    their own avatar when they set one (Discord's default avatars are left out)."""
    found = []
    for member in members:
        avatar = member.guild_avatar or member.avatar
        found.append(
            NameRecord(
                DiscordName.Kind.USER,
                member.id,
                member.display_name,
                guild_id=member.guild.id,
                avatar_url=avatar.url if avatar is not None else "",
            )
        )
    return found
