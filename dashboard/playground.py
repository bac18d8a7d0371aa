"""The playground's link to the local Discord sandbox, through its control API (the
`SandboxControl` port of `chat.runtime`), and its conversation: the channel's messages read
over the REST port, as a chat.

The sandbox is where ``DISCORD_API_BASE`` points when it runs (``make run`` without a
``DISCORD_TOKEN``): its control API answers at the same host under ``/_sandbox``. Against the
real Discord there is no control API, and the playground is not offered.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl
from asgiref.sync import sync_to_async

from chat import selectors as chat_selectors
from chat.pipeline.types import HistoryMessage
from chat.ports import DeliveryError, DiscordUnavailable, SandboxRefused
from chat.runtime import discord_rest_port, sandbox_control
from dashboard import selectors
from dashboard.names import NameBook

PROBE_SECONDS = 2.0


class SandboxUnavailable(Exception):
    """The sandbox did not take the message (not running, or it refused)."""


def control_base(api_base: str) -> str:
    """The sandbox's base URL for a REST base such as ``http://127.0.0.1:8765/api/v10``."""
    url = yarl.URL(api_base)
    return str(url.with_path("/").with_query(None)).rstrip("/")


LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


async def sandbox_world(api_base: str) -> dict[str, Any] | None:
    """The sandbox's world (guilds, channels, members); None when no sandbox answers. Only a
    loopback ``api_base`` is asked (the sandbox binds to localhost; Discord has no such API)."""
    if yarl.URL(api_base).host not in LOOPBACK:
        return None
    try:
        async with asyncio.timeout(PROBE_SECONDS), sandbox_control(control_base(api_base)) as api:
            return await api.world()
    except (TimeoutError, OSError, aiohttp.ClientError, SandboxRefused, ValueError):
        return None  # nothing answers, or something that is not the sandbox


async def say(api_base: str, channel_id: int, author_id: int, content: str) -> dict[str, Any]:
    """Post ``content`` as ``author_id`` in the sandbox channel; returns the message.

    Raises `SandboxUnavailable` when the sandbox is gone or refuses."""
    try:
        async with sandbox_control(control_base(api_base)) as api:
            return await api.say(channel_id, author_id, content)
    except SandboxRefused as error:
        raise SandboxUnavailable(f"the sandbox refused: {error}") from None
    except (OSError, aiohttp.ClientError) as error:
        raise SandboxUnavailable(f"the sandbox is not reachable: {error}") from None


async def run_command(
    api_base: str,
    channel_id: int,
    author_id: int,
    command: str,
    options: dict[str, str],
    *,
    target_message_id: int | None = None,
) -> dict[str, Any]:
    """Run the slash command as ``author_id`` in the sandbox channel; returns the interaction
    with the bot's answers (the control API's record), once answered or after 5 seconds.

    Raises `SandboxUnavailable` when the sandbox is gone or refuses (an unknown command, a
    missing option: its message says which)."""
    try:
        async with sandbox_control(control_base(api_base)) as api:
            return await api.run_command(
                channel_id, author_id, command, options, target_message_id=target_message_id
            )
    except SandboxRefused as error:
        raise SandboxUnavailable(f"the sandbox refused: {error}") from None
    except (OSError, aiohttp.ClientError) as error:
        raise SandboxUnavailable(f"the sandbox is not reachable: {error}") from None


_OPTION = re.compile(r"(?:^|\s)([a-z_]+):")


def parse_command(text: str) -> tuple[str, dict[str, str], int | None]:
    """A command typed as in Discord: ``/memory add text: I like tea``, ``/privacy level:full``,
    or the message command ``Why (not)? message:<id>``. Returns (name with subcommands,
    options, target message id). Raises ValueError saying what is wrong."""
    text = text.strip().removeprefix("/").strip()
    if not text:
        raise ValueError("type a command, e.g. /persona list")
    found = list(_OPTION.finditer(text))
    name = " ".join((text[: found[0].start()] if found else text).split())
    options: dict[str, str] = {}
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(text)
        options[match.group(1)] = text[match.end() : end].strip()
    if not name:
        raise ValueError(f"{text!r} names no command")
    target = None
    if "message" in options and name.lower().startswith("why"):
        raw = options.pop("message")
        if not raw.isdigit():
            raise ValueError(f"message:{raw} is not a message id")
        target = int(raw)
    elif name.lower().startswith("why"):
        raise ValueError("Why (not)? needs the message: Why (not)? message:<message id>")
    return name, options, target


def channels(world: dict[str, Any]) -> list[tuple[int, str]]:
    """(channel id, ``Guild · #name``) of every sandbox text channel."""
    return [
        (int(c["id"]), f"{g['name']} · #{c['name']}")
        for g in world.get("guilds", [])
        for c in g.get("channels", [])
    ]


