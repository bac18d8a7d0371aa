"""Going live on Discord: what the bot needs from its application and each channel, the invite
link that asks for exactly that, and the judgments `manage.py doctor` prints.

Each judgment here takes what was read (from Discord, the configuration, the model endpoint)
and returns `Check`s: one line each, ``ok`` or ``FAIL`` with the fix in one sentence. The
service (`chat.services.doctor`) reads; this module decides and words. Pure: no Discord, no
network, no clock.

What the bot needs in a channel it serves (DESIGN §3b "Going live"), and why:

- View Channel, Send Messages, Read Message History (its window of history, and replies);
- Add Reactions (⏳ and 💤 when a user or a guild is over its limits), Attach Files (``/prompt``
  answers with a file), Embed Links (link previews in replies), Use External Emojis;
- Send Messages in Threads (threads of a served channel are served too);
- Manage Webhooks where a persona other than the main one may speak (each speaks through the
  channel's webhook, under its own name and avatar).

Never Administrator: the invite asks for these bits and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntFlag
from typing import Any
from urllib.parse import quote

from chat.pipeline.permissions import (
    GuildRoles,
    Lack,
    LackCause,
    Member,
    Overwrite,
    Permission,
    missing_permissions,
)

MAX_WEBHOOKS_PER_CHANNEL = 15
"""Discord's limit of webhooks in one channel (a new one beyond it fails with 30007)."""
INVITE_BASE = "https://discord.com/oauth2/authorize"
INVITE_SCOPES = "bot applications.commands"
DEVELOPER_PORTAL = "https://discord.com/developers/applications"
INTENTS_SCREEN = f"the Developer Portal ({DEVELOPER_PORTAL}) → your application → Bot → " + (
    "Privileged Gateway Intents"
)


class ApplicationFlag(IntFlag):
    """The application ``flags`` that say a privileged intent is switched on (the ``_LIMITED``
    form is what a bot in fewer than 100 servers gets)."""

    GATEWAY_PRESENCE = 1 << 12
    GATEWAY_PRESENCE_LIMITED = 1 << 13
    GATEWAY_GUILD_MEMBERS = 1 << 14
    GATEWAY_GUILD_MEMBERS_LIMITED = 1 << 15
    GATEWAY_MESSAGE_CONTENT = 1 << 18
    GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19


@dataclass(frozen=True)
class PrivilegedIntent:
    """A gateway intent Discord gives only when it is switched on for the application."""

    name: str
    """As the product names it: ``Message Content``."""
    intent: int
    """Its bit in IDENTIFY's ``intents``."""
    flags: int
    """The application flags that mean it is on (either one)."""
    switch: str
    """The switch's label on the Bot screen of the Developer Portal."""

    @property
    def fix(self) -> str:
        return f"switch on {self.switch} in {INTENTS_SCREEN}, then Save Changes"


PRIVILEGED_INTENTS: tuple[PrivilegedIntent, ...] = (
    PrivilegedIntent(
        "Server Members",
        1 << 1,
        ApplicationFlag.GATEWAY_GUILD_MEMBERS | ApplicationFlag.GATEWAY_GUILD_MEMBERS_LIMITED,
        "Server Members Intent",
    ),
    PrivilegedIntent(
        "Presence",
        1 << 8,
        ApplicationFlag.GATEWAY_PRESENCE | ApplicationFlag.GATEWAY_PRESENCE_LIMITED,
        "Presence Intent",
    ),
    PrivilegedIntent(
        "Message Content",
        1 << 15,
        ApplicationFlag.GATEWAY_MESSAGE_CONTENT | ApplicationFlag.GATEWAY_MESSAGE_CONTENT_LIMITED,
        "Message Content Intent",
    ),
)


def privileged_intents(intents: int) -> list[PrivilegedIntent]:
    """The privileged intents among ``intents`` (an IDENTIFY's bits)."""
    return [p for p in PRIVILEGED_INTENTS if intents & p.intent]


def intents_not_enabled(*, application_flags: int, intents: int) -> list[PrivilegedIntent]:
    """The privileged intents the bot asks for (``intents``) that the application's ``flags``
    do not switch on: Discord closes the gateway with 4014 when any is asked for."""
    return [p for p in privileged_intents(intents) if not application_flags & p.flags]


# --- what a channel needs --------------------------------------------------------------------

SERVED_CHANNEL_NEEDS: tuple[Permission, ...] = (
    Permission.VIEW_CHANNEL,
    Permission.SEND_MESSAGES,
    Permission.READ_MESSAGE_HISTORY,
    Permission.ADD_REACTIONS,
    Permission.ATTACH_FILES,
    Permission.EMBED_LINKS,
    Permission.USE_EXTERNAL_EMOJIS,
    Permission.SEND_MESSAGES_IN_THREADS,
)
"""Every channel the bot serves, in the order a person would fix them."""

