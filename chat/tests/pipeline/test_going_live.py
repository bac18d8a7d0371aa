"""What going live needs and how the doctor words it: the invite link, the privileged intents,
guilds, commands, a channel's permissions with where to fix each, webhooks, models and the
turns Discord refused."""

from __future__ import annotations

import pytest

from chat.pipeline.going_live import (
    MAX_WEBHOOKS_PER_CHANNEL,
    BotStanding,
    ChannelAccess,
    ChannelDuties,
    Check,
    ModelEndpoint,
    ModelUse,
    RefusalSeen,
    channel_check,
    channel_lacks,
    commands_check,
    guild_checks,
    intent_checks,
    intents_not_enabled,
    invite_permissions,
    invite_url,
    model_checks,
    needed_permissions,
    refusals_check,
    token_check,
    webhook_check,
)
from chat.pipeline.permissions import (
    GuildRoles,
    Member,
    Overwrite,
    OverwriteKind,
    Permission,
    Role,
)

P = Permission
GUILD, BOT, BOT_ROLE, MUTED, CHANNEL = 10, 20, 30, 40, 50
MEMBERS, PRESENCE, CONTENT = 1 << 1, 1 << 8, 1 << 15
FLAG_MEMBERS, FLAG_CONTENT_LIMITED = 1 << 14, 1 << 19
SERVED = (
    P.VIEW_CHANNEL
    | P.SEND_MESSAGES
    | P.READ_MESSAGE_HISTORY
    | P.ADD_REACTIONS
    | P.ATTACH_FILES
    | P.EMBED_LINKS
    | P.USE_EXTERNAL_EMOJIS
    | P.SEND_MESSAGES_IN_THREADS
)


def test_the_invite_link_is_exactly_discords_authorize_url():
    assert invite_url(application_id=123, permissions=2048) == (
        "https://discord.com/oauth2/authorize?client_id=123"
        "&scope=bot%20applications.commands&permissions=2048"
    )


def test_the_invite_asks_for_what_the_channels_need_and_never_administrator():
    plain = invite_permissions([])
    with_alters = invite_permissions([ChannelDuties(), ChannelDuties(alter_personas=("Anon",))])

    assert plain == SERVED
    assert with_alters == SERVED | P.MANAGE_WEBHOOKS
    assert not with_alters & P.ADMINISTRATOR
    assert P.MANAGE_WEBHOOKS in needed_permissions(ChannelDuties(alter_personas=("Anon",)))
    assert P.MANAGE_WEBHOOKS not in needed_permissions(ChannelDuties())


@pytest.mark.parametrize(
    ("flags", "missing"),
    [
        (0, ["Server Members", "Message Content"]),
        (FLAG_MEMBERS, ["Message Content"]),
        (FLAG_MEMBERS | FLAG_CONTENT_LIMITED, []),  # the _LIMITED flag counts as on
    ],
)
def test_privileged_intents_the_application_does_not_allow(flags, missing):
    found = intents_not_enabled(application_flags=flags, intents=MEMBERS | CONTENT | 1)

    assert [intent.name for intent in found] == missing


def test_an_intent_line_names_the_switch_and_the_screen():
    [members, content] = intent_checks(application_flags=FLAG_MEMBERS, intents=MEMBERS | CONTENT)

    assert members.line == "ok   intent Server Members: switched on"
    assert content.line.startswith("FAIL intent Message Content: the bot asks for the Message")
    assert "switch on Message Content Intent in the Developer Portal" in content.detail
    assert content.detail.endswith("→ Bot → Privileged Gateway Intents, then Save Changes")
    assert intent_checks(application_flags=0, intents=1) == []  # asks for none: no line


def test_the_token_line():
    assert token_check(bot_name="Tomori", refused=None).line == (
        "ok   token: Discord accepts it: the bot is Tomori"
    )
    refused = token_check(bot_name=None, refused="401 Unauthorized")
    assert not refused.ok and "Reset Token into DISCORD_TOKEN" in refused.detail


