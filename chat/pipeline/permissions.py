"""What a member may do in a guild channel, computed as Discord documents it, and why not.

Discord's algorithm (developer docs, "Permissions": "Permission Hierarchy", "Permission
Overwrites", "Implicit Permissions"; "Guild Member": timeouts):

1. **Base permissions** (`base_permissions`): the guild's owner has every permission. Anyone
   else starts from the ``@everyone`` role's permissions (the role whose id is the guild's)
   and ORs in every role they hold; holding Administrator then means every permission.
2. **Overwrites** (`channel_permissions`), in this order, on the channel's own overwrite list
   (a channel synced with its category carries a copy of the category's overwrites: that list
   is the one that counts, so category overwrites reach a channel through it):
   the ``@everyone`` overwrite (deny, then allow); then all the member's roles' overwrites
   together (every deny, then every allow: an allow on one role beats a deny on another);
   then the overwrite for the member themselves (deny, then allow). Administrator (and the
   owner) bypass overwrites entirely.
3. **Implicit rules**: without View Channel every other permission in the channel is denied;
   without Send Messages, Attach Files, Embed Links, Mention Everyone and Send TTS Messages
   are denied too. A thread has its parent channel's permissions.
4. **Timeouts**: a member timed out keeps only View Channel and Read Message History (the
   owner and administrators are never timed out).

`channel_permissions` returns the bits; `missing_permissions` says, for each wanted permission
the member lacks, which step took it (`Lack`), so a message can name the cause and the fix.
Pure: no Discord objects, no clock (the caller says whether the member is timed out now).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntFlag, StrEnum


class Permission(IntFlag):
    """Discord's permission bits this product names (the rest keep their bit, unnamed)."""

    CREATE_INSTANT_INVITE = 1 << 0
    KICK_MEMBERS = 1 << 1
    BAN_MEMBERS = 1 << 2
    ADMINISTRATOR = 1 << 3
    MANAGE_CHANNELS = 1 << 4
    MANAGE_GUILD = 1 << 5
    ADD_REACTIONS = 1 << 6
    VIEW_AUDIT_LOG = 1 << 7
    VIEW_CHANNEL = 1 << 10
    SEND_MESSAGES = 1 << 11
    SEND_TTS_MESSAGES = 1 << 12
    MANAGE_MESSAGES = 1 << 13
    EMBED_LINKS = 1 << 14
    ATTACH_FILES = 1 << 15
    READ_MESSAGE_HISTORY = 1 << 16
    MENTION_EVERYONE = 1 << 17
    USE_EXTERNAL_EMOJIS = 1 << 18
    CHANGE_NICKNAME = 1 << 26
    MANAGE_NICKNAMES = 1 << 27
    MANAGE_ROLES = 1 << 28
    MANAGE_WEBHOOKS = 1 << 29
    USE_APPLICATION_COMMANDS = 1 << 31
    MANAGE_THREADS = 1 << 34
    CREATE_PUBLIC_THREADS = 1 << 35
    USE_EXTERNAL_STICKERS = 1 << 37
    SEND_MESSAGES_IN_THREADS = 1 << 38
    MODERATE_MEMBERS = 1 << 40


ALL_PERMISSIONS = (1 << 53) - 1
"""Every permission bit Discord defines now or may add soon: what the owner and administrators
hold."""

PERMISSION_NAMES: Mapping[Permission, str] = {
    Permission.CREATE_INSTANT_INVITE: "Create Invite",
    Permission.KICK_MEMBERS: "Kick Members",
    Permission.BAN_MEMBERS: "Ban Members",
    Permission.ADMINISTRATOR: "Administrator",
    Permission.MANAGE_CHANNELS: "Manage Channels",
    Permission.MANAGE_GUILD: "Manage Server",
    Permission.ADD_REACTIONS: "Add Reactions",
    Permission.VIEW_AUDIT_LOG: "View Audit Log",
    Permission.VIEW_CHANNEL: "View Channel",
    Permission.SEND_MESSAGES: "Send Messages",
    Permission.SEND_TTS_MESSAGES: "Send Text-to-Speech Messages",
    Permission.MANAGE_MESSAGES: "Manage Messages",
    Permission.EMBED_LINKS: "Embed Links",
    Permission.ATTACH_FILES: "Attach Files",
    Permission.READ_MESSAGE_HISTORY: "Read Message History",
    Permission.MENTION_EVERYONE: "Mention @everyone, @here and All Roles",
    Permission.USE_EXTERNAL_EMOJIS: "Use External Emojis",
    Permission.CHANGE_NICKNAME: "Change Nickname",
    Permission.MANAGE_NICKNAMES: "Manage Nicknames",
    Permission.MANAGE_ROLES: "Manage Roles",
    Permission.MANAGE_WEBHOOKS: "Manage Webhooks",
    Permission.USE_APPLICATION_COMMANDS: "Use Application Commands",
    Permission.MANAGE_THREADS: "Manage Threads",
    Permission.CREATE_PUBLIC_THREADS: "Create Public Threads",
    Permission.USE_EXTERNAL_STICKERS: "Use External Stickers",
    Permission.SEND_MESSAGES_IN_THREADS: "Send Messages in Threads",
    Permission.MODERATE_MEMBERS: "Timeout Members",
}
"""Each permission as Discord's settings screens name it."""

