"""Frozen inputs of the context pipeline.

A `HistoryMessage` is one Discord message as the gateway converted it at the boundary
(`chat/gateway/`): snowflakes are ints, datetimes are timezone-aware, and nothing here knows
about discord.py. `PersonaProfile`, `UserBlock` and `ContextNote` carry the admin's configuration;
`TurnInput` (in `context.py`) bundles everything one turn needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from posixpath import splitext
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
TEXT_DOCUMENT_EXTENSIONS = frozenset(
    {".txt", ".md", ".markdown", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".xml",
     ".html", ".log", ".py", ".js", ".ts", ".java", ".c", ".cpp", ".h", ".rs", ".go", ".rb",
     ".sh", ".sql", ".ini", ".cfg"}
)  # fmt: skip
TEXT_DOCUMENT_CONTENT_TYPES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/toml"}
)


class Role(StrEnum):
    """Who speaks an item, in Chat Completions terms."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class PrivacyLevel(StrEnum):
    """A user's privacy choice. Only ``FULL`` changes prompts: such users never appear in them."""

    MINIMAL = "minimal"
    PARTIAL = "partial"
    FULL = "full"


class BlockType(StrEnum):
    """``BLOCK`` hides the user's messages from the persona; ``MUTE`` only stops them triggering it
    (which is the scheduler's business, not the prompt's)."""

    BLOCK = "block"
    MUTE = "mute"


class CardKind(StrEnum):
    """What an embed or a Components V2 container is, as the gateway recognised it."""

    ORDINARY = "ordinary"
    """Link previews and other bots' cards: shown to the model as previews."""
    SYSTEM_NOTICE = "system_notice"
    """This bot's own notice cards (memory saved, persona switched …): shown as ``[System: …]``."""
    MINIMAL_NOTICE = "minimal_notice"
    """This bot's notice card at minimal verbosity: a title, and in its footer the memory it
    confirms (``memory #N``, `Embed.memory_id`); shown as ``[System: …]`` with the memory's
    current text restored as its body (seed 000, "System notice hydration")."""
    DICE_ROLL = "dice_roll"
    """A dice roll shared with the channel: shown like an ordinary card."""
    UNSHARED_DICE_ROLL = "unshared_dice_roll"
    """A dice roll the roller kept to themselves: never shown."""
    DIAGNOSTIC = "diagnostic"
    """Debug and metrics cards: never shown."""

    @property
    def is_shown(self) -> bool:
        return self not in (CardKind.UNSHARED_DICE_ROLL, CardKind.DIAGNOSTIC)

    @property
    def is_notice(self) -> bool:
        return self in (CardKind.SYSTEM_NOTICE, CardKind.MINIMAL_NOTICE)


class ReferenceKind(StrEnum):
    REPLY = "reply"
    FORWARD = "forward"
    THREAD_STARTER = "thread_starter"
    """A thread's first message pointing at the parent-channel message the thread started from."""


@dataclass(frozen=True, slots=True)
class Author:
    """Who posted a message. ``persona_name`` is set when one of our personas wrote it (through
    the bot account or a persona webhook)."""

    id: int
    display_name: str
    is_bot: bool = False
    webhook_id: int | None = None
    persona_name: str | None = None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file on a message. ``content_hash`` identifies repeated images better than the URL
    does (each upload gets its own URL): Discord exposes no hash, so the worker sets it from
    the image's bytes before a turn (`chat.services.turn_input.turn_image_hashes`)."""

    id: int
    filename: str
    url: str
    content_type: str | None = None
    size: int = 0
    content_hash: str | None = None

    @property
    def extension(self) -> str:
        return splitext(self.filename)[1].lower()

    @property
    def is_image(self) -> bool:
        if self.content_type:
            return self.content_type.startswith("image/")
        return self.extension in IMAGE_EXTENSIONS

    @property
    def is_gif(self) -> bool:
        return self.content_type == "image/gif" or self.extension == ".gif"

    @property
    def is_text_document(self) -> bool:
        """True for files ``read_file`` can read: text content types or known text extensions."""
        content_type = (self.content_type or "").split(";")[0]
        return (
            content_type.startswith("text/")
            or content_type in TEXT_DOCUMENT_CONTENT_TYPES
            or self.extension in TEXT_DOCUMENT_EXTENSIONS
        )

    @property
    def url_expires_at(self) -> datetime | None:
        """When the URL's signature runs out (`signed_url_expiry`)."""
        return signed_url_expiry(self.url)

    @property
    def image_identity(self) -> str:
        """What makes two image attachments "the same image": the content hash, else the URL
        without its query (Discord CDN URLs carry expiring signature parameters)."""
        if self.content_hash:
            return f"hash:{self.content_hash}"
        parts = urlsplit(self.url)
        return f"url:{parts.netloc}{parts.path}"