def test_guilds_configured_and_joined_both_ways():
    checks = guild_checks(
        configured={1: "Café", 2: "Elsewhere"},
        joined={1: "Café", 3: "Stray"},
        invites={1: "https://invite/1", 2: "https://invite/2"},
    )

    assert [c.line for c in checks] == [
        "ok   guild Café: the bot is in it",
        "FAIL guild Elsewhere: configured, but the bot is not in it: a server admin opens "
        "https://invite/2 and picks Elsewhere",
        "FAIL guild Stray: the bot is in it (3) but it is not configured: add it on the "
        "dashboard (Guilds → Add a guild), or remove the bot from it",
    ]
    assert [c.guild_id for c in checks] == [1, 2, None]


def test_commands_missing_are_named():
    expected = {"privacy", "memory", "Why (not)?"}
    assert commands_check(
        scope="Café", registered=expected, expected=expected, global_scope=False
    ).ok
    missing = commands_check(
        scope="Café", registered={"privacy"}, expected=expected, global_scope=False
    )
    assert missing.detail.startswith("not registered: /memory, Why (not)?: start the worker")
    unreadable = commands_check(
        scope="global", registered=None, expected=expected, global_scope=True
    )
    assert "registers them globally (DISCORD_GLOBAL_COMMANDS)" in unreadable.detail


def bot(*, overwrites_roles: tuple[int, ...] = (BOT_ROLE,), timed_out: bool = False, role=SERVED):
    guild = GuildRoles(
        guild_id=GUILD,
        owner_id=1,
        roles={
            GUILD: Role(GUILD, "@everyone", 0),
            BOT_ROLE: Role(BOT_ROLE, "Tomori", role),
            MUTED: Role(MUTED, "Muted", 0),
        },
    )
    return BotStanding(
        guild=guild,
        member=Member(BOT, overwrites_roles, timed_out=timed_out),
        role_name="Tomori",
        guild_name="Café",
    )


def check(overwrites=(), *, alters=(), synced=None, standing=None) -> Check:
    channel = ChannelAccess(CHANNEL, "general", tuple(overwrites), synced_category=synced)
    standing = standing or bot()
    duties = ChannelDuties(alter_personas=alters)
    lacks = channel_lacks(channel=channel, bot=standing, duties=duties)
    return channel_check(channel=channel, bot=standing, duties=duties, lacks=lacks, guild_id=GUILD)


def everyone(deny: int) -> Overwrite:
    return Overwrite(GUILD, OverwriteKind.ROLE, deny=deny)


def test_a_channel_with_every_permission_passes():
    result = check()

    assert result.line == "ok   #general (Café): every permission its personas need"
    assert (result.guild_id, result.channel_id) == (GUILD, CHANNEL)


@pytest.mark.parametrize(
    ("overwrites", "options", "expected"),
    [
        (
            [everyone(P.SEND_MESSAGES)],
            {},
            "missing Send Messages (to reply): #general's permissions deny it to @everyone; "
            "allow Send Messages for the bot's role (Tomori) there",
        ),
        (
            [everyone(P.SEND_MESSAGES)],
            {"synced": "Talk"},
            "missing Send Messages (to reply): the Talk category's permissions (#general is "
            "synced) deny it to @everyone; allow Send Messages for the bot's role (Tomori) there",
        ),
        (
            [],
            {"alters": ("Anon", "Saki")},
            "missing Manage Webhooks (to speak as Anon, Saki): none of the bot's roles grant "
            "Manage Webhooks; grant it to the bot's role (Tomori) in Server Settings → Roles, or "
            "allow it for the bot's role (Tomori) in #general's permissions",
        ),
        (
            [Overwrite(MUTED, OverwriteKind.ROLE, deny=P.ADD_REACTIONS)],
            {"standing": bot(overwrites_roles=(BOT_ROLE, MUTED))},
            "missing Add Reactions (for its ⏳ and 💤 reactions): #general's permissions deny it "
            "to Muted; remove that denial, or allow Add Reactions for the bot's role (Tomori) "
            "there",
        ),
        (
            [Overwrite(BOT, OverwriteKind.MEMBER, deny=P.EMBED_LINKS)],
            {},
            "missing Embed Links (for link previews in replies): #general's permissions deny it "
            "to the bot itself; remove the bot's own entry there",
        ),
        (
            [everyone(P.VIEW_CHANNEL)],
            {"alters": ("Anon",)},
            "missing View Channel (to see the channel at all): #general's permissions deny it to "
            "@everyone; allow View Channel for the bot's role (Tomori) there",
        ),
        (
            [],
            {"standing": bot(timed_out=True)},
            "missing Send Messages (to reply): the bot is timed out in Café; remove its timeout",
        ),
    ],
)
def test_a_channel_line_names_each_missing_permission_why_and_where_to_fix_it(
    overwrites, options, expected
):
    result = check(overwrites, **options)

    assert not result.ok
    assert result.name == "#general (Café)"
    assert result.detail.startswith(expected)


