"""What the loop and the services need from Discord, as protocols.

`DiscordPort` is four smaller ones a service can ask for alone: `HistoryReader` (a channel's
messages), `Directory` (where a channel is, names, roles and stickers), `Speaking` (deliver,
edit, react, typing) and `Attachments`. `chat.gateway.adapter.DiscordAdapter` implements it over
the worker's discord.py client, `chat.gateway.rest.RestDiscordAdapter` over REST alone
(`RestDiscordPort`: the dashboard and Celery), and `chat.leases.FencedPort` wraps the worker's
so that every act first asks the `LeaseFence`; the type checker holds all three to the
protocols. Nothing in the loop or the services imports discord. Discord's own text rules (the
2,000-character message limit, webhook names) belong to the implementation: a service hands over
the whole reply.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from chat.pipeline.permissions import GuildRoles, Overwrite
from chat.pipeline.types import HistoryMessage, NameDirectory
from chat.pipeline.window_reuse import GatewayCacheView

T = TypeVar("T")


@dataclass(frozen=True)
class Speaker:
    """Who delivers a reply: the main persona speaks as the bot account, others by webhook."""

    persona_id: int
    name: str
    is_main: bool
    avatar_url: str = ""


@dataclass(frozen=True)
class Delivered:
    """One sent message; ``message`` is None when Discord returned no full object.

    ``author_id`` is the account Discord shows as its author (the bot user, or the webhook's
    id for a webhook message) and ``webhook_id`` the webhook that sent it, if any.
    """

    message_id: int
    message: HistoryMessage | None
    author_id: int | None = None
    webhook_id: int | None = None


@dataclass(frozen=True)
class ChannelPlace:
    """Where Discord says a channel is: in a guild (``guild_id``), or a DM (None); ``nsfw``
    when Discord marks it age-restricted (a thread: when its parent is)."""

    guild_id: int | None
    nsfw: bool = False

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None


MISSING_ACCESS = 50001
MISSING_PERMISSIONS = 50013


@dataclass(frozen=True)
class DiscordRefusal:
    """Discord refused an act of the bot in a channel for want of a permission: ``code`` is
    Discord's (50001 Missing Access: it cannot see the channel; 50013 Missing Permissions),
    ``permission`` the one it lacks by name (``Send Messages``), and the channel by id and
    name (``channel_name`` empty when unknown). For a thread, the channel is the thread and
    the permissions are its parent's."""

    code: int
    permission: str
    channel_id: int
    channel_name: str = ""

    @property
    def reason(self) -> str:
        return "Missing Access" if self.code == MISSING_ACCESS else "Missing Permissions"

    @property
    def channel_label(self) -> str:
        return f"#{self.channel_name}" if self.channel_name else f"channel {self.channel_id}"

    def __str__(self) -> str:
        return (
            f"Discord refused ({self.code} {self.reason}): the bot lacks {self.permission} "
            f"in {self.channel_label}"
        )

    def as_record(self) -> dict[str, Any]:
        """As a turn keeps it (`chat.models.Turn.discord_refusal`)."""
        return {
            "code": self.code,
            "reason": self.reason,
            "permission": self.permission,
            "channel_id": str(self.channel_id),
            "channel_name": self.channel_name,
        }