def signed_url_expiry(url: str) -> datetime | None:
    """When a signed CDN URL stops working: Discord's carry it as ``ex``, Unix seconds in hex;
    None for a URL without one."""
    values = parse_qs(urlsplit(url).query).get("ex")
    try:
        return datetime.fromtimestamp(int(values[0], 16), tz=UTC) if values else None
    except (ValueError, OverflowError, OSError):
        return None


@dataclass(frozen=True, slots=True)
class Sticker:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class EmbedField:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class Embed:
    title: str = ""
    description: str = ""
    footer: str = ""
    fields: tuple[EmbedField, ...] = ()
    kind: CardKind = CardKind.ORDINARY
    memory_id: int | None = None
    """The memory a minimal-verbosity notice confirms (`CardKind.MINIMAL_NOTICE`)."""


@dataclass(frozen=True, slots=True)
class ComponentContainer:
    """A Components V2 container: its text displays, in order. A shown container that is not a
    system notice is the message's own text (V2 messages have no ``content``)."""

    text_displays: tuple[str, ...]
    kind: CardKind = CardKind.ORDINARY


@dataclass(frozen=True, slots=True)
class MessageReference:
    message_id: int
    channel_id: int
    kind: ReferenceKind = ReferenceKind.REPLY


@dataclass(frozen=True, slots=True)
class ForwardedSnapshot:
    """The copy of a forwarded message that Discord embeds in the forwarding message."""

    content: str = ""
    attachments: tuple[Attachment, ...] = ()
    embeds: tuple[Embed, ...] = ()
    stickers: tuple[Sticker, ...] = ()


@dataclass(frozen=True, slots=True)
class Reaction:
    """``emoji`` is a Unicode emoji or a custom emoji in Discord markup (``<:name:id>``);
    ``me``: this bot is among those who reacted."""

    emoji: str
    count: int
    me: bool = False


@dataclass(frozen=True, slots=True)
class ProxyIdentity:
    """A PluralKit-style proxied message, as attested by the proxy system: the member it speaks
    as, and the host account behind it (whose privacy and blocks apply)."""

    member_id: str
    member_name: str
    host_user_id: int


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One Discord message, converted. ``mention_ids`` are the user ids Discord resolved as
    mentioned; ``content`` may still hold mention markup (``<@id>``), which simplification turns
    into names."""

    id: int
    channel_id: int
    author: Author
    content: str
    created_at: datetime
    attachments: tuple[Attachment, ...] = ()
    stickers: tuple[Sticker, ...] = ()
    embeds: tuple[Embed, ...] = ()
    containers: tuple[ComponentContainer, ...] = ()
    reference: MessageReference | None = None
    snapshots: tuple[ForwardedSnapshot, ...] = ()
    mention_ids: tuple[int, ...] = ()
    reactions: tuple[Reaction, ...] = ()
    proxy: ProxyIdentity | None = None
    is_notice: bool = False
    """A notice this bot posted ("Replying to …", a failure notice): the product talking, not
    the persona it was sent as, so it is never shown as that persona's line."""

    @property
    def shown_name(self) -> str:
        """The name the channel sees: a proxied member's, a persona's, else the display name."""
        if self.proxy is not None:
            return self.proxy.member_name
        return self.author.persona_name or self.author.display_name

    @property
    def accountable_user_id(self) -> int:
        """The account whose privacy and blocks apply: the proxy host, else the author."""
        return self.proxy.host_user_id if self.proxy is not None else self.author.id