def test_without_send_messages_the_files_and_embeds_it_implies_say_so():
    result = check([everyone(P.SEND_MESSAGES)])

    assert (
        "missing Attach Files (for /prompt's file): it has no Send Messages there" in result.detail
    )


def test_webhooks_fail_only_when_the_channel_is_full_of_others():
    channel = ChannelAccess(CHANNEL, "poetry")
    full = MAX_WEBHOOKS_PER_CHANNEL

    assert webhook_check(channel=channel, guild_name="Café", count=3, own=0, guild_id=1).ok
    assert webhook_check(channel=channel, guild_name="Café", count=full, own=1, guild_id=1).ok
    blocked = webhook_check(channel=channel, guild_name="Café", count=full, own=0, guild_id=1)
    assert blocked.line.startswith("FAIL webhooks #poetry (Café): 15 of 15, none of them")


def test_models_listed_by_their_endpoint():
    endpoints = [
        ModelEndpoint("http://a/v1", "LLM_BASE_URL", listed=frozenset({"m1", "m2"})),
        ModelEndpoint("http://b/v1", "LLM_VISION_BASE_URL", error="connection: refused"),
    ]
    uses = [
        ModelUse("m1", "http://a/v1", ("Tomori (Café)",)),
        ModelUse("m3", "http://a/v1", ("Anon (Café)",)),
        ModelUse("eyes", "http://b/v1", ("LLM_VISION_MODEL",)),
    ]

    lines = [c.line for c in model_checks(endpoints=endpoints, uses=uses)]

    assert lines == [
        "ok   model endpoint http://a/v1: answers; 2 models listed",
        "FAIL model endpoint http://b/v1: GET /models failed (connection: refused): check "
        "LLM_VISION_BASE_URL and that the server is up (and LLM_API_KEY, if it needs one)",
        "ok   model m1: listed (used by Tomori (Café))",
        "FAIL model m3: http://a/v1/models does not list it (used by Anon (Café)): name a model "
        "it lists on the persona's page, or in the setting that names this one",
    ]


def test_refused_turns_fail_while_the_permission_is_still_missing():
    fixed = RefusalSeen(CHANNEL, "general", "Send Messages", turns=2, still_missing=False)
    still = RefusalSeen(60, "poetry", "Manage Webhooks", turns=1, still_missing=True)

    assert refusals_check(refusals=[], window="last 24 hours").line == (
        "ok   refused turns: none in the last 24 hours"
    )
    assert refusals_check(refusals=[fixed], window="last 24 hours").line == (
        "ok   refused turns: 2 turns in the last 24 hours refused by Discord: Send Messages in "
        "#general (2); fixed since"
    )
    failing = refusals_check(refusals=[fixed, still], window="last 24 hours")
    assert not failing.ok and failing.channel_id == 60
    assert "Manage Webhooks in #poetry (1)" in failing.detail


def test_a_check_round_trips_through_json():
    line = Check("#general (Café)", False, "missing Send Messages", GUILD, CHANNEL)

    assert Check.from_json(line.as_json()) == line
    assert line.as_json()["channel_id"] == str(CHANNEL)
