"""A member's permissions in a channel, as Discord's developer docs compute them ("Permissions":
hierarchy, overwrites, implicit permissions; timeouts), and why a permission is missing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.permissions import (
    ALL_PERMISSIONS,
    GuildRoles,
    Lack,
    LackCause,
    Member,
    Overwrite,
    OverwriteKind,
    Permission,
    Role,
    base_permissions,
    channel_permissions,
    missing_permissions,
    permission_name,
)

P = Permission
GUILD, BOT, OWNER, OTHER = 100, 200, 300, 400
HELPERS, MUTED, ADMINS = 11, 12, 13
CHAT = P.VIEW_CHANNEL | P.SEND_MESSAGES | P.READ_MESSAGE_HISTORY | P.ADD_REACTIONS
EVERYONE_DEFAULT = CHAT | P.EMBED_LINKS | P.ATTACH_FILES | P.USE_EXTERNAL_EMOJIS


def guild(everyone: int = EVERYONE_DEFAULT, **role_permissions: int) -> GuildRoles:
    ids = {"helpers": HELPERS, "muted": MUTED, "admins": ADMINS}
    roles = {GUILD: Role(GUILD, "@everyone", everyone)}
    for name, bits in role_permissions.items():
        roles[ids[name]] = Role(ids[name], name.capitalize(), bits)
    return GuildRoles(guild_id=GUILD, owner_id=OWNER, roles=roles)


def everyone(allow: int = 0, deny: int = 0) -> Overwrite:
    return Overwrite(GUILD, OverwriteKind.ROLE, allow, deny)


def role(role_id: int, allow: int = 0, deny: int = 0) -> Overwrite:
    return Overwrite(role_id, OverwriteKind.ROLE, allow, deny)


def member(user_id: int = BOT, allow: int = 0, deny: int = 0) -> Overwrite:
    return Overwrite(user_id, OverwriteKind.MEMBER, allow, deny)


BOT_PLAIN = Member(BOT)
BOT_HELPER = Member(BOT, (HELPERS,))
BOT_HELPER_MUTED = Member(BOT, (HELPERS, MUTED))


# --- the documented algorithm, rule by rule ----------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "roles", "who", "overwrites", "has", "lacks"),
    [
        (
            "the owner has every permission, whatever the overwrites say",
            guild(everyone=0),
            Member(OWNER),
            [everyone(deny=ALL_PERMISSIONS), member(OWNER, deny=ALL_PERMISSIONS)],
            ALL_PERMISSIONS,
            0,
        ),
        (
            "Administrator from a role is every permission, and bypasses overwrites",
            guild(admins=P.ADMINISTRATOR),
            Member(BOT, (ADMINS,)),
            [everyone(deny=ALL_PERMISSIONS), role(ADMINS, deny=ALL_PERMISSIONS)],
            ALL_PERMISSIONS,
            0,
        ),
        (
            "Administrator granted to @everyone counts too",
            guild(everyone=P.ADMINISTRATOR),
            BOT_PLAIN,
            [member(deny=P.SEND_MESSAGES)],
            ALL_PERMISSIONS,
            0,
        ),
        (
            "base permissions: @everyone's and every role's together",
            guild(everyone=P.VIEW_CHANNEL | P.SEND_MESSAGES, helpers=P.MANAGE_WEBHOOKS),
            BOT_HELPER,
            [],
            P.VIEW_CHANNEL | P.SEND_MESSAGES | P.MANAGE_WEBHOOKS,
            P.READ_MESSAGE_HISTORY,
        ),
        (
            "a role the member does not hold gives nothing",
            guild(helpers=P.MANAGE_WEBHOOKS),
            BOT_PLAIN,
            [],
            CHAT,
            P.MANAGE_WEBHOOKS,
        ),
        (
            "the @everyone overwrite denies",
            guild(),
            BOT_PLAIN,
            [everyone(deny=P.SEND_MESSAGES)],
            P.VIEW_CHANNEL | P.ADD_REACTIONS,
            P.SEND_MESSAGES,
        ),
        (
            "the @everyone overwrite allows what no role grants",
            guild(),
            BOT_PLAIN,
            [everyone(allow=P.MANAGE_WEBHOOKS)],
            P.MANAGE_WEBHOOKS,
            0,
        ),
        (
            "a role overwrite's allow beats the @everyone overwrite's deny",
            guild(),
            BOT_HELPER,
            [everyone(deny=P.SEND_MESSAGES), role(HELPERS, allow=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            0,
        ),
        (
            "role overwrites apply together: one role's allow beats another's deny",
            guild(),
            BOT_HELPER_MUTED,
            [role(MUTED, deny=P.SEND_MESSAGES), role(HELPERS, allow=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            0,
        ),
        (
            "a role overwrite denies what the base grants",
            guild(),
            BOT_HELPER_MUTED,
            [role(MUTED, deny=P.ADD_REACTIONS)],
            P.SEND_MESSAGES,
            P.ADD_REACTIONS,
        ),
        (
            "an overwrite for a role the member does not hold does nothing",
            guild(),
            BOT_PLAIN,
            [role(MUTED, deny=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            0,
        ),
        (
            "the member's own overwrite beats the role overwrites",
            guild(),
            BOT_HELPER,
            [role(HELPERS, allow=P.MANAGE_WEBHOOKS), member(deny=P.MANAGE_WEBHOOKS)],
            CHAT,
            P.MANAGE_WEBHOOKS,
        ),
        (
            "the member's own overwrite allows back what a role overwrite denied",
            guild(),
            BOT_HELPER_MUTED,
            [role(MUTED, deny=P.SEND_MESSAGES), member(allow=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            0,
        ),
        (
            "another member's overwrite does nothing",
            guild(),
            BOT_PLAIN,
            [member(OTHER, deny=P.VIEW_CHANNEL)],
            CHAT,
            0,
        ),
        (
            "implicit: without View Channel everything else is denied",
            guild(everyone=EVERYONE_DEFAULT | P.MANAGE_WEBHOOKS),
            BOT_PLAIN,
            [everyone(deny=P.VIEW_CHANNEL)],
            0,
            ALL_PERMISSIONS,
        ),
        (
            "implicit: without Send Messages no files, embeds, @everyone or TTS",
            guild(everyone=EVERYONE_DEFAULT | P.MENTION_EVERYONE | P.SEND_TTS_MESSAGES),
            BOT_PLAIN,
            [everyone(deny=P.SEND_MESSAGES)],
            P.VIEW_CHANNEL | P.READ_MESSAGE_HISTORY | P.ADD_REACTIONS | P.USE_EXTERNAL_EMOJIS,
            P.ATTACH_FILES | P.EMBED_LINKS | P.MENTION_EVERYONE | P.SEND_TTS_MESSAGES,
        ),
        (
            "a timed-out member keeps only View Channel and Read Message History",
            guild(helpers=P.MANAGE_WEBHOOKS),
            Member(BOT, (HELPERS,), timed_out=True),
            [],
            P.VIEW_CHANNEL | P.READ_MESSAGE_HISTORY,
            P.SEND_MESSAGES | P.ADD_REACTIONS | P.MANAGE_WEBHOOKS,
        ),
        (
            "a timeout does not touch an administrator",
            guild(admins=P.ADMINISTRATOR),
            Member(BOT, (ADMINS,), timed_out=True),
            [],
            ALL_PERMISSIONS,
            0,
        ),
        (
            "a timeout does not touch the owner",
            guild(),
            Member(OWNER, timed_out=True),
            [],
            ALL_PERMISSIONS,
            0,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_channel_permissions_follow_discords_rules(rule, roles, who, overwrites, has, lacks):
    permissions = channel_permissions(roles, who, overwrites)

    assert permissions & has == has, rule
    assert permissions & lacks == 0, rule


def test_base_permissions_are_every_bit_for_the_owner_and_administrators():
    assert base_permissions(guild(everyone=0), Member(OWNER)) == ALL_PERMISSIONS
    admin = Member(BOT, (ADMINS,))
    assert base_permissions(guild(admins=P.ADMINISTRATOR), admin) == ALL_PERMISSIONS
    assert base_permissions(guild(everyone=P.VIEW_CHANNEL), BOT_PLAIN) == P.VIEW_CHANNEL


# --- Discord's documented pseudo-code, transcribed, against the implementation ----------------


def documented(roles: GuildRoles, who: Member, overwrites: list[Overwrite]) -> int:
    """The developer docs' ``compute_base_permissions`` and ``compute_overwrites``, then the
    implicit rules and the timeout rule as the docs state them."""
    if who.user_id == roles.owner_id:
        return ALL_PERMISSIONS
    permissions = roles.roles[roles.guild_id].permissions
    for role_id in who.role_ids:
        permissions |= roles.roles[role_id].permissions
    if permissions & P.ADMINISTRATOR == P.ADMINISTRATOR:
        return ALL_PERMISSIONS
    everyone_overwrite = next(
        (o for o in overwrites if o.kind == "role" and o.target_id == roles.guild_id), None
    )
    if everyone_overwrite:
        permissions &= ~everyone_overwrite.deny
        permissions |= everyone_overwrite.allow
    allow = deny = 0
    for role_id in who.role_ids:
        for o in overwrites:
            if o.kind == "role" and o.target_id == role_id:
                allow |= o.allow
                deny |= o.deny
    permissions &= ~deny
    permissions |= allow
    for o in overwrites:
        if o.kind == "member" and o.target_id == who.user_id:
            permissions &= ~o.deny
            permissions |= o.allow
    if who.timed_out:
        permissions &= P.VIEW_CHANNEL | P.READ_MESSAGE_HISTORY
    if not permissions & P.VIEW_CHANNEL:
        return 0
    if not permissions & P.SEND_MESSAGES:
        permissions &= ~(P.ATTACH_FILES | P.EMBED_LINKS | P.MENTION_EVERYONE | P.SEND_TTS_MESSAGES)
    return permissions


NAMED = list(P)
bits = st.lists(st.sampled_from(NAMED), max_size=6).map(lambda ps: sum(set(ps)))
role_ids = st.lists(st.sampled_from([HELPERS, MUTED, ADMINS]), unique=True, max_size=3)


@st.composite
def situations(draw):
    roles = GuildRoles(
        guild_id=GUILD,
        owner_id=draw(st.sampled_from([OWNER, BOT])),
        roles={
            GUILD: Role(GUILD, "@everyone", draw(bits)),
            HELPERS: Role(HELPERS, "Helpers", draw(bits)),
            MUTED: Role(MUTED, "Muted", draw(bits)),
            ADMINS: Role(ADMINS, "Admins", draw(bits)),
        },
    )
    who = Member(BOT, tuple(draw(role_ids)), timed_out=draw(st.booleans()))
    targets = st.sampled_from(
        [
            (GUILD, OverwriteKind.ROLE),
            (HELPERS, OverwriteKind.ROLE),
            (MUTED, OverwriteKind.ROLE),
            (BOT, OverwriteKind.MEMBER),
            (OTHER, OverwriteKind.MEMBER),
        ]
    )
    chosen = draw(st.lists(targets, unique=True, max_size=5))
    overwrites = [Overwrite(t, kind, draw(bits), draw(bits)) for t, kind in chosen]
    return roles, who, overwrites


@given(situations())
def test_the_implementation_agrees_with_the_documented_pseudo_code(situation):
    roles, who, overwrites = situation

    assert channel_permissions(roles, who, overwrites) == documented(roles, who, overwrites)


@given(situations(), st.lists(st.sampled_from(NAMED), unique=True, max_size=8))
def test_exactly_the_wanted_permissions_the_member_lacks_are_explained(situation, wanted):
    roles, who, overwrites = situation
    permissions = channel_permissions(roles, who, overwrites)

    lacks = missing_permissions(roles, who, overwrites, wanted)

    assert [lack.permission for lack in lacks] == [p for p in wanted if not permissions & p]


# --- why a permission is missing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "who", "overwrites", "wanted", "expected"),
    [
        (
            guild(),
            BOT_PLAIN,
            [],
            P.MANAGE_WEBHOOKS,
            Lack(P.MANAGE_WEBHOOKS, LackCause.NOT_GRANTED),
        ),
        (
            guild(),
            BOT_PLAIN,
            [everyone(deny=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            Lack(P.SEND_MESSAGES, LackCause.EVERYONE_OVERWRITE, ("@everyone",)),
        ),
        (
            guild(helpers=0, muted=0),
            BOT_HELPER_MUTED,
            [role(MUTED, deny=P.ADD_REACTIONS)],
            P.ADD_REACTIONS,
            Lack(P.ADD_REACTIONS, LackCause.ROLE_OVERWRITE, ("Muted",)),
        ),
        (
            guild(),
            BOT_HELPER,
            [role(HELPERS, allow=P.SEND_MESSAGES), member(deny=P.SEND_MESSAGES)],
            P.SEND_MESSAGES,
            Lack(P.SEND_MESSAGES, LackCause.MEMBER_OVERWRITE, ("the bot's own overwrite",)),
        ),
        (
            guild(),
            BOT_PLAIN,
            [everyone(deny=P.VIEW_CHANNEL)],
            P.SEND_MESSAGES,
            Lack(P.SEND_MESSAGES, LackCause.NO_VIEW_CHANNEL),
        ),
        (
            guild(),
            BOT_PLAIN,
            [everyone(deny=P.SEND_MESSAGES)],
            P.ATTACH_FILES,
            Lack(P.ATTACH_FILES, LackCause.NO_SEND_MESSAGES),
        ),
        (
            guild(),
            Member(BOT, timed_out=True),
            [],
            P.SEND_MESSAGES,
            Lack(P.SEND_MESSAGES, LackCause.TIMED_OUT),
        ),
        (
            guild(everyone=CHAT),
            BOT_PLAIN,
            [everyone(deny=P.VIEW_CHANNEL)],
            P.VIEW_CHANNEL,
            Lack(P.VIEW_CHANNEL, LackCause.EVERYONE_OVERWRITE, ("@everyone",)),
        ),
    ],
    ids=lambda value: value.cause.value if isinstance(value, Lack) else None,
)
def test_a_missing_permission_names_the_step_that_took_it(roles, who, overwrites, wanted, expected):
    assert missing_permissions(roles, who, overwrites, [wanted]) == [expected]


def test_nothing_is_missing_for_an_administrator():
    admins = guild(admins=P.ADMINISTRATOR)
    overwrites = [everyone(deny=ALL_PERMISSIONS)]

    assert missing_permissions(admins, Member(BOT, (ADMINS,)), overwrites, list(P)) == []


def test_permissions_are_named_as_discords_screens_name_them():
    assert permission_name(P.MANAGE_WEBHOOKS) == "Manage Webhooks"
    assert permission_name(P.SEND_MESSAGES_IN_THREADS) == "Send Messages in Threads"