@dataclass(frozen=True, slots=True)
class ContextNote:
    """A note injected into the dialogue ``depth`` items from its end (0 = after the last)."""

    text: str
    depth: int


@dataclass(frozen=True, slots=True)
class SampleMessage:
    """One line of a persona's sample dialogue; macros in ``content`` are resolved."""

    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class ModelSettings:
    context_window: int = 16000
    max_output_tokens: int = 512
    reasoning_in_think_tags: bool = False
    """Ask the model to wrap any reasoning in ``<think>`` tags, which delivery strips."""


@dataclass(frozen=True, slots=True)
class PersonaProfile:
    """A persona as configured. ``aliases`` are other names people call it by; ``triggers`` are
    the words that wake it. Both count as addressing it in participant resolution. The guild's
    ``is_main`` persona speaks through the bot account (``{bot}`` in macros)."""

    name: str
    is_main: bool = False
    system_prompt: str = ""
    aliases: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()
    sample_dialogue: tuple[SampleMessage, ...] = ()
    prefill: str = ""
    context_note: ContextNote | None = None
    force_lowercase: bool = False
    punctuation_splits: bool = False
    deliberate_tool_mode: bool = True
    model: ModelSettings = field(default_factory=ModelSettings)


@dataclass(frozen=True, slots=True)
class UserBlock:
    """A persona-scoped block or mute. ``expires_at`` None means it never expires."""

    persona_name: str
    user_id: int
    type: BlockType = BlockType.BLOCK
    expires_at: datetime | None = None

    def hides_history(self, persona_name: str, now: datetime) -> bool:
        """True when this block hides the user's messages from ``persona_name`` at ``now``."""
        return (
            self.type is BlockType.BLOCK
            and self.persona_name == persona_name
            and (self.expires_at is None or self.expires_at > now)
        )


@dataclass(frozen=True, slots=True)
class NameDirectory:
    """Names for the ids Discord markup carries: guild members (display names), channels and
    roles. A missing id renders as a neutral placeholder, never as the raw snowflake."""

    users: Mapping[int, str] = field(default_factory=dict)
    channels: Mapping[int, str] = field(default_factory=dict)
    roles: Mapping[int, str] = field(default_factory=dict)


def with_attachment_urls(message: HistoryMessage, urls: Mapping[str, str]) -> HistoryMessage:
    """``message`` with each attachment (its forwarded copies' included) whose URL is a key of
    ``urls`` pointing at that key's value instead; ``message`` itself when none is."""

    def renewed(attachments: tuple[Attachment, ...]) -> tuple[Attachment, ...]:
        if not any(a.url in urls for a in attachments):
            return attachments
        return tuple(replace(a, url=urls[a.url]) if a.url in urls else a for a in attachments)

    attachments = renewed(message.attachments)
    snapshots = tuple(
        s
        if renewed(s.attachments) is s.attachments
        else replace(s, attachments=renewed(s.attachments))
        for s in message.snapshots
    )
    if attachments is message.attachments and all(
        a is b for a, b in zip(snapshots, message.snapshots, strict=True)
    ):
        return message
    return replace(message, attachments=attachments, snapshots=snapshots)


def with_attachment_hashes(message: HistoryMessage, hashes: Mapping[int, str]) -> HistoryMessage:
    """``message`` with each attachment (its forwarded copies' included) whose id is a key of
    ``hashes`` carrying that value as its ``content_hash``; ``message`` itself when none is."""

    def hashed(attachments: tuple[Attachment, ...]) -> tuple[Attachment, ...]:
        if not any(a.id in hashes and a.content_hash != hashes[a.id] for a in attachments):
            return attachments
        return tuple(
            replace(a, content_hash=hashes[a.id]) if a.id in hashes else a for a in attachments
        )

    attachments = hashed(message.attachments)
    snapshots = tuple(
        s
        if hashed(s.attachments) is s.attachments
        else replace(s, attachments=hashed(s.attachments))
        for s in message.snapshots
    )
    if attachments is message.attachments and all(
        a is b for a, b in zip(snapshots, message.snapshots, strict=True)
    ):
        return message
    return replace(message, attachments=attachments, snapshots=snapshots)
