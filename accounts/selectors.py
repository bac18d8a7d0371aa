"""The one place that decides what a person may see and change, in which guild.

`guild_rights` reads a person's rights once per request; every dashboard view, consumer and
download asks the `GuildRights` it returns, and every queryset of a guild's data is narrowed by
it (`GuildRights.scope`), so a check a view forgot shows nothing rather than everything.

- **operators** (active staff users): every guild, and change it; the operator-only screens;
- members of the ``moderators`` group: moderators of every guild (see, change nothing);
- people who logged in with Discord: their `GuildRight` rows, one role per guild;
- anyone else: no guild at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Model, Q, QuerySet

from accounts.models import GuildRight, GuildRole

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

MODERATORS_GROUP = "moderators"
DISCORD_PROVIDER = "discord"

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class GuildRights:
    """A person's rights. ``roles`` maps guild ids to their role there (Discord's rights);
    ``operator`` and ``moderator_everywhere`` hold in every guild, configured or not."""

    operator: bool = False
    moderator_everywhere: bool = False
    roles: Mapping[int, GuildRole] = field(default_factory=dict)

    @property
    def unrestricted(self) -> bool:
        """Every guild is visible (an operator, or a moderator of every guild)."""
        return self.operator or self.moderator_everywhere

    @property
    def any(self) -> bool:
        """The person may see at least one guild (else every dashboard page answers 403)."""
        return self.unrestricted or bool(self.roles)

    @property
    def changes_any(self) -> bool:
        """The person may change the configuration of at least one guild."""
        return self.operator or GuildRole.ADMIN in self.roles.values()

    @property
    def guild_ids(self) -> frozenset[int] | None:
        """The guilds the person may see; None when that is every guild."""
        return None if self.unrestricted else frozenset(self.roles)

    def role(self, guild_id: int | None) -> GuildRole | None:
        """The person's role in ``guild_id`` (None: the guild does not exist for them)."""
        if self.operator:
            return GuildRole.ADMIN
        if self.moderator_everywhere:
            return GuildRole.MODERATOR
        return self.roles.get(guild_id) if guild_id is not None else None

    def may_view(self, guild_id: int | None) -> bool:
        return self.role(guild_id) is not None

    def may_change(self, guild_id: int | None) -> bool:
        return self.role(guild_id) == GuildRole.ADMIN

    def changeable(self, guild_ids: Iterable[int]) -> list[int]:
        """Those of ``guild_ids`` the person may not change, in order (empty: all may be)."""
        return [guild_id for guild_id in guild_ids if not self.may_change(guild_id)]

    def scope(self, queryset: QuerySet[M], field: str = "guild_id") -> QuerySet[M]:
        """``queryset`` narrowed to the rows whose ``field`` is a guild the person may see."""
        if self.unrestricted:
            return queryset
        return queryset.filter(**{f"{field}__in": sorted(self.roles)})

    def q(self, field: str = "guild_id") -> Q:
        """The same narrowing as a ``Q`` (an empty ``Q`` when every guild is visible)."""
        return Q() if self.unrestricted else Q(**{f"{field}__in": sorted(self.roles)})


NO_RIGHTS = GuildRights()


EVERYWHERE = "everywhere"


def guild_rights(*, user: AbstractBaseUser | AnonymousUser | None) -> GuildRights:
    """The rights of ``user`` now: one indexed read (the person's `GuildRight` rows and their
    membership of the ``moderators`` group, together), none for staff. Anonymous and inactive
    users have none. This runs on every dashboard request, so it is one hand-written statement
    (one round trip) rather than two ORM queries."""
    if user is None or not user.is_authenticated or not user.is_active:
        return NO_RIGHTS
    if user.is_staff:
        return GuildRights(operator=True)
    memberships = User.groups.through._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT guild_id, role FROM {GuildRight._meta.db_table} WHERE user_id = %s "
            f"UNION ALL SELECT NULL, %s FROM {memberships} AS m "
            f"JOIN {Group._meta.db_table} AS g ON g.id = m.group_id "
            "WHERE m.user_id = %s AND g.name = %s",
            [user.pk, EVERYWHERE, user.pk, MODERATORS_GROUP],
        )
        rows = cursor.fetchall()
    if any(role == EVERYWHERE for _, role in rows):
        return GuildRights(moderator_everywhere=True)
    return GuildRights(roles={guild_id: GuildRole(role) for guild_id, role in rows})


def discord_user_id(*, user: AbstractBaseUser | AnonymousUser | None) -> int | None:
    """The Discord user id of a person who logged in with Discord (None for anyone else)."""
    if user is None or not user.is_authenticated:
        return None
    from allauth.socialaccount.models import SocialAccount

    uid = (
        SocialAccount.objects.filter(user_id=user.pk, provider=DISCORD_PROVIDER)
        .values_list("uid", flat=True)
        .first()
    )
    return int(uid) if uid and uid.isdigit() else None


def discord_people() -> dict[int, int]:
    """Every person who has logged in with Discord: their Discord user id → their user id."""
    from allauth.socialaccount.models import SocialAccount

    rows = SocialAccount.objects.filter(provider=DISCORD_PROVIDER).values_list("uid", "user_id")
    return {int(uid): user_id for uid, user_id in rows if uid.isdigit()}
