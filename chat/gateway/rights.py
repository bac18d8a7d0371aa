"""The worker's gateway view of members and roles, recorded for the dashboard's rights.

Discord tells the worker at once when a member's roles change (GUILD_MEMBER_UPDATE), a member
leaves, is kicked or banned (GUILD_MEMBER_REMOVE), a role's permissions change
(GUILD_ROLE_UPDATE / DELETE) or the guild changes owner (GUILD_UPDATE). For the people who log
in to the dashboard, the client computes their guild-level permissions from its member cache
(discord.py's ``Member.guild_permissions``: roles, the owner, administrator) and hands them to
`accounts.services.guild_rights_observe`, which keeps their rights. A failure is logged and
never stops the gateway: Celery's refresh (``users/@me/guilds``) catches up within 60 s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import discord
from asgiref.sync import sync_to_async

from accounts.selectors import discord_people
from accounts.services import guild_rights_observe

logger = logging.getLogger(__name__)


def member_permissions(member: discord.Member | None) -> int | None:
    """The member's guild-level permission bits; None for someone who is not a member."""
    return member.guild_permissions.value if member is not None else None


async def rights_observe(guild_id: int, permissions: dict[int, int | None]) -> None:
    """Record what the gateway saw of these members (Discord id → bits, None: not a member)."""
    try:
        await sync_to_async(guild_rights_observe)(guild_id=guild_id, permissions=permissions)
    except Exception:
        logger.warning(
            "could not record the rights of %d member(s)", len(permissions), exc_info=True
        )


PEOPLE_KEPT_SECONDS = 10.0
"""How long the worker keeps the list of the dashboard's people between guilds becoming
available (a worker starting up makes every guild available at once; someone who logs in
meanwhile has their rights read at login). A role or owner change reads it afresh."""


class _People:
    """The dashboard's people (Discord id → user id), read at most every
    `PEOPLE_KEPT_SECONDS`."""

    def __init__(self) -> None:
        self._read_at = -PEOPLE_KEPT_SECONDS
        self._people: dict[int, int] = {}

    async def get(self, *, fresh: bool = False) -> dict[int, int]:
        """The people, read again when ``fresh`` or when the kept list is too old."""
        now = time.monotonic()
        if fresh or now - self._read_at >= PEOPLE_KEPT_SECONDS:
            self._people = await sync_to_async(discord_people)()
            self._read_at = now
        return self._people


_people = _People()


async def rights_observe_people(
    guild: discord.Guild, *, only: Iterable[int] | None = None, fresh: bool = True
) -> None:
    """Record the permissions of every dashboard person in ``guild`` (of ``only`` of them):
    after a role or the owner changed, or when the guild became available (catching up on
    what happened while the worker was away; ``fresh`` False: the list of people may be up to
    `PEOPLE_KEPT_SECONDS` old). Someone the member cache does not hold is no member once the
    guild is chunked; before that, they are left as they are."""
    try:
        people = await _people.get(fresh=fresh)
    except Exception:
        logger.warning("could not read the dashboard's people", exc_info=True)
        return
    wanted = set(people) if only is None else set(people) & set(only)
    seen: dict[int, int | None] = {}
    for user_id in wanted:
        member = guild.get_member(user_id)
        if member is not None or guild.chunked:
            seen[user_id] = member_permissions(member)
    if seen:
        await rights_observe(guild.id, seen)