PURPOSES: Mapping[Permission, str] = {
    Permission.VIEW_CHANNEL: "to see the channel at all",
    Permission.SEND_MESSAGES: "to reply",
    Permission.READ_MESSAGE_HISTORY: "to read the conversation it answers",
    Permission.ADD_REACTIONS: "for its ⏳ and 💤 reactions",
    Permission.ATTACH_FILES: "for /prompt's file",
    Permission.EMBED_LINKS: "for link previews in replies",
    Permission.USE_EXTERNAL_EMOJIS: "for emojis from other servers",
    Permission.SEND_MESSAGES_IN_THREADS: "to reply in threads",
    Permission.MANAGE_WEBHOOKS: "to speak as its other personas",
}


@dataclass(frozen=True)
class ChannelDuties:
    """What the bot does in a channel: always speaks there (and in its threads); with
    ``alter_personas`` (the names of the non-main personas that may speak there) through
    the channel's webhook too."""

    alter_personas: tuple[str, ...] = ()


def needed_permissions(duties: ChannelDuties) -> tuple[Permission, ...]:
    """The permissions the bot needs in a channel with ``duties``, in fixing order."""
    if duties.alter_personas:
        return (*SERVED_CHANNEL_NEEDS, Permission.MANAGE_WEBHOOKS)
    return SERVED_CHANNEL_NEEDS


def invite_permissions(duties: Iterable[ChannelDuties]) -> int:
    """The permission integer an invite asks for: everything any of ``duties`` needs (the
    served channels' needs even when there are none yet), never Administrator."""
    bits = 0
    for permission in SERVED_CHANNEL_NEEDS:
        bits |= permission
    for duty in duties:
        for permission in needed_permissions(duty):
            bits |= permission
    return bits


def invite_url(*, application_id: int, permissions: int) -> str:
    """The link that adds the bot to a server with its slash commands and ``permissions``:
    ``https://discord.com/oauth2/authorize?client_id=…&scope=bot%20applications.commands&permissions=…``."""
    scopes = quote(INVITE_SCOPES, safe="")
    return f"{INVITE_BASE}?client_id={application_id}&scope={scopes}&permissions={permissions}"


