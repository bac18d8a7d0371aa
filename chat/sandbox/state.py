"""The sandbox's Discord world: users, guilds, text channels, messages, reactions and webhooks.

`Sandbox` is the single source of truth behind the REST routes, the gateway and the control
surface. Every operation validates like Discord (raising `DiscordAPIError`), changes the
world, publishes the matching gateway event to its subscribers, and returns the REST payload.
It is plain synchronous code with no I/O: use it from the event loop that serves it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from chat.pipeline.snowflakes import snowflake_time
from chat.sandbox.errors import (
    DiscordAPIError,
    ErrorCode,
    FieldErrors,
    invalid_form_body,
    unknown,
)
from chat.sandbox.interactions import Interactions
from chat.sandbox.oauth import OAuthGrants
from chat.sandbox.payloads import (
    attachment_payload,
    channel_payload,
    dm_channel_payload,
    guild_create_payload,
    guild_payload,
    member_payload,
    role_payload,
    sticker_payload,
    thread_payload,
    user_payload,
    webhook_payload,
)
from chat.sandbox.records import (
    MEMBER_OVERWRITE_TYPE,
    ROLE_OVERWRITE_TYPE,
    Attachment,
    Channel,
    Guild,
    GuildRole,
    GuildSticker,
    Member,
    Message,
    PermissionOverwrite,
    Upload,
    User,
    Webhook,
    WebhookAuthor,
)
from chat.sandbox.schemas import AllowedMentions, HistoryQuery, MessageReference
from chat.sandbox.snowflake import SnowflakeGenerator, iso_timestamp

ADMINISTRATOR = 1 << 3
ALL_PERMISSIONS = (1 << 51) - 1
"""What an administrator (or the guild's owner) holds: every permission bit Discord defines."""
EVERYONE_PERMISSIONS = (
    (1 << 0)  # create instant invite
    | (1 << 6)  # add reactions
    | (1 << 10)  # view channel
    | (1 << 11)  # send messages
    | (1 << 14)  # embed links
    | (1 << 15)  # attach files
    | (1 << 16)  # read message history
    | (1 << 18)  # use external emojis
    | (1 << 26)  # change nickname
)
APPLICATION_FLAGS = (1 << 12) | (1 << 14) | (1 << 18)
"""GATEWAY_PRESENCE, GATEWAY_GUILD_MEMBERS, GATEWAY_MESSAGE_CONTENT: every privileged intent
granted, so a bot may ask for any intent (the default; `Sandbox.set_application_flags`)."""
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
SEND_TTS_MESSAGES = 1 << 12
MANAGE_MESSAGES = 1 << 13
EMBED_LINKS = 1 << 14
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
MENTION_EVERYONE = 1 << 17
ADD_REACTIONS = 1 << 6
MANAGE_WEBHOOKS = 1 << 29
SEND_MESSAGES_IN_THREADS = 1 << 38
MAX_CONTENT_LENGTH = 2000
NONCE_WINDOW_SECONDS = 300.0
"""How long Discord dedupes an `enforce_nonce` send by the same author (a few minutes)."""
MAX_EMBEDS = 10
MAX_WEBHOOKS_PER_CHANNEL = 15
SENDABLE_MESSAGE_FLAGS = (1 << 2) | (1 << 12)  # SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS
ATTACHMENT_URL_LIFETIME = 86_400.0
_ATTACHMENT_PATH = re.compile(r"/attachments/\d+/(?P<attachment_id>\d+)/")
MESSAGE_TYPE_DEFAULT = 0
MESSAGE_TYPE_REPLY = 19
MESSAGE_TYPE_THREAD_STARTER = 21


@dataclass(frozen=True, slots=True)
class ProxyMember:
    """A member of a proxy system (PluralKit-style): who they belong to and how they speak."""

    sender_id: int
    member_id: str
    name: str
    prefix: str


_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_EVERYONE_MENTION = re.compile(r"@(everyone|here)\b")


@dataclass(frozen=True, slots=True)
class GatewayEvent:
    """A dispatch for the gateway: event `name`, its `data`, and the guild it belongs to."""

    name: str
    data: Mapping[str, Any]
    guild_id: int | None
    """None for a DM's events (Discord sends them on shard 0)."""


EventListener = Callable[[GatewayEvent], None]


def avatar_hash(avatar_url: str) -> str:
    """The avatar "hash" a webhook message shows for an `avatar_url` override.

    Discord would fetch the image and store it under a hash; the sandbox has no CDN for
    avatars, so the hash is derived from the URL and tests compare against this function.
    """
    return hashlib.sha256(avatar_url.encode()).hexdigest()[:32]


class Sandbox:
    """A Discord world for one bot account.

    Construction creates the bot user (whose id is also the application id, as for modern
    Discord applications). Build the world with `add_user`, `add_guild`, `add_text_channel`
    and `add_member`; then act in it as users (`user_says`, `user_edits`, …) or through the
    operations the REST routes call. Subscribers (the gateway) receive a `GatewayEvent` for
    every change, synchronously, in order.
    """

    def __init__(
        self,
        *,
        token: str = "sandbox-bot-token",
        bot_name: str = "Sandbox Bot",
        bot_user_id: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token = token
        self.cdn_base_url = "http://127.0.0.1"
        """Where attachment URLs point; the server sets it to its own address."""
        self.attachment_url_lifetime = ATTACHMENT_URL_LIFETIME
        """Seconds a signed attachment URL works (Discord's last about a day); a URL is signed
        when the file is uploaded and again when it is refreshed (`refresh_attachment_urls`)."""
        self._url_secret = secrets.token_bytes(16)
        self._attachment_expiry: dict[int, int] = {}
        self._clock = clock
        self._snowflakes = SnowflakeGenerator(clock=clock)
        self._users: dict[int, User] = {}
        self._guilds: dict[int, Guild] = {}
        self._channels: dict[int, Channel] = {}
        self._dms: dict[int, int] = {}
        """The DM channel with each user, by user id."""
        self._webhooks: dict[int, Webhook] = {}
        self._attachments: dict[int, Attachment] = {}
        self._listeners: list[EventListener] = []
        self._nonces: dict[tuple[int, str], tuple[int, float]] = {}
        self._link_previews: dict[str, dict[str, Any]] = {}
        self._proxy_members: list[ProxyMember] = []
        self._proxy_webhooks: dict[int, Webhook] = {}
        self._proxy_records: dict[int, dict[str, Any]] = {}
        self._shown_texts: dict[int, list[tuple[int, str]]] = {}
        self.proxy_bot_id: int | None = None
        self.application_flags = APPLICATION_FLAGS
        """The application's ``flags``: which privileged intents it may ask for; an IDENTIFY
        asking for one it may not is closed with 4014 (`set_application_flags`)."""
        self.bot_user_id = self.add_user(bot_name, user_id=bot_user_id, bot=True)
        self.interactions = Interactions(self)
        """Application commands and the interactions users start (`Interactions`)."""
        self.oauth = OAuthGrants(self, clock=clock)
        """The OAuth2 codes and tokens people got to log in elsewhere (`OAuthGrants`)."""

    def add_link_preview(
        self, url: str, *, title: str, description: str = "", kind: str = "article"
    ) -> None:
        """Unfurl ``url`` like Discord does for a page with OpenGraph tags: a message (anyone's,
        the bot's included) whose content holds it gets a preview embed of type ``kind`` right
        after it is posted, dispatched as a MESSAGE_UPDATE."""
        self._link_previews[url] = {
            "type": kind,
            "url": url,
            "title": title,
            "description": description,
        }

    def add_proxy_member(self, sender_id: int, *, member_id: str, name: str, prefix: str) -> None:
        """A PluralKit-style proxy bot speaks for ``sender_id``'s member ``name``: a message of
        theirs that starts with ``prefix`` is reposted without it through the proxy bot's
        webhook in that channel, shown as the member, then the original is deleted (both
        dispatched, as Discord does). The proxy system's API (`proxy_record`) then knows both
        ids. The proxy bot joins the world on first use."""
        if self.proxy_bot_id is None:
            self.proxy_bot_id = self.add_user("PluralKit", bot=True)
        self._proxy_members.append(ProxyMember(sender_id, member_id, name, prefix))

    def proxy_record(self, message_id: int) -> dict[str, Any] | None:
        """What PluralKit's ``GET /v2/messages/{id}`` answers for a proxied message or its
        original: the ids, the sender, and the member; None (a 404) for any other message."""
        return self._proxy_records.get(message_id)

    # ----------------------------------------------------------------- building the world

    def add_user(
        self,
        username: str,
        *,
        user_id: int | None = None,
        bot: bool = False,
        global_name: str | None = None,
    ) -> int:
        """Create a user (not yet in any guild) and return its id."""
        user_id = user_id or self._snowflakes.next_id()
        discriminator = f"{user_id % 10_000:04d}" if bot else "0"
        self._users[user_id] = User(user_id, username, bot, global_name, discriminator)
        return user_id

    def add_guild(
        self,
        name: str,
        *,
        guild_id: int | None = None,
        owner_id: int | None = None,
        bot_permissions: int = ADMINISTRATOR,
        bot_joined: bool = True,
    ) -> int:
        """Create a guild with its @everyone role and the bot as a member, holding the role
        Discord makes for a bot it adds (``bot_permissions``: what the invite asked for);
        dispatches GUILD_CREATE, as when a bot joins. The owner is the bot unless ``owner_id``
        (a user, made a member) says otherwise. Without ``bot_joined`` the bot is not in it
        (nothing is dispatched; its REST reads answer 403 50001)."""
        guild_id = guild_id or self._snowflakes.next_id()
        if owner_id is None and not bot_joined:
            raise ValueError("a guild the bot is not in needs another owner")
        guild = Guild(guild_id, name, owner_id=owner_id or self.bot_user_id)
        guild.roles[guild_id] = GuildRole(guild_id, "@everyone", EVERYONE_PERMISSIONS, position=0)
        if owner_id is not None and owner_id != self.bot_user_id:
            self._user(owner_id)
            guild.members[owner_id] = Member(owner_id, self._now())
        self._guilds[guild_id] = guild
        if bot_joined:
            bot_role_id = self._snowflakes.next_id()
            bot_name = self._users[self.bot_user_id].username
            guild.roles[bot_role_id] = GuildRole(
                bot_role_id, bot_name, bot_permissions, 1, self.bot_user_id
            )
            guild.members[self.bot_user_id] = Member(
                self.bot_user_id, self._now(), None, [bot_role_id]
            )
            self._publish("GUILD_CREATE", self.guild_create(guild_id, joined=True), guild_id)
        return guild_id

    def bot_role_id(self, guild_id: int) -> int:
        """The role Discord made for the bot when it joined the guild (its "managed" role)."""
        guild = self._guild(guild_id)
        return next(r.id for r in guild.roles.values() if r.bot_id == self.bot_user_id)

    def add_guild_sticker(self, guild_id: int, name: str, *, tags: str = "🙂") -> int:
        """Give the guild a sticker; dispatches GUILD_STICKERS_UPDATE with all its stickers."""
        guild = self._guild(guild_id)
        sticker_id = self._snowflakes.next_id()
        guild.stickers[sticker_id] = GuildSticker(sticker_id, name, tags)
        stickers = [sticker_payload(s, guild_id) for s in guild.stickers.values()]
        self._publish(
            "GUILD_STICKERS_UPDATE", {"guild_id": str(guild_id), "stickers": stickers}, guild_id
        )
        return sticker_id

    def add_text_channel(
        self,
        guild_id: int,
        name: str,
        *,
        channel_id: int | None = None,
        topic: str | None = None,
        category_id: int | None = None,
        nsfw: bool = False,
    ) -> int:
        """Create a text channel at the end of the guild's list (in ``category_id``, synced
        with its overwrites, as Discord creates it there; ``nsfw``: marked age-restricted);
        dispatches CHANNEL_CREATE."""
        guild = self._guild(guild_id)
        channel_id = channel_id or self._snowflakes.next_id()
        channel = Channel(
            channel_id, guild_id, name, position=len(guild.channels), topic=topic, nsfw=nsfw
        )
        if category_id is not None:
            category = self._channel(category_id)
            if not category.is_category or category.guild_id != guild_id:
                raise unknown(ErrorCode.UNKNOWN_CHANNEL)
            channel.category_id, channel.synced = category_id, True
            channel.overwrites = dict(category.overwrites)
        guild.channels[channel_id] = self._channels[channel_id] = channel
        self._publish("CHANNEL_CREATE", channel_payload(channel), guild_id)
        return channel_id

    def add_category(self, guild_id: int, name: str) -> int:
        """Create a category (type 4) for channels to sit in; dispatches CHANNEL_CREATE."""
        guild = self._guild(guild_id)
        category_id = self._snowflakes.next_id()
        category = Channel(
            category_id, guild_id, name, position=len(guild.channels), is_category=True
        )
        guild.channels[category_id] = self._channels[category_id] = category
        self._publish("CHANNEL_CREATE", channel_payload(category), guild_id)
        return category_id

    def set_overwrite(
        self,
        channel_id: int,
        target_id: int,
        *,
        member: bool = False,
        allow: int = 0,
        deny: int = 0,
    ) -> None:
        """Set the channel's (or category's) overwrite for a role (the guild's id: @everyone)
        or, with ``member``, a member; allow and deny both 0 removes it. On a channel this
        ends its sync with the category; on a category it reaches every channel synced with
        it. Dispatches CHANNEL_UPDATE for each channel changed."""
        channel = self._channel(channel_id)
        if channel.guild_id is None or channel.parent_id is not None:
            raise DiscordAPIError(400, ErrorCode.INVALID_FORM_BODY, "Invalid Form Body")
        changed = [channel]
        if channel.is_category:
            changed += [
                c
                for c in self._guild(channel.guild_id).channels.values()
                if c.category_id == channel.id and c.synced
            ]
        else:
            channel.synced = False
        for target in changed:
            if allow or deny:
                kind = MEMBER_OVERWRITE_TYPE if member else ROLE_OVERWRITE_TYPE
                target.overwrites[target_id] = PermissionOverwrite(target_id, kind, allow, deny)
            else:
                target.overwrites.pop(target_id, None)
            self._publish("CHANNEL_UPDATE", channel_payload(target), target.guild_id)

    def open_dm(self, user_id: int) -> int:
        """The DM channel between the bot and ``user_id`` (`POST /users/@me/channels`): the
        existing one, or a new one. A DM belongs to no guild, so its events go to shard 0."""
        self._user(user_id)
        if user_id not in self._dms:
            channel = Channel(self._snowflakes.next_id(), None, "", 0, recipient_id=user_id)
            self._channels[channel.id] = channel
            self._dms[user_id] = channel.id
        return self._dms[user_id]

    def add_forum_channel(self, guild_id: int, name: str) -> int:
        """Create a forum channel (posts only, each a thread); dispatches CHANNEL_CREATE."""
        guild = self._guild(guild_id)
        channel_id = self._snowflakes.next_id()
        channel = Channel(channel_id, guild_id, name, position=len(guild.channels), is_forum=True)
        guild.channels[channel_id] = self._channels[channel_id] = channel
        self._publish("CHANNEL_CREATE", channel_payload(channel), guild_id)
        return channel_id

    def start_forum_post(self, forum_id: int, author_id: int, *, name: str, content: str) -> int:
        """``author_id`` opens a post in forum ``forum_id``, as Discord does: a thread whose
        first message (the post's text) has the thread's id; dispatches THREAD_CREATE and that
        MESSAGE_CREATE. Returns the post's (thread's) id."""
        forum = self._channel(forum_id)
        guild = self._guild(forum.guild_id)
        self._member(guild, author_id)
        post_id = self._snowflakes.next_id()
        thread = Channel(
            post_id, guild.id, name, position=0, parent_id=forum_id, owner_id=author_id
        )
        guild.threads[post_id] = self._channels[post_id] = thread
        self._publish("THREAD_CREATE", {**thread_payload(thread), "newly_created": True}, guild.id)
        first = Message(
            id=post_id,
            channel_id=post_id,
            guild_id=guild.id,
            author_id=author_id,
            content=content,
            embeds=[],
            attachments=[],
            mention_ids=[],
            mention_role_ids=[],
            mention_everyone=False,
        )
        thread.messages[first.id] = first
        thread.last_message_id = first.id
        self._publish("MESSAGE_CREATE", self.message_payload(first, gateway=True), guild.id)
        return post_id

    def start_thread(self, channel_id: int, message_id: int, *, name: str, creator_id: int) -> int:
        """``creator_id`` starts a public thread from message ``message_id`` of text channel
        ``channel_id``, as Discord does: the thread's id is the message's, THREAD_CREATE is
        dispatched, and the thread opens with a starter message (type 21) that references the
        parent channel's message (its author is the creator; it has no content of its own).
        Returns the thread's id."""
        parent = self._channel(channel_id)
        starter = self._message(channel_id, message_id)
        guild = self._guild(parent.guild_id)
        self._member(guild, creator_id)
        thread = Channel(
            message_id, guild.id, name, position=0, parent_id=channel_id, owner_id=creator_id
        )
        guild.threads[thread.id] = self._channels[thread.id] = thread
        self._publish("THREAD_CREATE", {**thread_payload(thread), "newly_created": True}, guild.id)
        first = Message(
            id=self._snowflakes.next_id(),
            channel_id=thread.id,
            guild_id=guild.id,
            author_id=creator_id,
            content="",
            embeds=[],
            attachments=[],
            mention_ids=[],
            mention_role_ids=[],
            mention_everyone=False,
            reference=(channel_id, starter.id),
            type=MESSAGE_TYPE_THREAD_STARTER,
        )
        thread.messages[first.id] = first
        thread.last_message_id = first.id
        self._publish("MESSAGE_CREATE", self.message_payload(first, gateway=True), guild.id)
        return thread.id

    def add_member(
        self,
        guild_id: int,
        user_id: int,
        *,
        nick: str | None = None,
        role_ids: Sequence[int] = (),
    ) -> None:
        """Make `user_id` a member of the guild; dispatches GUILD_MEMBER_ADD. For someone who
        is already a member, only sets `nick` and `role_ids` (no event)."""
        guild = self._guild(guild_id)
        user = self._user(user_id)
        existing = guild.members.get(user_id)
        if existing is not None:
            existing.nick, existing.role_ids = nick, list(role_ids)
            return
        member = guild.members[user_id] = Member(user_id, self._now(), nick, list(role_ids))
        data = {**member_payload(member, user=user), "guild_id": str(guild_id)}
        self._publish("GUILD_MEMBER_ADD", data, guild_id)

    def rename_guild(self, guild_id: int, name: str) -> None:
        """An admin renames the guild; dispatches GUILD_UPDATE (the guild object, as
        `GET /guilds/{id}` returns it)."""
        guild = self._guild(guild_id)
        guild.name = name
        self._publish("GUILD_UPDATE", {**guild_payload(guild), "guild_id": str(guild_id)}, guild_id)

    def rename_channel(self, channel_id: int, name: str) -> None:
        """An admin renames a channel or a thread; dispatches CHANNEL_UPDATE (THREAD_UPDATE
        for a thread) with the whole channel object, as Discord does."""
        channel = self._channel(channel_id)
        channel.name = name
        event = "THREAD_UPDATE" if channel.parent_id is not None else "CHANNEL_UPDATE"
        self._publish(event, channel_payload(channel), channel.guild_id)

    def set_nick(self, guild_id: int, user_id: int, nick: str | None) -> None:
        """The member's nickname in the guild changes (None: back to their global name);
        dispatches GUILD_MEMBER_UPDATE with the member and its user, as Discord does."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        member.nick = nick
        data = {**member_payload(member, user=self._user(user_id)), "guild_id": str(guild_id)}
        self._publish("GUILD_MEMBER_UPDATE", data, guild_id)

    def add_role(
        self, guild_id: int, name: str, *, permissions: int, role_id: int | None = None
    ) -> int:
        """Create a role with the ``permissions`` bitfield; give it with ``add_member`` or
        `set_member_roles`. Dispatches GUILD_ROLE_CREATE."""
        guild = self._guild(guild_id)
        role_id = role_id or self._snowflakes.next_id()
        role = GuildRole(role_id, name, permissions, position=len(guild.roles))
        guild.roles[role_id] = role
        self._publish(
            "GUILD_ROLE_CREATE", {"guild_id": str(guild_id), "role": role_payload(role)}, guild_id
        )
        return role_id

    def transfer_ownership(self, guild_id: int, user_id: int) -> None:
        """Make the member ``user_id`` the guild's owner (who holds every permission);
        dispatches GUILD_UPDATE."""
        guild = self._guild(guild_id)
        self._member(guild, user_id)
        guild.owner_id = user_id
        self._publish("GUILD_UPDATE", {**guild_payload(guild), "guild_id": str(guild_id)}, guild_id)

    def set_role_permissions(self, guild_id: int, role_id: int, permissions: int) -> None:
        """Change a role's permissions (the guild's id: @everyone); dispatches
        GUILD_ROLE_UPDATE."""
        guild = self._guild(guild_id)
        role = guild.roles.get(role_id)
        if role is None:
            raise unknown(ErrorCode.UNKNOWN_ROLE)
        role.permissions = permissions
        self._publish(
            "GUILD_ROLE_UPDATE", {"guild_id": str(guild_id), "role": role_payload(role)}, guild_id
        )

    def set_member_roles(self, guild_id: int, user_id: int, role_ids: Sequence[int]) -> None:
        """The member's roles become ``role_ids``; dispatches GUILD_MEMBER_UPDATE."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        if any(role_id not in guild.roles for role_id in role_ids):
            raise unknown(ErrorCode.UNKNOWN_ROLE)
        member.role_ids = list(role_ids)
        self._member_updated(guild_id, member)

    def time_out(self, guild_id: int, user_id: int, until: datetime | None) -> None:
        """Time the member out until ``until`` (None lifts it); dispatches
        GUILD_MEMBER_UPDATE."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        member.communication_disabled_until = until
        self._member_updated(guild_id, member)

    def _member_updated(self, guild_id: int, member: Member) -> None:
        user = self._user(member.user_id)
        data = {**member_payload(member, user=user), "guild_id": str(guild_id)}
        self._publish("GUILD_MEMBER_UPDATE", data, guild_id)

    def channel_permissions(self, channel_id: int, user_id: int) -> int:
        """What ``user_id`` may do in the channel (a thread: its parent), as Discord decides:
        the guild permissions (`member_permissions`; the owner and administrators have all),
        then the channel's overwrites (@everyone's, the member's roles' together, the
        member's own), then a timeout (only View Channel and Read Message History stay), no
        View Channel (nothing at all) and no Send Messages (no files, embeds or mentions of
        everyone). The sandbox keeps this reckoning of its own, apart from the product's."""
        channel = self._channel(channel_id)
        if channel.parent_id is not None:
            channel = self._channel(channel.parent_id)
        if channel.guild_id is None:
            return ALL_PERMISSIONS
        guild = self._guild(channel.guild_id)
        permissions = self.member_permissions(guild.id, user_id)
        if permissions == ALL_PERMISSIONS:
            return permissions
        member = self._member(guild, user_id)
        everyone = channel.overwrites.get(guild.id)
        if everyone is not None:
            permissions = (permissions & ~everyone.deny) | everyone.allow
        allowed = denied = 0
        for role_id in member.role_ids:
            overwrite = channel.overwrites.get(role_id)
            if overwrite is not None and overwrite.type == ROLE_OVERWRITE_TYPE:
                allowed, denied = allowed | overwrite.allow, denied | overwrite.deny
        permissions = (permissions & ~denied) | allowed
        own = channel.overwrites.get(user_id)
        if own is not None and own.type == MEMBER_OVERWRITE_TYPE:
            permissions = (permissions & ~own.deny) | own.allow
        until = member.communication_disabled_until
        if until is not None and until > self._now():
            permissions &= VIEW_CHANNEL | READ_MESSAGE_HISTORY
        if not permissions & VIEW_CHANNEL:
            return 0
        if not permissions & SEND_MESSAGES:
            permissions &= ~(ATTACH_FILES | EMBED_LINKS | MENTION_EVERYONE | SEND_TTS_MESSAGES)
        return permissions

    def require_bot_permissions(self, channel_id: int, *needed: int) -> None:
        """Refuse what the bot may not do in the channel, as Discord answers: 403 50001
        Missing Access without View Channel, 403 50013 Missing Permissions without any other
        of ``needed``."""
        permissions = self.channel_permissions(channel_id, self.bot_user_id)
        if not permissions & VIEW_CHANNEL:
            raise DiscordAPIError(403, ErrorCode.MISSING_ACCESS, "Missing Access")
        for permission in needed:
            if not permissions & permission:
                raise DiscordAPIError(403, ErrorCode.MISSING_PERMISSIONS, "Missing Permissions")

    def is_thread(self, channel_id: int) -> bool:
        """Whether the channel is a thread (404 10003 for an unknown channel)."""
        return self._channel(channel_id).parent_id is not None

    def require_bot_in_guild(self, guild_id: int) -> None:
        """403 50001 Missing Access for a guild of the world the bot is not a member of."""
        if self.bot_user_id not in self._guild(guild_id).members:
            raise DiscordAPIError(403, ErrorCode.MISSING_ACCESS, "Missing Access")

    def set_application_flags(self, flags: int) -> None:
        """The application's flags from now on (which privileged intents it may ask for)."""
        self.application_flags = flags

    def member_role_add(self, guild_id: int, user_id: int, role_id: int) -> None:
        """Give the member a role (`PUT /guilds/{g}/members/{u}/roles/{r}`); dispatches
        GUILD_MEMBER_UPDATE with the member's roles now, as Discord does."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        self._role(guild, role_id)
        if role_id not in member.role_ids:
            member.role_ids.append(role_id)
        self._member_updated(guild.id, member)

    def member_role_remove(self, guild_id: int, user_id: int, role_id: int) -> None:
        """Take a role from the member (`DELETE /guilds/{g}/members/{u}/roles/{r}`); dispatches
        GUILD_MEMBER_UPDATE with the member's roles now."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        self._role(guild, role_id)
        member.role_ids = [r for r in member.role_ids if r != role_id]
        self._member_updated(guild.id, member)

    def member_remove(self, guild_id: int, user_id: int) -> None:
        """The member leaves, is kicked (`DELETE /guilds/{g}/members/{u}`) or banned; dispatches
        GUILD_MEMBER_REMOVE with the guild and the user."""
        guild = self._guild(guild_id)
        self._member(guild, user_id)
        del guild.members[user_id]
        data = {"guild_id": str(guild_id), "user": user_payload(self._user(user_id))}
        self._publish("GUILD_MEMBER_REMOVE", data, guild_id)

    def role_edit(self, guild_id: int, role_id: int, *, permissions: int) -> None:
        """An admin changes a role's permissions; dispatches GUILD_ROLE_UPDATE."""
        guild = self._guild(guild_id)
        role = self._role(guild, role_id)
        role.permissions = permissions
        data = {"guild_id": str(guild_id), "role": role_payload(role)}
        self._publish("GUILD_ROLE_UPDATE", data, guild_id)

    def user_guilds(self, user_id: int) -> list[dict[str, Any]]:
        """What `GET /users/@me/guilds` answers for ``user_id``: each guild they are a member
        of, oldest first, with ``owner`` and their ``permissions`` there (a string)."""
        return [
            {
                "id": str(guild.id),
                "name": guild.name,
                "icon": None,
                "banner": None,
                "owner": guild.owner_id == user_id,
                "permissions": str(self.member_permissions(guild.id, user_id)),
                "features": [],
            }
            for guild in sorted(self._guilds.values(), key=lambda g: g.id)
            if user_id in guild.members
        ]

    @staticmethod
    def _role(guild: Guild, role_id: int) -> GuildRole:
        try:
            return guild.roles[role_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_ROLE) from None

    def member_permissions(self, guild_id: int, user_id: int) -> int:
        """The member's permissions in the guild: @everyone's and their roles' together; every
        permission for the owner or an administrator (channel overwrites: see
        `channel_permissions`)."""
        guild = self._guild(guild_id)
        member = self._member(guild, user_id)
        permissions = guild.roles[guild.id].permissions
        for role_id in member.role_ids:
            role = guild.roles.get(role_id)
            if role is not None:
                permissions |= role.permissions
        if user_id == guild.owner_id or permissions & ADMINISTRATOR:
            return ALL_PERMISSIONS
        return permissions

    def next_id(self) -> int:
        """A fresh snowflake from the world's generator."""
        return self._snowflakes.next_id()

    def subscribe(self, listener: EventListener) -> Callable[[], None]:
        """Call `listener` with every gateway event from now on; returns the unsubscriber."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ----------------------------------------------------------------------- acting as users

    def user_says(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        attachments: Iterable[Upload] = (),
        embeds: Iterable[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """`author_id` posts in `channel_id` (optionally replying to message `reply_to` there).

        Dispatches MESSAGE_CREATE and returns the message payload. Raises `DiscordAPIError`
        for an unknown channel, a non-member author, an unknown `reply_to`, content over 2000
        characters or an empty message.
        """
        reference = MessageReference(message_id=reply_to) if reply_to is not None else None
        return self.create_message(
            channel_id,
            author_id=author_id,
            content=content,
            embeds=list(embeds),
            uploads=list(attachments),
            reference=reference,
        )

    def user_edits(self, channel_id: int, message_id: int, content: str) -> dict[str, Any]:
        """The author of a user message edits its content; dispatches MESSAGE_UPDATE."""
        author_id = self._message(channel_id, message_id).author_id
        return self.edit_message(channel_id, message_id, editor_id=author_id, content=content)

    def user_deletes(self, channel_id: int, message_id: int) -> None:
        """The message is deleted (by its author or a moderator); dispatches MESSAGE_DELETE."""
        self.delete_message(channel_id, message_id)

    def user_reacts(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> None:
        """`user_id` adds the unicode `emoji`; dispatches MESSAGE_REACTION_ADD."""
        self.add_reaction(channel_id, message_id, emoji, user_id=user_id)

    def user_unreacts(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> None:
        """`user_id` removes their `emoji`; dispatches MESSAGE_REACTION_REMOVE."""
        self.remove_reaction(channel_id, message_id, emoji, user_id=user_id)

    def user_clears_reactions(
        self, channel_id: int, message_id: int, emoji: str | None = None
    ) -> None:
        """A moderator removes every reaction of the message (MESSAGE_REACTION_REMOVE_ALL), or
        every reaction with ``emoji`` (MESSAGE_REACTION_REMOVE_EMOJI)."""
        if emoji is None:
            self.clear_reactions(channel_id, message_id)
        else:
            self.clear_reaction_emoji(channel_id, message_id, emoji)

    def user_types(self, channel_id: int, user_id: int) -> None:
        """`user_id` starts typing; dispatches TYPING_START."""
        self.trigger_typing(channel_id, user_id=user_id)

    def dispatch_raw(self, name: str, data: dict[str, Any], *, guild_id: int) -> None:
        """Send any gateway dispatch as is, malformed ones included, to the bots connected to
        ``guild_id``'s shard: fault tests use it to prove a bot survives bad payloads."""
        self._publish(name, data, guild_id)

    def shown_texts(self, channel_id: int) -> list[tuple[int, str]]:
        """Every text a message of the channel has shown, in order: ``(message id, content)``
        for each message posted and each edit, deleted messages included (what any Discord
        client could have seen, even for a moment)."""
        return list(self._shown_texts.get(channel_id, []))

    def channel_messages(self, channel_id: int) -> list[dict[str, Any]]:
        """Every message in the channel, oldest first, as REST payloads."""
        return [self.message_payload(m) for m in self._channel(channel_id).messages.values()]

    # ------------------------------------------------------------------------------ reads

    def bot_in_guild(self, guild_id: int) -> bool:
        """Whether the bot is a member of the guild (events of other guilds never reach it)."""
        guild = self._guilds.get(guild_id)
        return guild is not None and self.bot_user_id in guild.members

    @property
    def guild_ids(self) -> list[int]:
        """The guilds the bot is in (the gateway sends these)."""
        return [g.id for g in self._guilds.values() if self.bot_user_id in g.members]

    def describe(self) -> dict[str, Any]:
        """The world at a glance: the bot and each guild's channels and members (ids as strings)."""
        return {
            "bot": user_payload(self._users[self.bot_user_id]),
            "guilds": [
                {
                    "id": str(guild.id),
                    "name": guild.name,
                    "channels": [channel_payload(c) for c in guild.channels.values()],
                    "members": [self.member(guild.id, user_id) for user_id in guild.members],
                }
                for guild in self._guilds.values()
            ],
        }

    def current_user(self) -> dict[str, Any]:
        payload = user_payload(self._users[self.bot_user_id])
        payload.update(verified=True, mfa_enabled=False, locale="en-US", email=None)
        return payload

    def application(self) -> dict[str, Any]:
        """The bot's application, its ``flags`` saying which privileged intents it may ask
        for (all three by default)."""
        bot = self._users[self.bot_user_id]
        return {
            "id": str(self.bot_user_id),
            "name": bot.username,
            "icon": None,
            "description": "",
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": user_payload(bot),
            "verify_key": "0" * 64,
            "flags": self.application_flags,
            "bot": user_payload(bot),
        }

    def user(self, user_id: int) -> dict[str, Any]:
        return user_payload(self._user(user_id))

    def users(self) -> list[dict[str, Any]]:
        """Every user of the world, bots included, in the order they were made."""
        return [user_payload(user) for user in self._users.values()]

    def guild(self, guild_id: int) -> dict[str, Any]:
        return guild_payload(self._guild(guild_id))

    def guild_roles(self, guild_id: int) -> list[dict[str, Any]]:
        """``GET /guilds/{id}/roles``."""
        return [role_payload(role) for role in self._guild(guild_id).roles.values()]

    def guild_channels(self, guild_id: int) -> list[dict[str, Any]]:
        return [channel_payload(c) for c in self._guild(guild_id).channels.values()]

    def member(self, guild_id: int, user_id: int) -> dict[str, Any]:
        member = self._member(self._guild(guild_id), user_id)
        return member_payload(member, user=self._users[user_id])

    def channel(self, channel_id: int) -> dict[str, Any]:
        channel = self._channel(channel_id)
        if channel.recipient_id is not None:
            return dm_channel_payload(channel, self._users[channel.recipient_id])
        return channel_payload(channel)

    def message(self, channel_id: int, message_id: int) -> dict[str, Any]:
        return self.message_payload(self._message(channel_id, message_id))

    def history(self, channel_id: int, query: HistoryQuery) -> list[dict[str, Any]]:
        """`GET /channels/{id}/messages`, newest first, as Discord orders it.

        - `around`: up to `limit // 2` messages newer than `around`, and up to the rest of
          `limit` at or before it (so `around` itself, if it exists, is always included);
        - `before`: the `limit` newest messages older than `before`;
        - `after`: the `limit` oldest messages newer than `after`;
        - none: the `limit` newest messages.
        """
        ids = list(self._channel(channel_id).messages)  # ascending
        limit = query.limit
        if query.around is not None:
            newer = [i for i in ids if i > query.around][: limit // 2]
            older = [i for i in ids if i <= query.around][-(limit - limit // 2) :]
            chosen = older + newer
        elif query.before is not None:
            chosen = [i for i in ids if i < query.before][-limit:]
        elif query.after is not None:
            chosen = [i for i in ids if i > query.after][:limit]
        else:
            chosen = ids[-limit:]
        return [self.message(channel_id, message_id) for message_id in reversed(chosen)]

    def reaction_users(self, channel_id: int, message_id: int, emoji: str) -> list[dict[str, Any]]:
        message = self._message(channel_id, message_id)
        return [user_payload(self._users[uid]) for uid in message.reactions.get(emoji, [])]

    def channel_webhooks(self, channel_id: int) -> list[dict[str, Any]]:
        self._channel(channel_id)
        webhooks = self._webhooks.values()
        return [self._webhook_payload(w) for w in webhooks if w.channel_id == channel_id]

    def webhook(self, webhook_id: int, token: str | None = None) -> dict[str, Any]:
        """The webhook; with `token`, as its token-authenticated route returns it (no `user`)."""
        webhook = self._webhook(webhook_id, token)
        payload = self._webhook_payload(webhook)
        if token is not None:
            del payload["user"]
        return payload

    def attachment(self, attachment_id: int) -> Attachment | None:
        """An uploaded file still attached to a message, for the sandbox's stand-in CDN."""
        return self._attachments.get(attachment_id)

    def attachment_download(self, attachment_id: int, *, ex: str, hm: str) -> Attachment | None:
        """The file a signed CDN URL (``?ex=…&hm=…``) names, or ``None`` when the file is gone,
        the signature is wrong or the URL expired (Discord's CDN answers 404 then)."""
        attachment = self._attachments.get(attachment_id)
        try:
            expiry = int(ex, 16)
        except ValueError:
            return None
        if attachment is None or hm != self._url_signature(attachment_id, expiry):
            return None
        return attachment if self._clock() < expiry else None

    def refresh_attachment_urls(self, urls: Sequence[str]) -> list[dict[str, str]]:
        """``POST /attachments/refresh-urls``: each URL of a file still stored, signed again
        for a full lifetime, as ``{"original", "refreshed"}``; other URLs are left out."""
        refreshed = []
        for url in urls:
            match = _ATTACHMENT_PATH.search(url)
            attachment = self._attachments.get(int(match["attachment_id"])) if match else None
            if attachment is None:
                continue
            self._attachment_expiry[attachment.id] = self._expiry_from_now()
            refreshed.append({"original": url, "refreshed": self.attachment_url(attachment)})
        return refreshed

    def attachment_url(self, attachment: Attachment) -> str:
        """The file's CDN URL as message payloads carry it: signed until its expiry."""
        expiry = self._attachment_expiry.get(attachment.id, 0)
        return (
            f"{self.cdn_base_url}/attachments/{attachment.channel_id}/{attachment.id}/"
            f"{quote(attachment.filename, safe='')}"
            f"?ex={expiry:08x}&hm={self._url_signature(attachment.id, expiry)}"
        )

    def _expiry_from_now(self) -> int:
        return int(self._clock() + self.attachment_url_lifetime)

    def _url_signature(self, attachment_id: int, expiry: int) -> str:
        message = f"{attachment_id}:{expiry}".encode()
        return hashlib.blake2s(message, key=self._url_secret, digest_size=16).hexdigest()

    def guild_create(self, guild_id: int, *, joined: bool = False) -> dict[str, Any]:
        """GUILD_CREATE's data; like Discord without the presences intent, the member list holds
        only the bot, and clients chunk the rest (`member_chunk`).

        After READY a guild "becomes available" (`unavailable: false`); for a guild the bot has
        just `joined` the key is absent, which is how clients tell a join apart.
        """
        guild = self._guild(guild_id)
        bot = member_payload(guild.members[self.bot_user_id], user=self._users[self.bot_user_id])
        payload = guild_create_payload(guild, members=[bot])
        if joined:
            del payload["unavailable"]
        return payload

    def member_chunk(
        self, guild_id: int, *, query: str, limit: int, user_ids: Sequence[int]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Members for a REQUEST_GUILD_MEMBERS: those in `user_ids` if given, else those whose
        username or nick starts with `query` (case-insensitive), at most `limit` (0 = all).
        Returns (member payloads, requested ids that are not members)."""
        guild = self._guild(guild_id)
        if user_ids:
            found = [uid for uid in user_ids if uid in guild.members]
            missing = [uid for uid in user_ids if uid not in guild.members]
        else:
            prefix = query.lower()
            found = [
                uid
                for uid, member in guild.members.items()
                if self._users[uid].username.lower().startswith(prefix)
                or (member.nick or "").lower().startswith(prefix)
            ]
            missing = []
        if limit:
            found = found[:limit]
        return [self.member(guild_id, uid) for uid in found], missing

    # ------------------------------------------------------------------------- operations

    def create_message(
        self,
        channel_id: int,
        *,
        author_id: int,
        content: str = "",
        embeds: Sequence[Mapping[str, Any]] = (),
        uploads: Sequence[Upload] = (),
        reference: MessageReference | None = None,
        allowed_mentions: AllowedMentions | None = None,
        tts: bool = False,
        nonce: int | str | None = None,
        enforce_nonce: bool = False,
        webhook: WebhookAuthor | None = None,
        flags: int = 0,
        sticker_ids: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Post a message as user `author_id`, or as `webhook` (then `author_id` is its id).
        `sticker_ids` must name stickers of the channel's guild (a sticker is a message too).

        A reply (`reference`) to a message that does not exist fails unless
        `fail_if_not_exists` is false, in which case the message is posted without it.
        With `enforce_nonce`, a `nonce` this author used in the last `NONCE_WINDOW_SECONDS`
        returns that earlier message instead of posting again (Discord's duplicate guard).
        Only the flags a sender may set are kept (`SENDABLE_MESSAGE_FLAGS`).
        Dispatches MESSAGE_CREATE; returns the message payload.
        """
        channel = self._channel(channel_id)
        if enforce_nonce and nonce is not None:
            earlier = self._nonces.get((author_id, str(nonce)))
            if earlier is not None and self._clock() - earlier[1] < NONCE_WINDOW_SECONDS:
                kept = channel.messages.get(earlier[0])
                if kept is not None:
                    return self.message_payload(kept)
        guild = self._guilds[channel.guild_id] if channel.guild_id is not None else None
        if webhook is None and guild is not None:
            self._member(guild, author_id)
        elif webhook is None and author_id not in (channel.recipient_id, self.bot_user_id):
            raise DiscordAPIError(403, ErrorCode.MISSING_ACCESS, "Missing Access")
        self._check_body(content, embeds)
        for sticker_id in sticker_ids:
            if sticker_id not in guild.stickers:
                raise DiscordAPIError(400, ErrorCode.UNKNOWN_STICKER, "Unknown Sticker")
        if not (content or embeds or uploads or sticker_ids):
            raise DiscordAPIError(400, ErrorCode.EMPTY_MESSAGE, "Cannot send an empty message")
        replied = self._replied_message(channel, reference)
        message_id = self._snowflakes.next_id()
        mention_ids, role_ids, everyone = self._mentions(
            guild, content, allowed_mentions, replied.author_id if replied else None
        )
        message = Message(
            id=message_id,
            channel_id=channel_id,
            guild_id=channel.guild_id,
            author_id=author_id,
            content=content,
            embeds=[{"type": "rich", **embed} for embed in embeds],  # Discord's default type
            attachments=[self._store_upload(channel_id, upload) for upload in uploads],
            mention_ids=mention_ids,
            mention_role_ids=role_ids,
            mention_everyone=everyone,
            reference=(replied.channel_id, replied.id) if replied else None,
            webhook=webhook,
            tts=tts,
            nonce=nonce,
            flags=flags & SENDABLE_MESSAGE_FLAGS,
            sticker_ids=list(sticker_ids),
        )
        channel.messages[message_id] = message
        channel.last_message_id = message_id
        self._shown_texts.setdefault(channel_id, []).append((message_id, content))
        if nonce is not None:
            self._nonces[(author_id, str(nonce))] = (message_id, self._clock())
        self._publish(
            "MESSAGE_CREATE", self.message_payload(message, gateway=True), channel.guild_id
        )
        self._unfurl_links(message)
        payload = self.message_payload(message)
        if webhook is None:
            self._proxy(message)
        return payload

    def _proxy(self, original: Message) -> None:
        """The proxy bot's work on a user's message (see `add_proxy_member`)."""
        member = next(
            (
                m
                for m in self._proxy_members
                if m.sender_id == original.author_id
                and original.content.lower().startswith(m.prefix.lower())
            ),
            None,
        )
        if member is None or self.proxy_bot_id is None:
            return
        webhook = self._proxy_webhooks.get(original.channel_id)
        if webhook is None:
            webhook = Webhook(
                id=self._snowflakes.next_id(),
                guild_id=original.guild_id,
                channel_id=original.channel_id,
                name="PluralKit",
                avatar=None,
                token=secrets.token_urlsafe(51),
                creator_id=self.proxy_bot_id,
            )
            self._webhooks[webhook.id] = self._proxy_webhooks[original.channel_id] = webhook
        proxied = self.create_message(
            original.channel_id,
            author_id=webhook.id,
            content=original.content[len(member.prefix) :].strip(),
            webhook=WebhookAuthor(webhook_id=webhook.id, username=member.name, avatar=None),
        )
        record = {
            "timestamp": proxied["timestamp"],
            "id": proxied["id"],
            "original": str(original.id),
            "sender": str(original.author_id),
            "channel": str(original.channel_id),
            "guild": str(original.guild_id),
            "system": {"id": f"s{original.author_id % 100000:05d}", "name": None},
            "member": {"id": member.member_id, "name": member.name, "display_name": None},
        }
        self._proxy_records[int(proxied["id"])] = self._proxy_records[original.id] = record
        self.delete_message(original.channel_id, original.id)

    def _unfurl_links(self, message: Message) -> None:
        """Add the preview embeds of the known links in ``message`` (Discord's unfurler, which
        runs after the message is posted and announces the embeds with a MESSAGE_UPDATE)."""
        previews = [
            dict(preview) for url, preview in self._link_previews.items() if url in message.content
        ]
        if not previews or message.embeds:
            return
        message.embeds = previews
        self._publish(
            "MESSAGE_UPDATE", self.message_payload(message, gateway=True), message.guild_id
        )

    def edit_message(
        self,
        channel_id: int,
        message_id: int,
        *,
        editor_id: int,
        content: str | None = None,
        embeds: Sequence[Mapping[str, Any]] | None = None,
        allowed_mentions: AllowedMentions | None = None,
        keep_attachment_ids: Sequence[int] | None = None,
        uploads: Sequence[Upload] = (),
    ) -> dict[str, Any]:
        """Edit a message its author (`editor_id`, a user or webhook id) posted.

        `None` arguments leave the field as it is; `keep_attachment_ids` (when given) drops the
        other attachments; `uploads` are added. Raises 403 code 50005 for someone else's
        message. Dispatches MESSAGE_UPDATE with the whole message; returns it.
        """
        message = self._message(channel_id, message_id)
        if message.author_id != editor_id:
            raise DiscordAPIError(
                403, ErrorCode.EDIT_OTHERS_MESSAGE, "Cannot edit a message authored by another user"
            )
        new_content = message.content if content is None else content
        new_embeds = message.embeds if embeds is None else [{"type": "rich", **e} for e in embeds]
        self._check_body(new_content, new_embeds)
        if keep_attachment_ids is not None:
            kept = set(keep_attachment_ids)
            for attachment in message.attachments:
                if attachment.id not in kept:
                    del self._attachments[attachment.id]
            message.attachments = [a for a in message.attachments if a.id in kept]
        message.attachments += [self._store_upload(channel_id, upload) for upload in uploads]
        if content is not None:
            guild = self._guilds[message.guild_id]
            replied_author = self._referenced_author(message)
            message.mention_ids, message.mention_role_ids, message.mention_everyone = (
                self._mentions(guild, new_content, allowed_mentions, replied_author)
            )
        message.content, message.embeds = new_content, new_embeds
        message.edited_at = self._now()
        self._shown_texts.setdefault(channel_id, []).append((message_id, new_content))
        payload = self.message_payload(message, gateway=True)
        self._publish("MESSAGE_UPDATE", payload, message.guild_id)
        return self.message_payload(message)

    def delete_message(self, channel_id: int, message_id: int) -> None:
        """Delete a message; dispatches MESSAGE_DELETE."""
        message = self._remove_message(self._channel(channel_id), message_id)
        if message is None:
            raise unknown(ErrorCode.UNKNOWN_MESSAGE)
        data = {
            "id": str(message_id),
            "channel_id": str(channel_id),
            "guild_id": str(message.guild_id),
        }
        self._publish("MESSAGE_DELETE", data, message.guild_id)

    def bulk_delete_messages(self, channel_id: int, message_ids: Sequence[int]) -> None:
        """Delete the listed messages that exist (unknown ids are skipped, duplicates count
        once); dispatches one MESSAGE_DELETE_BULK when any was deleted."""
        channel = self._channel(channel_id)
        deleted = [
            message_id
            for message_id in dict.fromkeys(message_ids)
            if self._remove_message(channel, message_id) is not None
        ]
        if deleted:
            data = {
                "ids": [str(message_id) for message_id in deleted],
                "channel_id": str(channel_id),
                "guild_id": str(channel.guild_id),
            }
            self._publish("MESSAGE_DELETE_BULK", data, channel.guild_id)

    def add_reaction(self, channel_id: int, message_id: int, emoji: str, *, user_id: int) -> None:
        """`user_id` reacts with the unicode `emoji` (custom emojis do not exist here: 10014).
        Reacting twice changes nothing; otherwise dispatches MESSAGE_REACTION_ADD."""
        message = self._message(channel_id, message_id)
        guild = self._guilds[message.guild_id]
        member = self._member(guild, user_id)
        reactors = message.reactions.setdefault(self._unicode_emoji(emoji), [])
        if user_id in reactors:
            return
        reactors.append(user_id)
        data = self._reaction_event(message, emoji, user_id)
        data.update(
            member=member_payload(member, user=self._users[user_id]),
            message_author_id=str(message.author_id),
            burst_colors=[],
        )
        self._publish("MESSAGE_REACTION_ADD", data, message.guild_id)

    def remove_reaction(
        self, channel_id: int, message_id: int, emoji: str, *, user_id: int
    ) -> None:
        """Remove `user_id`'s `emoji` reaction if present (dispatching MESSAGE_REACTION_REMOVE)."""
        message = self._message(channel_id, message_id)
        reactors = message.reactions.get(self._unicode_emoji(emoji), [])
        if user_id not in reactors:
            return
        reactors.remove(user_id)
        if not reactors:
            del message.reactions[emoji]
        self._publish(
            "MESSAGE_REACTION_REMOVE",
            self._reaction_event(message, emoji, user_id),
            message.guild_id,
        )

    def clear_reactions(self, channel_id: int, message_id: int) -> None:
        """Remove every reaction of the message; dispatches MESSAGE_REACTION_REMOVE_ALL (also
        when it had none, as Discord does)."""
        message = self._message(channel_id, message_id)
        message.reactions.clear()
        data = {"channel_id": str(message.channel_id), "message_id": str(message.id)}
        if message.guild_id is not None:
            data["guild_id"] = str(message.guild_id)
        self._publish("MESSAGE_REACTION_REMOVE_ALL", data, message.guild_id)

    def clear_reaction_emoji(self, channel_id: int, message_id: int, emoji: str) -> None:
        """Remove every reaction with the unicode ``emoji`` from the message; dispatches
        MESSAGE_REACTION_REMOVE_EMOJI."""
        message = self._message(channel_id, message_id)
        message.reactions.pop(self._unicode_emoji(emoji), None)
        data = {
            "channel_id": str(message.channel_id),
            "message_id": str(message.id),
            "emoji": {"id": None, "name": emoji},
        }
        if message.guild_id is not None:
            data["guild_id"] = str(message.guild_id)
        self._publish("MESSAGE_REACTION_REMOVE_EMOJI", data, message.guild_id)

    def trigger_typing(self, channel_id: int, *, user_id: int) -> None:
        """Dispatch TYPING_START for `user_id` in the channel."""
        channel = self._channel(channel_id)
        data: dict[str, Any] = {
            "channel_id": str(channel_id),
            "user_id": str(user_id),
            "timestamp": int(self._clock()),
        }
        if channel.guild_id is None:
            if user_id not in (channel.recipient_id, self.bot_user_id):
                raise DiscordAPIError(403, ErrorCode.MISSING_ACCESS, "Missing Access")
        else:
            guild = self._guilds[channel.guild_id]
            member = self._member(guild, user_id)
            data["guild_id"] = str(guild.id)
            data["member"] = member_payload(member, user=self._users[user_id])
        self._publish("TYPING_START", data, channel.guild_id)

    def create_webhook(
        self, channel_id: int, name: str, *, avatar: str | None = None
    ) -> dict[str, Any]:
        """The bot creates a webhook in the channel (at most 15 per channel: 30007)."""
        channel = self._channel(channel_id)
        in_channel = sum(1 for w in self._webhooks.values() if w.channel_id == channel_id)
        if in_channel >= MAX_WEBHOOKS_PER_CHANNEL:
            raise DiscordAPIError(
                400,
                ErrorCode.MAX_WEBHOOKS,
                f"Maximum number of webhooks reached ({MAX_WEBHOOKS_PER_CHANNEL})",
            )
        webhook = Webhook(
            id=self._snowflakes.next_id(),
            guild_id=channel.guild_id,
            channel_id=channel_id,
            name=name,
            avatar=avatar,
            token=secrets.token_urlsafe(51),
            creator_id=self.bot_user_id,
        )
        self._webhooks[webhook.id] = webhook
        return self._webhook_payload(webhook)

    def delete_webhook(self, webhook_id: int, token: str | None = None) -> None:
        del self._webhooks[self._webhook(webhook_id, token).id]

    def execute_webhook(
        self,
        webhook_id: int,
        token: str,
        *,
        content: str = "",
        username: str | None = None,
        avatar_url: str | None = None,
        embeds: Sequence[Mapping[str, Any]] = (),
        uploads: Sequence[Upload] = (),
        allowed_mentions: AllowedMentions | None = None,
        tts: bool = False,
        flags: int = 0,
        thread_id: int | None = None,
    ) -> dict[str, Any]:
        """Post through a webhook, shown as `username`/`avatar_url` when given (else the
        webhook's own name and avatar); with `thread_id`, into that thread of the webhook's
        channel. Raises 404 10015 / 401 50027 for an unknown webhook or a wrong token, 404
        10003 for a thread that is not one of the webhook's channel."""
        webhook = self._webhook(webhook_id, token)
        target = webhook.channel_id
        if thread_id is not None:
            thread = self._channel(thread_id)
            if thread.parent_id != webhook.channel_id:
                raise unknown(ErrorCode.UNKNOWN_CHANNEL)
            target = thread.id
        author = WebhookAuthor(
            webhook_id=webhook.id,
            username=username or webhook.name,
            avatar=avatar_hash(avatar_url) if avatar_url else webhook.avatar,
        )
        return self.create_message(
            target,
            author_id=webhook.id,
            content=content,
            embeds=embeds,
            uploads=uploads,
            allowed_mentions=allowed_mentions,
            tts=tts,
            webhook=author,
            flags=flags,
        )

    def webhook_message_channel(self, webhook_id: int, token: str, message_id: int) -> int:
        """The channel of a message this webhook posted (10008 for any other message)."""
        webhook = self._webhook(webhook_id, token)
        message = self._channel(webhook.channel_id).messages.get(message_id)
        if message is None or message.webhook is None or message.author_id != webhook.id:
            raise unknown(ErrorCode.UNKNOWN_MESSAGE)
        return webhook.channel_id

    # ---------------------------------------------------------------------------- rendering

    def message_payload(self, message: Message, *, gateway: bool = False) -> dict[str, Any]:
        """The message as REST returns it; with `gateway`, as MESSAGE_CREATE/UPDATE carry it
        (plus `guild_id`, the author's partial `member`, and `member` on each mention)."""
        guild = self._guilds[message.guild_id] if message.guild_id is not None else None
        payload: dict[str, Any] = {
            "id": str(message.id),
            "type": message.type
            if message.type is not None
            else (MESSAGE_TYPE_REPLY if message.reference else MESSAGE_TYPE_DEFAULT),
            "channel_id": str(message.channel_id),
            "author": self._author_payload(message),
            "content": message.content,
            "timestamp": iso_timestamp(snowflake_time(message.id)),
            "edited_timestamp": iso_timestamp(message.edited_at) if message.edited_at else None,
            "tts": message.tts,
            "mention_everyone": message.mention_everyone,
            "mentions": [self._mention_payload(guild, uid, gateway) for uid in message.mention_ids],
            "mention_roles": [str(role_id) for role_id in message.mention_role_ids],
            "attachments": [self._attachment_payload(a) for a in message.attachments],
            "embeds": [dict(embed) for embed in message.embeds],
            "pinned": False,
            "flags": message.flags,
            "components": [],
        }
        if message.sticker_ids:
            payload["sticker_items"] = [
                {"id": str(s.id), "name": s.name, "format_type": 1}
                for s in (guild.stickers.get(i) for i in message.sticker_ids)
                if s is not None
            ]
        if message.reactions:
            payload["reactions"] = [
                self._reaction_payload(emoji, users) for emoji, users in message.reactions.items()
            ]
        if message.nonce is not None:
            payload["nonce"] = message.nonce
        if message.webhook is not None:
            payload["webhook_id"] = str(message.webhook.webhook_id)
        if message.reference is not None:
            ref_channel_id, ref_message_id = message.reference
            payload["message_reference"] = {
                "type": 0,
                "message_id": str(ref_message_id),
                "channel_id": str(ref_channel_id),
            }
            if guild is not None:
                payload["message_reference"]["guild_id"] = str(guild.id)
            referenced = self._channels[ref_channel_id].messages.get(ref_message_id)
            payload["referenced_message"] = (
                None if referenced is None else self._referenced_payload(referenced)
            )
        if gateway and guild is not None:
            payload["guild_id"] = str(guild.id)
            if message.webhook is None:
                member = guild.members.get(message.author_id)
                if member is not None:
                    payload["member"] = member_payload(member, user=None)
        return payload

    # ------------------------------------------------------------------------------ private

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), tz=UTC)

    def _publish(self, name: str, data: dict[str, Any], guild_id: int | None) -> None:
        event = GatewayEvent(name, data, guild_id)
        for listener in list(self._listeners):
            listener(event)

    def _user(self, user_id: int) -> User:
        try:
            return self._users[user_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_USER) from None

    def _guild(self, guild_id: int) -> Guild:
        try:
            return self._guilds[guild_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_GUILD) from None

    def _channel(self, channel_id: int) -> Channel:
        try:
            return self._channels[channel_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_CHANNEL) from None

    @staticmethod
    def _member(guild: Guild, user_id: int) -> Member:
        try:
            return guild.members[user_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_MEMBER) from None

    def _message(self, channel_id: int, message_id: int) -> Message:
        try:
            return self._channel(channel_id).messages[message_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_MESSAGE) from None

    def _webhook(self, webhook_id: int, token: str | None) -> Webhook:
        webhook = self._webhooks.get(webhook_id)
        if webhook is None:
            raise unknown(ErrorCode.UNKNOWN_WEBHOOK)
        if token is not None and not secrets.compare_digest(token, webhook.token):
            raise DiscordAPIError(401, ErrorCode.INVALID_WEBHOOK_TOKEN, "Invalid Webhook Token")
        return webhook

    def _webhook_payload(self, webhook: Webhook) -> dict[str, Any]:
        creator = self._users[webhook.creator_id]
        return webhook_payload(webhook, creator=creator, application_id=self.bot_user_id)

    @staticmethod
    def _check_body(content: str, embeds: Sequence[Mapping[str, Any]]) -> None:
        problems: FieldErrors = {}
        for name, size, limit in (
            ("content", len(content), MAX_CONTENT_LENGTH),
            ("embeds", len(embeds), MAX_EMBEDS),
        ):
            if size > limit:
                problems[(name,)] = ("BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length.")
        if problems:
            raise invalid_form_body(problems)

    def _replied_message(
        self, channel: Channel, reference: MessageReference | None
    ) -> Message | None:
        if reference is None:
            return None
        ref_channel = self._channels.get(reference.channel_id or channel.id)
        replied = ref_channel.messages.get(reference.message_id) if ref_channel else None
        if replied is None and reference.fail_if_not_exists:
            raise invalid_form_body(
                {("message_reference",): ("MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")}
            )
        return replied

    def _referenced_author(self, message: Message) -> int | None:
        if message.reference is None:
            return None
        ref_channel_id, ref_message_id = message.reference
        referenced = self._channels[ref_channel_id].messages.get(ref_message_id)
        return None if referenced is None else referenced.author_id

    def _mentions(
        self,
        guild: Guild | None,
        content: str,
        allowed: AllowedMentions | None,
        replied_author_id: int | None,
    ) -> tuple[list[int], list[int], bool]:
        """(user ids, role ids, @everyone) the content mentions, as `allowed` lets it: no
        `allowed_mentions` parses everything and pings the replied-to author."""
        user_ids = [int(m) for m in dict.fromkeys(_USER_MENTION.findall(content))]
        user_ids = [uid for uid in user_ids if uid in self._users]
        role_ids = [int(m) for m in dict.fromkeys(_ROLE_MENTION.findall(content))]
        role_ids = [rid for rid in role_ids if guild is not None and rid in guild.roles]
        everyone = _EVERYONE_MENTION.search(content) is not None
        if allowed is not None:
            user_ids = [u for u in user_ids if "users" in allowed.parse or u in allowed.users]
            role_ids = [r for r in role_ids if "roles" in allowed.parse or r in allowed.roles]
            everyone = everyone and "everyone" in allowed.parse
        ping_replied = allowed is None or allowed.replied_user
        if replied_author_id in self._users and ping_replied and replied_author_id not in user_ids:
            user_ids.append(replied_author_id)
        return user_ids, role_ids, everyone

    def stored_message(self, channel_id: int, message_id: int) -> Message:
        """The message record itself (for the world's own modules)."""
        return self._message(channel_id, message_id)

    def channel_message_ids(self, channel_id: int) -> list[int]:
        return list(self._channel(channel_id).messages)

    def store_upload(self, channel_id: int, upload: Upload) -> Attachment:
        """Keep an uploaded file where the stand-in CDN serves it."""
        return self._store_upload(channel_id, upload)

    def _store_upload(self, channel_id: int, upload: Upload) -> Attachment:
        attachment = Attachment(
            id=self._snowflakes.next_id(),
            channel_id=channel_id,
            filename=upload.filename,
            data=upload.data,
            content_type=upload.content_type,
            description=upload.description,
        )
        self._attachments[attachment.id] = attachment
        self._attachment_expiry[attachment.id] = self._expiry_from_now()
        return attachment

    def _remove_message(self, channel: Channel, message_id: int) -> Message | None:
        message = channel.messages.pop(message_id, None)
        if message is not None:
            for attachment in message.attachments:
                del self._attachments[attachment.id]
        return message

    @staticmethod
    def _unicode_emoji(emoji: str) -> str:
        if ":" in emoji:  # name:id — a custom emoji, and this world has none
            raise unknown(ErrorCode.UNKNOWN_EMOJI)
        return emoji

    @staticmethod
    def _reaction_event(message: Message, emoji: str, user_id: int) -> dict[str, Any]:
        return {
            "user_id": str(user_id),
            "channel_id": str(message.channel_id),
            "message_id": str(message.id),
            "guild_id": str(message.guild_id),
            "emoji": {"id": None, "name": emoji},
            "burst": False,
            "type": 0,
        }

    def _reaction_payload(self, emoji: str, user_ids: list[int]) -> dict[str, Any]:
        return {
            "count": len(user_ids),
            "count_details": {"burst": 0, "normal": len(user_ids)},
            "me": self.bot_user_id in user_ids,
            "me_burst": False,
            "burst_colors": [],
            "emoji": {"id": None, "name": emoji},
        }

    def _author_payload(self, message: Message) -> dict[str, Any]:
        if message.webhook is None:
            return user_payload(self._users[message.author_id])
        return {
            "id": str(message.webhook.webhook_id),
            "username": message.webhook.username,
            "avatar": message.webhook.avatar,
            "discriminator": "0000",
            "global_name": None,
            "bot": True,
        }

    def _mention_payload(self, guild: Guild | None, user_id: int, gateway: bool) -> dict[str, Any]:
        payload = user_payload(self._users[user_id])
        member = guild.members.get(user_id) if guild is not None else None
        if gateway and member is not None:
            payload["member"] = member_payload(member, user=None)
        return payload

    def _attachment_payload(self, attachment: Attachment) -> dict[str, Any]:
        return attachment_payload(attachment, url=self.attachment_url(attachment))

    def _referenced_payload(self, message: Message) -> dict[str, Any]:
        """A replied-to message as Discord nests it: one level deep, no further reference."""
        payload = self.message_payload(message)
        payload.pop("referenced_message", None)
        return payload
