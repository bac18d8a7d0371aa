"""A user's privacy row in a guild, for tests (the guild is created when not configured)."""

from __future__ import annotations

from typing import Any

from personas.models import GuildConfig, UserPrivacy


def user_privacy(user_id: int, *, guild_id: int, **values: Any) -> UserPrivacy:
    guild, _ = GuildConfig.objects.get_or_create(guild_id=guild_id, defaults={"name": "guild"})
    return UserPrivacy.objects.create(guild=guild, user_id=user_id, **values)