# --- checks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: ``name`` (what was checked), ``ok``, and ``detail``
    (for a failure: what is wrong and the fix, in one sentence). ``guild_id`` and
    ``channel_id`` say which guild or channel the line is about, for links."""

    name: str
    ok: bool
    detail: str
    guild_id: int | None = None
    channel_id: int | None = None

    @property
    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "detail": self.detail,
            "guild_id": str(self.guild_id) if self.guild_id is not None else None,
            "channel_id": str(self.channel_id) if self.channel_id is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Check:
        """A check as `as_json` wrote it."""
        guild_id, channel_id = data.get("guild_id"), data.get("channel_id")
        return cls(
            name=str(data["name"]),
            ok=bool(data["ok"]),
            detail=str(data["detail"]),
            guild_id=int(guild_id) if guild_id else None,
            channel_id=int(channel_id) if channel_id else None,
        )


def token_check(*, bot_name: str | None, refused: str | None) -> Check:
    """The token: Discord said who the bot is (``bot_name``), or refused it (``refused``: what
    it answered)."""
    if refused is not None:
        return Check(
            "token",
            False,
            f"Discord refused DISCORD_TOKEN ({refused}): copy the token from the Developer "
            f"Portal → your application → Bot → Reset Token into DISCORD_TOKEN; the other "
            "Discord checks run once it works",
        )
    return Check("token", True, f"Discord accepts it: the bot is {bot_name}")


def intent_checks(*, application_flags: int, intents: int) -> list[Check]:
    """One line per privileged intent the bot asks for: switched on for the application, or
    the switch to turn on (else the gateway closes with 4014)."""
    checks = []
    for intent in privileged_intents(intents):
        if application_flags & intent.flags:
            checks.append(Check(f"intent {intent.name}", True, "switched on"))
        else:
            checks.append(
                Check(
                    f"intent {intent.name}",
                    False,
                    f"the bot asks for the {intent.name} intent but the application does not "
                    f"allow it (Discord would close the gateway with 4014): {intent.fix}",
                )
            )
    return checks


def guild_checks(
    *,
    configured: Mapping[int, str],
    joined: Mapping[int, str],
    invites: Mapping[int, str],
) -> list[Check]:
    """Every configured guild the bot is in (else its invite link, ``invites`` by guild id),
    and every guild the bot is in that is configured (else add it on the dashboard)."""
    checks = []
    for guild_id, name in configured.items():
        if guild_id in joined:
            checks.append(Check(f"guild {name}", True, "the bot is in it", guild_id=guild_id))
        else:
            checks.append(
                Check(
                    f"guild {name}",
                    False,
                    f"configured, but the bot is not in it: a server admin opens "
                    f"{invites[guild_id]} and picks {name}",
                    guild_id=guild_id,
                )
            )
    for guild_id, name in joined.items():
        if guild_id not in configured:
            checks.append(
                Check(
                    f"guild {name}",
                    False,
                    f"the bot is in it ({guild_id}) but it is not configured: add it on the "
                    "dashboard (Guilds → Add a guild), or remove the bot from it",
                )
            )
    return checks


def commands_check(
    *,
    scope: str,
    registered: Iterable[str] | None,
    expected: Iterable[str],
    global_scope: bool,
    guild_id: int | None = None,
) -> Check:
    """The slash commands registered in ``scope`` (a guild's name, or ``global``) against the
    worker's (``expected``); ``registered`` None: Discord would not say."""
    name = f"commands {scope}"
    where = "globally (DISCORD_GLOBAL_COMMANDS)" if global_scope else "in each configured guild"
    fix = f"start the worker (manage.py runbot): it registers them {where} at start"
    if registered is None:
        return Check(name, False, f"Discord would not list them: {fix}", guild_id=guild_id)
    missing = sorted(set(expected) - set(registered), key=str.casefold)
    if missing:
        listed = ", ".join(f"/{n}" if n[:1].islower() else n for n in missing)
        return Check(name, False, f"not registered: {listed}: {fix}", guild_id=guild_id)
    return Check(name, True, f"{len(set(expected))} registered", guild_id=guild_id)


@dataclass(frozen=True)
class ChannelAccess:
    """A configured channel as Discord describes it: its name, its own overwrites (a thread:
    its parent's), and, when it is synced with its category, that category's name (where its
    overwrites are edited)."""

    channel_id: int
    name: str
    overwrites: tuple[Overwrite, ...] = ()
    synced_category: str | None = None


@dataclass(frozen=True)
class BotStanding:
    """The bot in one guild: its member record and its own role's name (the role Discord made
    when it joined, else its highest), for fix sentences."""

    guild: GuildRoles
    member: Member
    role_name: str
    guild_name: str


def channel_lacks(*, channel: ChannelAccess, bot: BotStanding, duties: ChannelDuties) -> list[Lack]:
    """What the bot lacks in ``channel`` of what its ``duties`` need there (empty: nothing),
    computed as Discord does (`chat.pipeline.permissions`)."""
    wanted = needed_permissions(duties)
    return missing_permissions(bot.guild, bot.member, channel.overwrites, wanted)


def channel_check(
    *,
    channel: ChannelAccess,
    bot: BotStanding,
    duties: ChannelDuties,
    lacks: Sequence[Lack],
    guild_id: int,
) -> Check:
    """The bot's effective permissions in ``channel`` against what its ``duties`` need
    (``lacks``: `channel_lacks`), each missing one named with why it is missing and where to
    fix it. Without View Channel only that one is named: nothing else counts before it."""
    name = f"#{channel.name} ({bot.guild_name})"
    if not lacks:
        return Check(name, True, "every permission its personas need", guild_id, channel.channel_id)
    view = next((lack for lack in lacks if lack.permission == Permission.VIEW_CHANNEL), None)
    if view is not None:
        lacks = [view]
    parts = [_lack_sentence(lack, channel, bot, duties) for lack in lacks]
    return Check(name, False, "; ".join(parts), guild_id, channel.channel_id)


def _lack_sentence(
    lack: Lack, channel: ChannelAccess, bot: BotStanding, duties: ChannelDuties
) -> str:
    """``missing Send Messages (to reply): <why> — <fix>``."""
    purpose = PURPOSES.get(lack.permission, "")
    if lack.permission == Permission.MANAGE_WEBHOOKS and duties.alter_personas:
        purpose = f"to speak as {', '.join(duties.alter_personas)}"
    what = f"missing {lack.name}" + (f" ({purpose})" if purpose else "")
    place = f"#{channel.name}'s permissions"
    if channel.synced_category:
        place = f"the {channel.synced_category} category's permissions (#{channel.name} is synced)"
    role = f"the bot's role ({bot.role_name})"
    permission = lack.name
    match lack.cause:
        case LackCause.NOT_GRANTED:
            why = f"none of the bot's roles grant {permission}"
            fix = (
                f"grant it to {role} in Server Settings → Roles, or allow it for {role} in {place}"
            )
        case LackCause.EVERYONE_OVERWRITE:
            why = f"{place} deny it to @everyone"
            fix = f"allow {permission} for {role} there"
        case LackCause.ROLE_OVERWRITE:
            denying = ", ".join(lack.culprits) or "one of the bot's roles"
            why = f"{place} deny it to {denying}"
            fix = f"remove that denial, or allow {permission} for {role} there"
        case LackCause.MEMBER_OVERWRITE:
            why = f"{place} deny it to the bot itself"
            fix = "remove the bot's own entry there"
        case LackCause.TIMED_OUT:
            why = f"the bot is timed out in {bot.guild_name}"
            fix = "remove its timeout (the bot's member menu → Remove Timeout)"
        case LackCause.NO_SEND_MESSAGES:
            why = "it has no Send Messages there, which Discord requires for it"
            fix = "fix Send Messages first"
        case LackCause.NO_VIEW_CHANNEL:  # pragma: no cover - only View Channel is named then
            why = "it cannot see the channel"
            fix = "fix View Channel first"
    return f"{what}: {why}; {fix}"


def webhook_check(
    *, channel: ChannelAccess, guild_name: str, count: int, own: int, guild_id: int
) -> Check:
    """The channel's webhooks (``count``, ``own`` of them the bot's) against Discord's 15: the
    bot makes its own when it has none, and clears its old ones when the channel is full, but
    a channel full of other webhooks leaves it none."""
    name = f"webhooks #{channel.name} ({guild_name})"
    if own or count < MAX_WEBHOOKS_PER_CHANNEL:
        return Check(
            name, True, f"{count} of {MAX_WEBHOOKS_PER_CHANNEL}", guild_id, channel.channel_id
        )
    return Check(
        name,
        False,
        f"{count} of {MAX_WEBHOOKS_PER_CHANNEL}, none of them the bot's, so its other personas "
        f"cannot speak there: delete an unused webhook in #{channel.name} → Edit Channel → "
        "Integrations → Webhooks",
        guild_id,
        channel.channel_id,
    )


@dataclass(frozen=True)
class ModelEndpoint:
    """What ``GET {base_url}/models`` answered: the listed model ids, or the ``error``."""

    base_url: str
    setting: str
    """The variable that names it (``LLM_BASE_URL``, ``LLM_VISION_BASE_URL``…)."""
    listed: frozenset[str] | None = None
    error: str | None = None


@dataclass(frozen=True)
class ModelUse:
    """A model the configuration asks an endpoint for, and who asks (``Tomori``, ``the
    planner``, ``LLM_VISION_MODEL``)."""

    model: str
    endpoint: str
    """The endpoint's ``base_url``."""
    users: tuple[str, ...] = field(default_factory=tuple)


def model_checks(*, endpoints: Sequence[ModelEndpoint], uses: Sequence[ModelUse]) -> list[Check]:
    """Each endpoint answers ``GET /models``; each model the configuration uses is listed by
    its endpoint (models of an endpoint that did not answer are not judged)."""
    checks = []
    by_url = {e.base_url: e for e in endpoints}
    for endpoint in endpoints:
        name = f"model endpoint {endpoint.base_url}"
        if endpoint.error is not None:
            checks.append(
                Check(
                    name,
                    False,
                    f"GET /models failed ({endpoint.error}): check {endpoint.setting} and that "
                    "the server is up (and LLM_API_KEY, if it needs one)",
                )
            )
        else:
            listed = len(endpoint.listed or ())
            checks.append(Check(name, True, f"answers; {listed} model{'s' * (listed != 1)} listed"))
    for use in uses:
        served = by_url.get(use.endpoint)
        if served is None or served.listed is None:
            continue
        who = ", ".join(use.users)
        if use.model in served.listed:
            checks.append(Check(f"model {use.model}", True, f"listed (used by {who})"))
        else:
            checks.append(
                Check(
                    f"model {use.model}",
                    False,
                    f"{served.base_url}/models does not list it (used by {who}): name a model "
                    "it lists on the persona's page, or in the setting that names this one",
                )
            )
    return checks


@dataclass(frozen=True)
class RefusalSeen:
    """Turns Discord refused for want of ``permission`` in a channel, since ``since`` (text)."""

    channel_id: int
    channel_name: str
    permission: str
    turns: int
    still_missing: bool
    """Whether this run's channel checks still find the permission missing there (True when
    the channel was not checked)."""


def refusals_check(*, refusals: Sequence[RefusalSeen], window: str) -> Check:
    """Turns Discord refused with 50001 or 50013 in the last ``window``: a failure while any
    of those permissions is still missing (fixed ones are counted, and pass)."""
    if not refusals:
        return Check("refused turns", True, f"none in the {window}")
    total = sum(r.turns for r in refusals)
    listed = ", ".join(
        f"{r.permission} in #{r.channel_name or r.channel_id} ({r.turns})" for r in refusals
    )
    open_ = [r for r in refusals if r.still_missing]
    turns = f"{total} turn{'s' * (total != 1)} in the {window} refused by Discord: {listed}"
    if not open_:
        return Check("refused turns", True, f"{turns}; fixed since")
    return Check(
        "refused turns",
        False,
        f"{turns}: give the bot those permissions (see the channel lines)",
        channel_id=open_[0].channel_id,
    )