class DeliveryError(Exception):
    """Discord refused or failed a delivery; ``permanent`` errors are not worth retrying.
    ``refusal`` says which permission the bot lacked, in which channel, when Discord refused
    with 50001 or 50013 (None for any other failure)."""

    def __init__(
        self, message: str, *, permanent: bool, refusal: DiscordRefusal | None = None
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.refusal = refusal


class HistoryReader(Protocol):
    """What the bot reads of a channel's messages: history over REST, the gateway cache, single
    messages, a thread's starter, and where a channel is."""

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        """The channel's newest ``limit`` messages over REST, in any order."""
        ...

    async def fetch_history_before(
        self, channel_id: int, before_id: int, limit: int
    ) -> list[HistoryMessage]:
        """Up to ``limit`` messages older than ``before_id`` over REST, in any order (the
        context of an old queued trigger). Raises DeliveryError when the channel cannot be
        read."""
        ...

    async def fetch_history_after(
        self, channel_id: int, after_id: int, limit: int
    ) -> list[HistoryMessage]:
        """Up to ``limit`` messages newer than ``after_id`` over REST, oldest first (catch-up).
        Raises DeliveryError when the channel cannot be read."""
        ...

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        """What the gateway cache holds for the channel, oldest first."""
        ...

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        """One message over REST; None when it is gone or cannot be read."""
        ...

    async def thread_starter(self, channel_id: int) -> HistoryMessage | None:
        """When the channel is a thread: the message it was started from (fetched from the
        parent channel with the thread's id; a forum post's own first message); None for any
        other channel, or when that message is gone."""
        ...

    async def superseded_originals(self, messages: Sequence[HistoryMessage]) -> frozenset[int]:
        """Those of ``messages`` that a proxy system (PluralKit-style) replaced with a proxied
        member's message and deleted: they are never answered. Empty without a proxy system."""
        ...

    async def locate_channel(self, channel_id: int) -> ChannelPlace | None:
        """Which guild the channel belongs to, or that it is a DM, and whether it is marked
        NSFW, as Discord says (gateway cache first, then REST); None when Discord cannot tell
        (unknown or unreadable)."""
        ...


class Directory(Protocol):
    """Names and stickers, as the gateway cache (or a REST process's loaded directory) knows
    them."""

    @property
    def bot_user_id(self) -> int:
        """The bot account's user id."""
        ...

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        """Display names for members, and channel and role names, from the gateway cache."""
        ...

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        """The guild's own stickers as (id, name), from the gateway cache; empty when it has
        none or the guild is not cached."""
        ...


class Speaking(Protocol):
    """The bot's acts in a channel: typing, sending as a persona, editing, reacting, stickers,
    and finding what it already sent (after a crash). A worker's acts are fenced by its shard
    lease (`chat.leases.FencedPort`)."""

    def typing(self, channel_id: int) -> AbstractAsyncContextManager[None]:
        """Show the typing indicator while the block runs."""
        ...

    async def deliver(
        self,
        *,
        channel_id: int,
        speaker: Speaker,
        text: str,
        reply_to: int | None,
        notice: str | None = None,
        nonce_seed: str | None = None,
        as_notice: bool = False,
    ) -> list[Delivered]:
        """Send ``text`` as ``speaker``, split into as many messages as Discord needs; the
        first replies to ``reply_to`` when the speaker can reply natively (the bot account),
        else ``notice`` is sent first. Returns the sent messages in order. Raises
        DeliveryError.

        Notices (``notice``, and ``text`` itself with ``as_notice``: a failure notice) are the
        product talking, not the speaker: they are sent silent (Discord's
        SUPPRESS_NOTIFICATIONS flag), which is how history tells them from the speaker's lines
        (`HistoryMessage.is_notice`), after a restart too.

        With ``nonce_seed`` every message the bot account sends carries a nonce derived from
        it and its position, with Discord's ``enforce_nonce``: sending the same reply again
        within a few minutes returns the messages already sent instead of posting twice.
        (Webhooks take no nonce; `find_delivery` covers them after a crash.)"""
        ...

    async def edit_message(
        self, *, channel_id: int, speaker: Speaker, message_id: int, text: str
    ) -> None:
        """Replace the text of a message ``speaker`` sent (at most 2,000 characters: the
        caller cuts). Raises DeliveryError."""
        ...

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        """Add a reaction; raises DeliveryError."""
        ...

    async def send_sticker(
        self, *, channel_id: int, speaker: Speaker, sticker_id: int
    ) -> Delivered:
        """Send one of the guild's stickers as its own message through the bot account
        (webhooks cannot send stickers, so ``speaker`` must be the main persona). Raises
        DeliveryError."""
        ...

    async def find_delivery(
        self, *, channel_id: int, speaker: Speaker, reply_to: int, limit: int = 50
    ) -> list[Delivered]:
        """What ``speaker`` already sent in answer to ``reply_to``, oldest first, read from
        Discord (the first ``limit`` messages after it): for the bot account, its native reply
        and the pieces that follow it; for a webhook persona, this bot's webhook messages under
        the persona's name. Empty when nothing was sent. Raises DeliveryError when Discord
        cannot be read."""
        ...


class Attachments(Protocol):
    """Attachment files: their signed URLs renewed and their bytes read."""

    async def refresh_attachment_urls(self, urls: Sequence[str]) -> dict[str, str]:
        """Signed anew, each of ``urls`` whose file still exists: original → refreshed URL
        (Discord's ``POST /attachments/refresh-urls``); raises DeliveryError."""
        ...

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        """The first ``max_bytes`` of an attachment; raises DeliveryError."""
        ...


class DiscordPort(HistoryReader, Directory, Speaking, Attachments, Protocol):
    """Everything the loop and the services need from Discord: the four parts above.
    `chat.gateway.adapter.DiscordAdapter` implements it over discord.py."""


class LeaseLost(Exception):
    """This worker no longer holds the shard lease of the guild it was about to act in: another
    worker may own it now, so nothing is sent, reacted or recorded (`LeaseFence`)."""


class LeaseFence(Protocol):
    """Asked before every act with side effects (a send, an edit, a reaction, a planner step):
    raises `LeaseLost` unless this worker still holds the lease of ``guild_id``'s shard (None: a
    DM, on shard 0) under the fencing token it was given when it took the lease."""

    async def check(self, guild_id: int | None) -> None: ...


class Unfenced:
    """The fence of a process that owns no shards (a dry run, the dashboard, Celery): always
    passes."""

    async def check(self, guild_id: int | None) -> None:
        return None


UNFENCED = Unfenced()


class DiscordUnavailable(Exception):
    """No Discord to read: no token is configured, or logging in failed."""


class TokenRefused(DiscordUnavailable):
    """Discord answered 401 Unauthorized: the token is wrong or was reset."""


class DiscordReadRefused(Exception):
    """Discord answered a read with an error: ``status`` and Discord's ``code`` (0 unknown)."""

    def __init__(self, message: str, *, status: int, code: int) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class BotApplication:
    """The bot's application (``GET /applications/@me``): its id (the invite's
    ``client_id``), name and ``flags`` (which privileged intents are switched on), and the bot
    user's name."""

    id: int
    name: str
    flags: int
    bot_name: str


@dataclass(frozen=True)
class ChannelLayout:
    """A guild channel as ``GET /guilds/{id}/channels`` describes it: ``kind`` is ``text``,
    ``forum``, ``category``, ``thread`` or ``other``; ``parent_id`` its category (a thread's:
    its channel); ``overwrites`` its own permission overwrites; ``synced`` whether they are its
    category's (then they are edited there)."""

    id: int
    name: str
    kind: str
    parent_id: int | None
    overwrites: tuple[Overwrite, ...]
    synced: bool = False


@dataclass(frozen=True)
class GuildLayout:
    """What decides the bot's permissions in a guild: its owner and roles, the bot's roles
    and timeout, every channel."""

    guild_id: int
    name: str
    roles: GuildRoles
    bot_role_ids: tuple[int, ...]
    bot_role_name: str
    """The role Discord made for the bot when it joined (else its highest role's name)."""
    bot_timed_out_until: dt.datetime | None
    channels: tuple[ChannelLayout, ...]


@dataclass(frozen=True)
class WebhookCount:
    """The webhooks of a channel: how many, and how many of them the bot made."""

    total: int
    own: int


class DiscordDeployment(Protocol):
    """What `manage.py doctor` reads from Discord about the deployment (over REST, logged in
    with the bot's token). Reads raise `DiscordReadRefused` when Discord answers an error."""

    intents: int
    """The gateway intents the worker asks for."""
    bot_user_id: int
    command_names: frozenset[str]
    """The names of the slash and context-menu commands the worker registers."""

    async def application(self) -> BotApplication: ...

    async def bot_guilds(self) -> dict[int, str]:
        """The guilds the bot is in, by id, with their names."""
        ...

    async def guild_layout(self, guild_id: int) -> GuildLayout: ...

    async def webhook_count(self, channel_id: int) -> WebhookCount: ...

    async def registered_commands(self, guild_id: int | None) -> frozenset[str]:
        """The names of the commands registered in the guild (None: globally)."""
        ...


class RestDiscordPort(DiscordPort, Protocol):
    """A `DiscordPort` over REST alone, for processes that hold no gateway (Celery's memory
    maintenance, the dashboard's prompt preview): no gateway cache, so names come from what
    `load_directory` fetched and from the messages' own author payloads."""

    async def load_directory(self, guild_id: int) -> None:
        """Fetch the guild's channel and role names and its stickers (once per guild); a
        failure leaves them unknown."""
        ...

    async def member_name(self, *, guild_id: int, user_id: int) -> str | None:
        """The name Discord shows for ``user_id`` in the guild (nick, else global name, else
        user name); None when the user cannot be read."""
        ...


class SandboxRefused(Exception):
    """The local Discord sandbox refused a control request (the message says why)."""


class SandboxControl(Protocol):
    """The local Discord sandbox's control API (`chat.sandbox.control`): its world, and
    messages posted as a demo user. Only the sandbox has one; the real Discord has none."""

    async def world(self) -> dict[str, Any]:
        """The guilds, channels and members the sandbox holds. Raises `SandboxRefused`."""
        ...

    async def say(self, channel_id: int, author_id: int, content: str) -> dict[str, Any]:
        """Post ``content`` as ``author_id``; returns the message. Raises `SandboxRefused`."""
        ...

    async def run_command(
        self,
        channel_id: int,
        author_id: int,
        name: str,
        options: dict[str, Any],
        *,
        target_message_id: int | None = None,
    ) -> dict[str, Any]:
        """Run a slash command (``memory add``) or, with ``target_message_id``, a message
        command as ``author_id``; returns the interaction and the bot's answers once answered
        (or after 5 s). Raises `SandboxRefused` (an unknown command, a missing option…)."""
        ...


MESSAGE_FETCH_CONCURRENCY = 4
"""How many single-message reads one caller has in flight at a time (reply targets, a recorded
window read again)."""


async def messages_fetch(
    port: DiscordPort, wanted: Sequence[tuple[int, int]]
) -> list[HistoryMessage | None]:
    """Each (channel id, message id) of ``wanted`` read over REST, in order, at most
    `MESSAGE_FETCH_CONCURRENCY` at a time; None where a message is gone or cannot be read."""
    return await reads_at_most(
        MESSAGE_FETCH_CONCURRENCY,
        [functools.partial(port.fetch_message, c, m) for c, m in wanted],
    )


async def reads_at_most(limit: int, reads: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``reads`` (calls to Discord through the port) concurrently, at most ``limit`` in
    flight at a time; their results in order. What a read raises is raised."""
    gate = asyncio.Semaphore(limit)

    async def bounded(read: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await read()

    return list(await asyncio.gather(*(bounded(read) for read in reads)))
