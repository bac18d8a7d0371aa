"""How a guild role follows from Discord's permission bits (DESIGN §3b, "Rights come from
Discord, per guild"): Administrator or Manage Server → admin; Manage Messages → moderator;
neither → no role (the guild does not exist for the person). The guild's owner holds every
permission, as Discord computes it."""

from __future__ import annotations

from accounts.models import GuildRole

ADMINISTRATOR = 1 << 3
MANAGE_GUILD = 1 << 5
MANAGE_MESSAGES = 1 << 13


def guild_role(permissions: int, *, owner: bool = False) -> GuildRole | None:
    """The role ``permissions`` (a member's guild-level bits, Discord's integer) give; None
    when they give none."""
    if owner or permissions & (ADMINISTRATOR | MANAGE_GUILD):
        return GuildRole.ADMIN
    if permissions & MANAGE_MESSAGES:
        return GuildRole.MODERATOR
    return None