NEEDS_SEND_MESSAGES = (
    Permission.ATTACH_FILES
    | Permission.EMBED_LINKS
    | Permission.MENTION_EVERYONE
    | Permission.SEND_TTS_MESSAGES
)
"""Denied implicitly without Send Messages."""
KEPT_WHILE_TIMED_OUT = Permission.VIEW_CHANNEL | Permission.READ_MESSAGE_HISTORY


def permission_name(permission: Permission) -> str:
    """The name Discord's screens give ``permission`` (one bit)."""
    return PERMISSION_NAMES.get(permission, f"permission bit {permission.value.bit_length() - 1}")


class OverwriteKind(StrEnum):
    ROLE = "role"
    MEMBER = "member"


@dataclass(frozen=True)
class Overwrite:
    """One entry of a channel's ``permission_overwrites``: for a role (the ``@everyone``
    role's id is the guild's) or a member, the bits it allows and denies."""

    target_id: int
    kind: OverwriteKind
    allow: int = 0
    deny: int = 0


@dataclass(frozen=True)
class Role:
    id: int
    name: str
    permissions: int


@dataclass(frozen=True)
class GuildRoles:
    """A guild's owner and roles (by id; the ``@everyone`` role has the guild's id)."""

    guild_id: int
    owner_id: int
    roles: Mapping[int, Role] = field(default_factory=dict)

    @property
    def everyone(self) -> Role:
        return self.roles.get(self.guild_id) or Role(self.guild_id, "@everyone", 0)

    def role_name(self, role_id: int) -> str:
        role = self.roles.get(role_id)
        return role.name if role is not None else f"role {role_id}"


@dataclass(frozen=True)
class Member:
    """A guild member as far as permissions go: their roles, and whether they are timed out
    now (the caller compares ``communication_disabled_until`` with its clock)."""

    user_id: int
    role_ids: tuple[int, ...] = ()
    timed_out: bool = False


def base_permissions(guild: GuildRoles, member: Member) -> int:
    """Step 1: the member's guild-wide permissions (every bit for the owner or an
    administrator)."""
    if member.user_id == guild.owner_id:
        return ALL_PERMISSIONS
    permissions = guild.everyone.permissions
    for role_id in member.role_ids:
        role = guild.roles.get(role_id)
        if role is not None:
            permissions |= role.permissions
    if permissions & Permission.ADMINISTRATOR:
        return ALL_PERMISSIONS
    return permissions


@dataclass(frozen=True)
class _Steps:
    """The permissions after each step of `channel_permissions`, for `missing_permissions`."""

    base: int
    after_everyone: int
    after_roles: int
    after_member: int
    final: int


def _steps(guild: GuildRoles, member: Member, overwrites: Sequence[Overwrite]) -> _Steps:
    base = base_permissions(guild, member)
    if base & Permission.ADMINISTRATOR:
        return _Steps(base, base, base, base, base)
    by_target = {(o.kind, o.target_id): o for o in overwrites}
    everyone = by_target.get((OverwriteKind.ROLE, guild.guild_id))
    permissions = base
    if everyone is not None:
        permissions = (permissions & ~everyone.deny) | everyone.allow
    after_everyone = permissions
    allow = deny = 0
    for role_id in member.role_ids:
        overwrite = by_target.get((OverwriteKind.ROLE, role_id))
        if overwrite is not None and role_id != guild.guild_id:
            allow |= overwrite.allow
            deny |= overwrite.deny
    permissions = (permissions & ~deny) | allow
    after_roles = permissions
    own = by_target.get((OverwriteKind.MEMBER, member.user_id))
    if own is not None:
        permissions = (permissions & ~own.deny) | own.allow
    after_member = permissions
    final = permissions
    if member.timed_out:
        final &= KEPT_WHILE_TIMED_OUT
    if not final & Permission.VIEW_CHANNEL:
        final = 0
    if not final & Permission.SEND_MESSAGES:
        final &= ~NEEDS_SEND_MESSAGES
    return _Steps(base, after_everyone, after_roles, after_member, final)


