"""Keeping each person's guild rights as Discord says they are, and ending the sessions of a
person who has none left.

Three ways in, one write (`guild_rights_replace` / `guild_rights_observe` both end in
`_apply`):

- at login, from ``users/@me/guilds`` (`accounts.adapter`);
- from the worker's gateway: member updates (roles given or taken), members leaving, kicked or
  banned, role edits and ownership moves (`guild_rights_observe`, called by
  ``chat.gateway.client``), within a second of Discord's event;
- from Celery beat every ``DISCORD_RIGHTS_REFRESH_SECONDS`` (30 s): ``users/@me/guilds`` again
  with the person's stored token, refreshed when it expires (`rights_refresh`), so a right
  lost while no worker runs is lost within 60 s too.

Only configured guilds get rows. A person whose rights are all gone has every session ended:
their unusable password is drawn anew, which Django's session check refuses on the next
request, and their open sockets are told (``rights.changed``) and close.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.discord_api import (
    DiscordOAuthError,
    current_user_guilds,
    guild_roles,
    oauth_session,
    token_refresh,
)
from accounts.models import GuildRight, GuildRole, RightSource
from accounts.roles import guild_role
from accounts.selectors import DISCORD_PROVIDER, discord_people
from botproject.live_updates import RightsChanged, person_group, publish_live_update_on_commit
from personas.models import GuildConfig

if TYPE_CHECKING:
    import requests
    from django.contrib.auth.base_user import AbstractBaseUser

logger = logging.getLogger(__name__)

TOKEN_REFRESH_MARGIN = dt.timedelta(minutes=5)
"""A stored access token this close to its expiry is refreshed before it is used."""


@dataclass(frozen=True)
class RightsChange:
    """What one write changed for one person: guilds gained, lost, or whose role changed;
    ``ended`` when they have no right left and their sessions were ended."""

    user_id: int
    gained: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()
    changed: frozenset[int] = frozenset()
    ended: bool = False

    @property
    def any(self) -> bool:
        return bool(self.gained or self.lost or self.changed)


def guild_rights_replace(
    *,
    user: AbstractBaseUser,
    roles: Mapping[int, tuple[GuildRole, int]],
    source: RightSource,
) -> RightsChange:
    """Make the person's rights exactly ``roles`` (guild id → role and the permission bits it
    came from), less the guilds this deployment has not configured. One transaction; a person
    left with no right has their sessions ended (`person_sessions_end`)."""
    with transaction.atomic():
        # One writer per person at a time (the login, the gateway, the refresh).
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk"))
        configured = set(
            GuildConfig.objects.filter(guild_id__in=list(roles)).values_list("guild_id", flat=True)
        )
        wanted = {g: roles[g] for g in configured}
        current = {
            r.guild_id: r for r in GuildRight.objects.select_for_update().filter(user_id=user.pk)
        }
        change = _diff(user.pk, current, wanted)
        for guild_id in current.keys() | wanted.keys():
            _apply(user.pk, guild_id, current.get(guild_id), wanted.get(guild_id), source)
        return _settled(user, change, had_any=bool(current))


def guild_rights_observe(
    *, guild_id: int, permissions: Mapping[int, int | None]
) -> list[RightsChange]:
    """What the worker's gateway saw of some members of ``guild_id``: Discord user id → their
    guild-level permission bits (the owner's and an administrator's are every bit), None for
    someone no longer a member (left, kicked, banned). Only people who log in to the dashboard
    are looked at, and only in configured guilds. Returns the changes made."""
    people = discord_people()
    seen = {uid: bits for uid, bits in permissions.items() if uid in people}
    if not seen or not GuildConfig.objects.filter(guild_id=guild_id).exists():
        return []
    changes = []
    User = get_user_model()
    for uid, bits in seen.items():
        role = guild_role(bits) if bits is not None else None
        with transaction.atomic():
            user = User.objects.select_for_update().filter(pk=people[uid]).first()
            if user is None:
                continue
            current = {
                r.guild_id: r
                for r in GuildRight.objects.select_for_update().filter(user_id=user.pk)
            }
            wanted = {g: (GuildRole(r.role), r.permissions) for g, r in current.items()}
            if role is None:
                wanted.pop(guild_id, None)
            else:
                wanted[guild_id] = (role, bits or 0)
            change = _diff(user.pk, current, wanted)
            target = wanted.get(guild_id)
            _apply(user.pk, guild_id, current.get(guild_id), target, RightSource.GATEWAY)
            changes.append(_settled(user, change, had_any=bool(current)))
    return [c for c in changes if c.any]


def person_sessions_end(*, user: AbstractBaseUser) -> None:
    """End every session of ``user``: a new unusable password changes the hash each session
    carries, so Django logs the session out on its next request; open sockets are told after
    the commit and close."""
    user.set_unusable_password()
    user.save(update_fields=["password"])
    publish_live_update_on_commit(person_group(user.pk), RightsChanged(guild_ids=[], ended=True))


def rights_refresh(
    *, user: AbstractBaseUser, session: requests.Session | None = None
) -> RightsChange | None:
    """Read the person's guilds again with their stored token (refreshed first when it is about
    to expire, and once more when Discord refuses it) and replace their rights with what
    Discord says. A token Discord no longer honours (revoked, or a refresh token it refuses)
    takes every right and ends the sessions. Returns None, changing nothing, when Discord
    cannot answer now (429, 5xx, no connection): the next refresh tries again."""
    from allauth.socialaccount.models import SocialToken

    token = (
        SocialToken.objects.filter(account__user_id=user.pk, account__provider=DISCORD_PROVIDER)
        .order_by("-id")
        .first()
    )
    if token is None:
        return guild_rights_replace(user=user, roles={}, source=RightSource.REFRESH)
    session = session or oauth_session()
    try:
        if token.expires_at is not None and token.expires_at <= timezone.now() + (
            TOKEN_REFRESH_MARGIN
        ):
            _token_renew(token, session)
        try:
            guilds = current_user_guilds(access_token=token.token, session=session)
        except DiscordOAuthError as error:
            if error.status != 401 or not token.token_secret:
                raise
            _token_renew(token, session)
            guilds = current_user_guilds(access_token=token.token, session=session)
    except DiscordOAuthError as error:
        if not error.revoked:
            logger.info("rights of user %s not refreshed: %s", user.pk, error)
            return None
        logger.info("rights of user %s taken: %s", user.pk, error)
        token.delete()
        return guild_rights_replace(user=user, roles={}, source=RightSource.REFRESH)
    return guild_rights_replace(user=user, roles=guild_roles(guilds), source=RightSource.REFRESH)


def rights_refresh_due(*, now: dt.datetime | None = None) -> list[int]:
    """The people whose rights the refresh reads: those holding a right whose last login is
    recent enough for a session to be alive (``SESSION_COOKIE_AGE``)."""
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=settings.SESSION_COOKIE_AGE)
    return sorted(
        set(
            GuildRight.objects.filter(user__is_active=True, user__last_login__gte=since)
            .values_list("user_id", flat=True)
            .distinct()
        )
    )


def _token_renew(token, session: requests.Session) -> None:
    grant = token_refresh(refresh_token=token.token_secret, session=session)
    token.token, token.token_secret, token.expires_at = (
        grant.access_token,
        grant.refresh_token,
        grant.expires_at,
    )
    token.save(update_fields=["token", "token_secret", "expires_at"])


def _diff(
    user_id: int, current: Mapping[int, GuildRight], wanted: Mapping[int, tuple[GuildRole, int]]
) -> RightsChange:
    return RightsChange(
        user_id=user_id,
        gained=frozenset(wanted.keys() - current.keys()),
        lost=frozenset(current.keys() - wanted.keys()),
        changed=frozenset(
            g for g in wanted.keys() & current.keys() if current[g].role != wanted[g][0]
        ),
    )


def _apply(
    user_id: int,
    guild_id: int,
    row: GuildRight | None,
    target: tuple[GuildRole, int] | None,
    source: RightSource,
) -> None:
    """Make the person's row for ``guild_id`` say ``target`` (None: no row)."""
    if target is None:
        if row is not None:
            row.delete()
        return
    role, permissions = target
    if row is None:
        GuildRight.objects.create(
            user_id=user_id, guild_id=guild_id, role=role, permissions=permissions, source=source
        )
    elif (row.role, row.permissions, row.source) != (role, permissions, source):
        row.role, row.permissions, row.source = role, permissions, source
        row.save(update_fields=["role", "permissions", "source", "updated_at"])


def _settled(user: AbstractBaseUser, change: RightsChange, *, had_any: bool) -> RightsChange:
    """After a write: with no right left (and some before), end the sessions; tell the person's
    sockets of any change."""
    left = GuildRight.objects.filter(user_id=user.pk).exists()
    if had_any and not left:
        person_sessions_end(user=user)
        return RightsChange(change.user_id, change.gained, change.lost, change.changed, True)
    if change.any:
        touched = sorted(change.lost | change.changed | change.gained)
        publish_live_update_on_commit(
            person_group(user.pk), RightsChanged(guild_ids=[str(g) for g in touched])
        )
    return change
