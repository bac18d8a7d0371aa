"""The records the sandbox's world is made of, as plain dataclasses.

`chat.sandbox.state.Sandbox` owns and changes them; `chat.sandbox.payloads` renders them as
Discord's JSON. Ids are ints here and strings only on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class User:
    id: int
    username: str
    bot: bool = False
    global_name: str | None = None
    discriminator: str = "0"


@dataclass(slots=True)
class GuildRole:
    id: int
    name: str
    permissions: int
    position: int
    bot_id: int | None = None
    """Set for the role Discord creates for a bot when it joins (a "managed" role)."""


@dataclass(slots=True)
class Member:
    user_id: int
    joined_at: datetime
    nick: str | None = None
    role_ids: list[int] = field(default_factory=list)
    communication_disabled_until: datetime | None = None
    """Set while the member is timed out (Discord's member field of that name)."""


ROLE_OVERWRITE_TYPE = 0
MEMBER_OVERWRITE_TYPE = 1


@dataclass(frozen=True, slots=True)
class PermissionOverwrite:
    """One entry of a channel's ``permission_overwrites``: for a role (``type`` 0; the
    ``@everyone`` role has the guild's id) or a member (``type`` 1), what it allows and denies."""

    id: int
    type: int
    allow: int = 0
    deny: int = 0


@dataclass(frozen=True, slots=True)
class Upload:
    """A file as a client uploads it (multipart `files[N]`) or a test attaches it."""

    filename: str
    data: bytes
    content_type: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Attachment:
    id: int
    channel_id: int
    filename: str
    data: bytes
    content_type: str | None
    description: str | None


@dataclass(frozen=True, slots=True)
class WebhookAuthor:
    """Who a webhook message shows as: the webhook, with its per-message name and avatar."""

    webhook_id: int
    username: str
    avatar: str | None


@dataclass(slots=True)
class Message:
    id: int
    channel_id: int
    guild_id: int | None
    """None in a DM."""
    author_id: int
    """The user id, or the webhook id for webhook messages."""
    content: str
    embeds: list[dict[str, Any]]
    attachments: list[Attachment]
    mention_ids: list[int]
    mention_role_ids: list[int]
    mention_everyone: bool
    reference: tuple[int, int] | None = None
    """(channel id, message id) this message replies to."""
    webhook: WebhookAuthor | None = None
    tts: bool = False
    nonce: int | str | None = None
    edited_at: datetime | None = None
    reactions: dict[str, list[int]] = field(default_factory=dict)
    """Unicode emoji -> ids of the users who reacted with it, in reaction order."""
    type: int | None = None
    """Discord's message type when it is not implied (21: a thread's starter message)."""
    flags: int = 0
    """Message flags the sender set (SUPPRESS_EMBEDS 1<<2, SUPPRESS_NOTIFICATIONS 1<<12)."""
    sticker_ids: list[int] = field(default_factory=list)
    """The guild stickers the message is (Discord allows up to three)."""


@dataclass(slots=True)
class Channel:
    id: int
    guild_id: int | None
    """None for a DM channel (type 1) between the bot and ``recipient_id``."""
    name: str
    position: int
    topic: str | None = None
    last_message_id: int | None = None
    messages: dict[int, Message] = field(default_factory=dict)
    """By id; ids only ever increase, so insertion order is chronological order."""
    parent_id: int | None = None
    """Set for a thread: the text channel it was started in."""
    owner_id: int | None = None
    """Set for a thread: who started it."""
    is_forum: bool = False
    """A forum channel (type 15): it holds no messages of its own, only posts (threads)."""
    recipient_id: int | None = None
    """Set for a DM channel: the user the bot talks with."""
    category_id: int | None = None
    """The category (type 4 channel) a text or forum channel sits in (its ``parent_id``)."""
    is_category: bool = False
    """A category (type 4): it holds channels, not messages."""
    overwrites: dict[int, PermissionOverwrite] = field(default_factory=dict)
    """The channel's own permission overwrites, by role or member id (a thread has none: its
    parent's apply)."""
    synced: bool = False
    """Whether the channel's overwrites follow its category's (Discord's "synced"): a change
    to the category's is copied to it, a change of its own ends the sync."""
    nsfw: bool = False
    """Marked age-restricted (NSFW) in Discord; a thread is as its parent is."""


@dataclass(slots=True)
class GuildSticker:
    id: int
    name: str
    tags: str = ""
    """The emoji Discord shows as the sticker's suggestion (its ``tags``)."""


@dataclass(slots=True)
class Guild:
    id: int
    name: str
    owner_id: int
    roles: dict[int, GuildRole] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    threads: dict[int, Channel] = field(default_factory=dict)
    """Active threads (public, started from a message), by id."""
    stickers: dict[int, GuildSticker] = field(default_factory=dict)


@dataclass(slots=True)
class Webhook:
    id: int
    guild_id: int
    channel_id: int
    name: str
    avatar: str | None
    token: str
    creator_id: int