def users(world: dict[str, Any]) -> list[tuple[int, str]]:
    """(user id, name) of the demo users (the bot excluded), in the sandbox's order."""
    seen: dict[int, str] = {}
    for guild in world.get("guilds", []):
        for member in guild.get("members", []):
            user = member["user"]
            if user.get("bot"):
                continue
            seen.setdefault(int(user["id"]), user.get("global_name") or user["username"])
    return list(seen.items())


# -- the conversation ------------------------------------------------------------------------

CHAT_MESSAGES = 50
"""How many of the channel's newest messages the playground shows."""


@dataclass(frozen=True)
class ChatLine:
    """One message of the playground's conversation as the channel shows it: ``author`` the
    shown name (a persona's, a proxied member's, a person's; "a user with full privacy" for
    one), ``persona`` whether one of the bot's personas spoke it, ``proxied_for`` the account a
    proxied member speaks for, ``text`` None when the author's words are never shown (full
    privacy, blacklisted), ``reply_to`` who and what it answers."""

    message_id: int
    author: str
    author_id: int
    avatar_url: str
    persona: bool
    proxied_for: str
    hidden: bool
    created_at: dt.datetime
    text: str | None
    reply_to: str
    attachments: tuple[str, ...]

    @property
    def initial(self) -> str:
        return (self.author.strip()[:1] or "?").upper()

    @property
    def hue(self) -> int:
        """A stable colour for the author's initial badge."""
        return sum(self.author.encode()) * 37 % 360


@dataclass(frozen=True)
class Chat:
    """The conversation (oldest first), or why it cannot be read (``error``)."""

    lines: tuple[ChatLine, ...] = ()
    error: str = ""


async def playground_chat(*, channel_id: int, limit: int = CHAT_MESSAGES) -> Chat:
    """The channel's newest ``limit`` messages, read from Discord (the sandbox) over the REST
    port the way the worker reads them, as `ChatLine`s."""
    try:
        async with discord_rest_port() as port:
            messages = await port.fetch_history(channel_id, limit)
    except DiscordUnavailable as error:
        return Chat(error=str(error))
    except DeliveryError as error:
        return Chat(error=f"the channel cannot be read: {error}")
    ordered = sorted(messages, key=lambda m: m.id)
    return Chat(lines=tuple(await sync_to_async(chat_lines)(messages=ordered)))


def chat_lines(*, messages: list[HistoryMessage]) -> list[ChatLine]:
    """``messages`` as the playground shows them: personas with their configured avatars,
    people with theirs (kept from the gateway), users with full privacy (or blacklisted)
    without their words."""
    book = NameBook()
    accounts = {m.accountable_user_id for m in messages}
    book.prefetch_users(accounts)
    known = chat_selectors.channel_guild_id(channel_id=messages[0].channel_id) if messages else None
    standing = chat_selectors.user_standing(
        user_ids=accounts, guild_id=known.guild_id if known else None
    )
    persona_names = {m.author.persona_name for m in messages if m.author.persona_name}
    avatars = selectors.persona_avatars(names=persona_names)
    by_id = {m.id: m for m in messages}
    lines = []
    for message in messages:
        account = book.user(message.accountable_user_id)
        hidden = account.hidden or message.accountable_user_id in standing.blacklisted
        persona = message.author.persona_name
        if persona:
            author, avatar = persona, avatars.get(persona, "")
        elif account.hidden:
            author, avatar = account.text, ""
        else:
            author = message.shown_name
            avatar = account.avatar_url if message.proxy is None else ""
        lines.append(
            ChatLine(
                message_id=message.id,
                author=author,
                author_id=message.accountable_user_id,
                avatar_url=avatar,
                persona=persona is not None,
                proxied_for=account.text if message.proxy is not None and not hidden else "",
                hidden=hidden,
                created_at=message.created_at,
                text=None if hidden else message.content,
                reply_to=_reply_label(message, by_id, book),
                attachments=tuple(a.filename for a in message.attachments),
            )
        )
    return lines


def _reply_label(message: HistoryMessage, by_id: dict[int, HistoryMessage], book: NameBook) -> str:
    if message.reference is None:
        return ""
    target = by_id.get(message.reference.message_id)
    if target is None:
        return "an earlier message"
    if book.user(target.accountable_user_id).hidden:
        return book.user(target.accountable_user_id).text
    words = " ".join(target.content.split())
    excerpt = words if len(words) <= 60 else words[:59].rstrip() + "…"
    return f"{target.shown_name}: {excerpt}" if excerpt else target.shown_name
