"""Discord v10 JSON shapes for the sandbox's records: what REST returns and gateway events carry.

Pure functions of the records in `chat.sandbox.records`; ids are rendered as strings, times as
ISO 8601. Only fields discord.py reads (or that a Discord client would reasonably expect) are
filled; everything optional that the sandbox does not model is left out or empty.
"""

from __future__ import annotations

from typing import Any

from chat.pipeline.snowflakes import snowflake_time
from chat.sandbox.records import (
    Attachment,
    Channel,
    Guild,
    GuildRole,
    GuildSticker,
    Member,
    PermissionOverwrite,
    User,
    Webhook,
)
from chat.sandbox.snowflake import iso_timestamp

GUILD_TEXT = 0
DM = 1
GUILD_CATEGORY = 4
GUILD_FORUM = 15
PUBLIC_THREAD = 11
"""Discord's channel types: text, DM, category, forum, public thread."""


def user_payload(user: User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "username": user.username,
        "global_name": user.global_name,
        "discriminator": user.discriminator,
        "avatar": None,
        "bot": user.bot,
        "public_flags": 0,
        "flags": 0,
    }


def member_payload(member: Member, *, user: User | None) -> dict[str, Any]:
    """A guild member; with `user=None` the partial form gateway messages carry."""
    payload: dict[str, Any] = {
        "nick": member.nick,
        "avatar": None,
        "roles": [str(role_id) for role_id in member.role_ids],
        "joined_at": iso_timestamp(member.joined_at),
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "flags": 0,
        "communication_disabled_until": (
            iso_timestamp(member.communication_disabled_until)
            if member.communication_disabled_until is not None
            else None
        ),
    }
    if user is not None:
        payload["user"] = user_payload(user)
    return payload


def role_payload(role: GuildRole) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": str(role.id),
        "name": role.name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": role.position,
        "permissions": str(role.permissions),
        "managed": role.bot_id is not None,
        "mentionable": False,
        "flags": 0,
    }
    if role.bot_id is not None:
        payload["tags"] = {"bot_id": str(role.bot_id)}
    return payload


def dm_channel_payload(channel: Channel, recipient: User) -> dict[str, Any]:
    """A DM channel (type 1) with its one recipient."""
    return {
        "id": str(channel.id),
        "type": DM,
        "last_message_id": str(channel.last_message_id) if channel.last_message_id else None,
        "recipients": [user_payload(recipient)],
        "flags": 0,
    }


def channel_payload(channel: Channel) -> dict[str, Any]:
    if channel.parent_id is not None:
        return thread_payload(channel)
    overwrites = [overwrite_payload(o) for o in channel.overwrites.values()]
    if channel.is_category:
        return {
            "id": str(channel.id),
            "type": GUILD_CATEGORY,
            "guild_id": str(channel.guild_id),
            "name": channel.name,
            "position": channel.position,
            "parent_id": None,
            "nsfw": False,
            "permission_overwrites": overwrites,
            "flags": 0,
        }
    return {
        "id": str(channel.id),
        "type": GUILD_FORUM if channel.is_forum else GUILD_TEXT,
        "guild_id": str(channel.guild_id),
        "name": channel.name,
        "position": channel.position,
        "parent_id": str(channel.category_id) if channel.category_id is not None else None,
        "topic": channel.topic,
        "nsfw": channel.nsfw,
        "rate_limit_per_user": 0,
        "last_message_id": str(channel.last_message_id) if channel.last_message_id else None,
        "permission_overwrites": overwrites,
    }


def overwrite_payload(overwrite: PermissionOverwrite) -> dict[str, Any]:
    """A permission overwrite: ``type`` 0 for a role, 1 for a member; bits as strings."""
    return {
        "id": str(overwrite.id),
        "type": overwrite.type,
        "allow": str(overwrite.allow),
        "deny": str(overwrite.deny),
    }


def thread_payload(thread: Channel) -> dict[str, Any]:
    """A public thread started from a message (its id is the starter message's id)."""
    created = iso_timestamp(snowflake_time(thread.id))
    return {
        "id": str(thread.id),
        "type": PUBLIC_THREAD,
        "guild_id": str(thread.guild_id),
        "parent_id": str(thread.parent_id),
        "owner_id": str(thread.owner_id),
        "name": thread.name,
        "last_message_id": str(thread.last_message_id) if thread.last_message_id else None,
        "rate_limit_per_user": 0,
        "message_count": len(thread.messages),
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": created,
            "locked": False,
            "create_timestamp": created,
        },
    }


def guild_payload(guild: Guild) -> dict[str, Any]:
    """The guild object of `GET /guilds/{id}` (no channels or members; counts included)."""
    return {
        "id": str(guild.id),
        "name": guild.name,
        "icon": None,
        "splash": None,
        "discovery_splash": None,
        "banner": None,
        "description": None,
        "owner_id": str(guild.owner_id),
        "afk_channel_id": None,
        "afk_timeout": 300,
        "system_channel_id": str(next(iter(guild.channels))) if guild.channels else None,
        "system_channel_flags": 0,
        "rules_channel_id": None,
        "public_updates_channel_id": None,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "preferred_locale": "en-US",
        "features": [],
        "roles": [role_payload(role) for role in guild.roles.values()],
        "emojis": [],
        "stickers": [sticker_payload(sticker, guild.id) for sticker in guild.stickers.values()],
        "approximate_member_count": len(guild.members),
        "approximate_presence_count": 0,
    }


def sticker_payload(sticker: GuildSticker, guild_id: int) -> dict[str, Any]:
    """A guild sticker object (type 2, PNG format)."""
    return {
        "id": str(sticker.id),
        "name": sticker.name,
        "description": None,
        "tags": sticker.tags,
        "type": 2,
        "format_type": 1,
        "available": True,
        "guild_id": str(guild_id),
    }


def guild_create_payload(guild: Guild, *, members: list[dict[str, Any]]) -> dict[str, Any]:
    """GUILD_CREATE's data: the guild with its channels and the given member list.

    Discord sends a small member list here (the bot itself, without the presences intent) and
    the rest through member chunking; `members` is whatever the gateway chose to include.
    """
    payload = guild_payload(guild)
    del payload["approximate_member_count"], payload["approximate_presence_count"]
    payload.update(
        joined_at=iso_timestamp(snowflake_time(guild.id)),
        large=False,
        unavailable=False,
        member_count=len(guild.members),
        channels=[channel_payload(channel) for channel in guild.channels.values()],
        members=members,
        presences=[],
        voice_states=[],
        threads=[thread_payload(thread) for thread in guild.threads.values()],
        stage_instances=[],
        guild_scheduled_events=[],
        soundboard_sounds=[],
    )
    return payload


def attachment_payload(attachment: Attachment, *, url: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": str(attachment.id),
        "filename": attachment.filename,
        "size": len(attachment.data),
        "url": url,
        "proxy_url": url,
        "flags": 0,
    }
    if attachment.content_type is not None:
        payload["content_type"] = attachment.content_type
    if attachment.description is not None:
        payload["description"] = attachment.description
    return payload


def webhook_payload(webhook: Webhook, *, creator: User, application_id: int) -> dict[str, Any]:
    return {
        "id": str(webhook.id),
        "type": 1,
        "guild_id": str(webhook.guild_id),
        "channel_id": str(webhook.channel_id),
        "user": user_payload(creator),
        "name": webhook.name,
        "avatar": webhook.avatar,
        "token": webhook.token,
        "application_id": str(application_id),
    }