def channel_permissions(guild: GuildRoles, member: Member, overwrites: Sequence[Overwrite]) -> int:
    """Steps 1–4: what ``member`` may do in a channel with ``overwrites`` (for a thread, its
    parent channel's)."""
    return _steps(guild, member, overwrites).final


class LackCause(StrEnum):
    """Which step of the computation took a permission away. Stable codes (stored, shown)."""

    NOT_GRANTED = "not_granted"
    """Neither ``@everyone`` nor any role of the member grants it, and no overwrite allows it."""
    EVERYONE_OVERWRITE = "everyone_overwrite"
    """The channel's ``@everyone`` overwrite denies it (no role overwrite allows it back)."""
    ROLE_OVERWRITE = "role_overwrite"
    """An overwrite of one of the member's roles denies it (and none of them allows it)."""
    MEMBER_OVERWRITE = "member_overwrite"
    """The channel's overwrite for the member themselves denies it."""
    NO_VIEW_CHANNEL = "no_view_channel"
    """Implied: without View Channel nothing else counts in the channel."""
    NO_SEND_MESSAGES = "no_send_messages"
    """Implied: without Send Messages no files, embeds, mentions of everyone or TTS."""
    TIMED_OUT = "timed_out"
    """The member is timed out: only View Channel and Read Message History remain."""


@dataclass(frozen=True)
class Lack:
    """A wanted permission the member does not have in the channel, and why: ``cause``, with
    ``culprits`` naming the overwrites that deny it (role names, ``@everyone``, or the
    member) when the cause is an overwrite."""

    permission: Permission
    cause: LackCause
    culprits: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return permission_name(self.permission)


def missing_permissions(
    guild: GuildRoles,
    member: Member,
    overwrites: Sequence[Overwrite],
    wanted: Iterable[Permission],
) -> list[Lack]:
    """Each of ``wanted`` that ``member`` lacks in the channel, in the order given, with the
    step that took it: a permission the roles and overwrites leave but an implicit rule or a
    timeout takes says so (`LackCause.NO_VIEW_CHANNEL`, ``NO_SEND_MESSAGES``, ``TIMED_OUT``);
    one the roles and overwrites never give names the overwrites that deny it. Empty when
    nothing is missing."""
    steps = _steps(guild, member, overwrites)
    lacks = []
    for permission in wanted:
        if steps.final & permission:
            continue
        lacks.append(_why(guild, member, overwrites, steps, permission))
    return lacks


def _why(
    guild: GuildRoles,
    member: Member,
    overwrites: Sequence[Overwrite],
    steps: _Steps,
    permission: Permission,
) -> Lack:
    if steps.after_member & permission:  # an implicit rule or the timeout took it
        if not steps.after_member & Permission.VIEW_CHANNEL:
            return Lack(permission, LackCause.NO_VIEW_CHANNEL)
        if member.timed_out and not permission & KEPT_WHILE_TIMED_OUT:
            return Lack(permission, LackCause.TIMED_OUT)
        return Lack(permission, LackCause.NO_SEND_MESSAGES)
    by_target = {(o.kind, o.target_id): o for o in overwrites}
    own = by_target.get((OverwriteKind.MEMBER, member.user_id))
    if steps.after_roles & permission and own is not None and own.deny & permission:
        return Lack(permission, LackCause.MEMBER_OVERWRITE, ("the bot's own overwrite",))
    if steps.after_everyone & permission:
        denying = tuple(
            guild.role_name(role_id)
            for role_id in member.role_ids
            if (o := by_target.get((OverwriteKind.ROLE, role_id))) is not None
            and o.deny & permission
        )
        return Lack(permission, LackCause.ROLE_OVERWRITE, denying)
    if steps.base & permission:
        return Lack(permission, LackCause.EVERYONE_OVERWRITE, ("@everyone",))
    return Lack(permission, LackCause.NOT_GRANTED)
