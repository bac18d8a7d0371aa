"""Discord messages to simplified history (seed 000, "History fetching and simplification").

Simplification decides *what* the persona may see and gives every visible message its compact
reference; `dialogue.py` later decides how each entry is rendered for this turn (roles, media
limits, notes, tool hints). What it leaves out, and why:

- messages from users with full privacy or on the blacklist: they must never reach a prompt;
- messages from a user the persona has blocked: each run becomes one notice, so the persona
  knows something was said without seeing it, and replies to them lose their quote;
- diagnostic cards and unshared dice rolls: they are not part of the conversation;
- raw snowflakes: mentions become names (see `markup.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from enum import StrEnum

from chat.pipeline.items import MediaDescriptor
from chat.pipeline.markup import render_markup, scrub_snowflakes
from chat.pipeline.message_id_map import MessageIdMap
from chat.pipeline.types import (
    Attachment,
    CardKind,
    ComponentContainer,
    Embed,
    HistoryMessage,
    NameDirectory,
    PrivacyLevel,
    ReferenceKind,
    Sticker,
    UserBlock,
)

QUOTE_LIMIT = 100
"""Longest reply quote, in characters, before it is cut with an ellipsis."""

REFERENCE_VERBS = {
    ReferenceKind.REPLY: "replying to",
    ReferenceKind.THREAD_STARTER: "thread started from",
}


class EntryKind(StrEnum):
    MESSAGE = "message"
    """Someone's words: one message, or a merged run of one author's pure-text messages."""
    NOTICE = "notice"
    """A message made only of this bot's system-notice cards; rendered without a speaker."""
    BLOCKED = "blocked"
    """A run of messages from a user the persona has blocked; rendered as one notice."""


@dataclass(slots=True, unsafe_hash=True)
class EntryPart:
    """One Discord message's share of an entry. Immutable by contract, not ``frozen``: a
    build makes one per message of the window, and a frozen dataclass costs three times as
    much to construct (`SimplifiedEntry` and `dialogue.RenderedEntry` likewise; nothing
    assigns to any of them once made).

    ``head`` is the reference annotation (``[ref_3]`` or ``[ref_3, replying to ref_1 Bob: "…"]``),
    ``body`` the author's own words with markup rendered (the prose the completion projection
    reads; for a NOTICE entry, the notice text), ``tail`` the cards, stickers, files, forwarded
    text and reactions. All three are empty for the hidden messages of a BLOCKED entry.
    """

    message_id: int
    created_at: datetime
    head: str = ""
    body: str = ""
    tail: str = ""


@dataclass(slots=True, unsafe_hash=True)
class SimplifiedEntry:
    """One item of simplified history (immutable by contract, see `EntryPart`).

    ``author_id`` is the Discord author (for a BLOCKED entry: the blocked account), and
    ``author_name`` the name the channel sees (a proxy member's, a persona's, else the display
    name). ``pure_text`` marks an entry that may merge with the next one (DESIGN §5, "Merging").
    """

    kind: EntryKind
    author_id: int
    author_name: str
    parts: tuple[EntryPart, ...]
    persona_name: str | None = None
    images: tuple[MediaDescriptor, ...] = ()
    documents: tuple[MediaDescriptor, ...] = ()
    mention_ids: tuple[int, ...] = ()
    proxy_host_id: int | None = None
    pure_text: bool = False
    _message_ids: tuple[int, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _prose: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def message_ids(self) -> tuple[int, ...]:
        """Its messages' ids, in order (computed once: a kept entry is read every turn)."""
        if self._message_ids is None:
            self._message_ids = tuple(part.message_id for part in self.parts)
        return self._message_ids

    @property
    def created_at(self) -> datetime:
        return self.parts[0].created_at

    @property
    def prose(self) -> str:
        """The entry's words without annotations, one line per part (computed once)."""
        if self._prose is None:
            self._prose = "\n".join(part.body for part in self.parts if part.body)
        return self._prose


@dataclass(frozen=True, slots=True)
class SimplificationSettings:
    """Everything besides the messages that simplification depends on."""

    reply_targets: Mapping[int, HistoryMessage]
    names: NameDirectory
    hidden_user_ids: AbstractSet[int]
    blocked_user_ids: AbstractSet[int]
    timezone: tzinfo
    notice_bodies: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class SimplifiedHistory:
    """The entries, oldest first, and the `MessageIdMap` filled while rendering them; plus the
    messages and settings they were built from, so the next turn can resume from them."""

    entries: tuple[SimplifiedEntry, ...]
    id_map: MessageIdMap
    messages: tuple[HistoryMessage, ...]
    settings: SimplificationSettings
    kept_entries: int = field(default=0, compare=False)
    """How many leading entries are ``resume_from``'s own entry objects (0: built anew)."""


def hidden_user_ids(
    privacy: Mapping[int, PrivacyLevel], blacklisted_user_ids: AbstractSet[int]
) -> frozenset[int]:
    """Users whose messages and names never reach a prompt: full privacy, or blacklisted."""
    full = {user_id for user_id, level in privacy.items() if level is PrivacyLevel.FULL}
    return frozenset(full | set(blacklisted_user_ids))


def blocked_user_ids(
    blocks: Iterable[UserBlock], persona_name: str, now: datetime
) -> frozenset[int]:
    """Users whose messages ``persona_name`` must not see at ``now`` (active blocks, not mutes)."""
    return frozenset(block.user_id for block in blocks if block.hides_history(persona_name, now))


def build_simplified_history(
    messages: Sequence[HistoryMessage],
    *,
    reply_targets: Mapping[int, HistoryMessage],
    names: NameDirectory,
    hidden_user_ids: AbstractSet[int],
    blocked_user_ids: AbstractSet[int],
    timezone: tzinfo,
    resume_from: SimplifiedHistory | None = None,
    notice_bodies: Mapping[int, str] | None = None,
) -> SimplifiedHistory:
    """Turn a window of messages into simplified history entries, registering compact ids.

    Steps, per message in order (privacy and blocks judge the accountable user: a proxy's host):
        1. A hidden user's message, a notice this bot posted ("Replying to …", a failure
           notice: nobody's line), and a message of nothing but excluded cards (diagnostics,
           unshared dice rolls) are dropped without a trace.
        2. A blocked user's message joins a BLOCKED entry; a run of them becomes one entry.
        3. Any other message is rendered: its ``ref_N`` is registered, then its reply target's,
           then the ``media_N`` keys of its own, forwarded and carried attachments.
        4. The entry merges into the previous one when DESIGN §5 allows (`can_merge`).

    Each message's result depends only on the settings and the messages before it. So when
    ``resume_from`` was built with equal settings from a prefix of ``messages`` (a busy
    channel's next turn: the same anchored window plus new messages), its entries and a copy of
    its id map are the starting point and only the new messages are rendered. The result is
    the same as a full build; an edited, deleted or re-reacted message fails the prefix check.

    Args:
        messages: The window, oldest first.
        reply_targets: Reply targets and thread starters fetched from outside the window, by id.
            A reference to a message in neither ``messages`` nor here gets no annotation.
        names: Names for mention markup.
        hidden_user_ids: See `hidden_user_ids`.
        blocked_user_ids: See `blocked_user_ids`.
        timezone: The guild's timezone; merging never crosses one of its calendar days.
        resume_from: The previous turn's result, or None to build from scratch.
        notice_bodies: The bodies of minimal-verbosity notices, by the id of the memory each
            confirms (its current text); a notice whose memory is missing here (forgotten, or
            about someone whose privacy keeps it out) shows its title alone.

    Returns:
        The entries and the id map. Keys are issued in render order, so the same window always
        yields the same keys.
    """
    window = tuple(messages)
    settings = SimplificationSettings(
        reply_targets, names, hidden_user_ids, blocked_user_ids, timezone, notice_bodies or {}
    )
    start, entries, id_map = _resume_point(resume_from, window, settings)
    kept = len(entries)
    renderer = _MessageRenderer(id_map, settings, window)
    for message in window[start:]:
        user_id = message.accountable_user_id
        if user_id in hidden_user_ids or message.is_notice or _only_excluded_cards(message):
            continue
        blocked = user_id in blocked_user_ids
        entry = _blocked_entry(message) if blocked else renderer.render(message)
        if entries and can_merge(entries[-1], entry, timezone):
            entries[-1] = _merged(entries[-1], entry)
            kept = min(kept, len(entries) - 1)
        else:
            entries.append(entry)
    return SimplifiedHistory(tuple(entries), id_map, window, settings, kept_entries=kept)


def can_merge(previous: SimplifiedEntry, entry: SimplifiedEntry, timezone: tzinfo) -> bool:
    """Whether ``entry`` folds into ``previous``.

    BLOCKED entries of the same account always fold (one notice per run). MESSAGE entries fold
    when both are pure text (no media, files, stickers, cards, references or forwards: each
    of those stays its own entry so its annotation and media stay unambiguous), the author id
    and shown name match, and both fall on the same calendar day in ``timezone``.
    """
    if previous.kind is not entry.kind or previous.author_id != entry.author_id:
        return False
    if entry.kind is EntryKind.BLOCKED:
        return True
    return (
        entry.kind is EntryKind.MESSAGE
        and previous.pure_text
        and entry.pure_text
        and previous.author_name == entry.author_name
        and _local_day(previous.parts[-1].created_at, timezone)
        == _local_day(entry.created_at, timezone)
    )


def _resume_point(
    previous: SimplifiedHistory | None,
    window: tuple[HistoryMessage, ...],
    settings: SimplificationSettings,
) -> tuple[int, list[SimplifiedEntry], MessageIdMap]:
    """(messages already simplified, their entries, a copy of their id map), or a fresh start."""
    if (
        previous is None
        or previous.settings != settings
        or window[: len(previous.messages)] != previous.messages
    ):
        return 0, [], MessageIdMap()
    return len(previous.messages), list(previous.entries), previous.id_map.copy()


def _local_day(moment: datetime, timezone: tzinfo) -> date:
    return moment.astimezone(timezone).date()


def _merged(previous: SimplifiedEntry, entry: SimplifiedEntry) -> SimplifiedEntry:
    return SimplifiedEntry(
        kind=previous.kind,
        author_id=previous.author_id,
        author_name=previous.author_name,
        parts=previous.parts + entry.parts,
        persona_name=previous.persona_name,
        mention_ids=tuple(dict.fromkeys(previous.mention_ids + entry.mention_ids)),
        proxy_host_id=previous.proxy_host_id,
        pure_text=previous.pure_text,
    )


def _blocked_entry(message: HistoryMessage) -> SimplifiedEntry:
    return SimplifiedEntry(
        kind=EntryKind.BLOCKED,
        author_id=message.accountable_user_id,
        author_name="",
        parts=(EntryPart(message_id=message.id, created_at=message.created_at),),
    )


class _MessageRenderer:
    """Renders visible messages into entries; holds what every message needs."""

    def __init__(
        self,
        id_map: MessageIdMap,
        settings: SimplificationSettings,
        window: Sequence[HistoryMessage],
    ) -> None:
        self.id_map = id_map
        self._names = settings.names
        self._hidden = settings.hidden_user_ids
        self._blocked = settings.blocked_user_ids
        self._reply_targets = settings.reply_targets
        self._notice_bodies = settings.notice_bodies
        self._window = window
        self._by_id: dict[int, HistoryMessage] | None = None

    def render(self, message: HistoryMessage) -> SimplifiedEntry:
        """Render one visible message (steps 3 of `build_simplified_history`)."""
        cards = message.embeds or message.containers
        if cards and _is_notice_only(message):
            return self._notice_entry(message)
        mentions = message.mention_ids
        if message.reference is None and not (
            cards or message.attachments or message.stickers or message.snapshots
        ):
            # Most messages are words alone: no target, media or annotations to look for.
            head, tail = f"[{self.id_map.register_message(message.id)}]", ""
            images: tuple[MediaDescriptor, ...] = ()
            documents: tuple[MediaDescriptor, ...] = ()
            if message.reactions:
                tail = self._tail(message, ())
            pure_text = True
        else:
            target = self._visible_target(message)
            head = self._head(message, target)
            images, documents, files = self._media(message, target)
            tail = self._tail(message, files)
            pure_text = _is_pure_text(message)
        content = message.content
        part = EntryPart(
            message.id,
            message.created_at,
            head,
            self._body(content, message.containers) if content or cards else "",
            tail,
        )
        return SimplifiedEntry(
            EntryKind.MESSAGE,
            message.author.id,
            _shown_name(message.shown_name),
            (part,),
            message.author.persona_name,
            images,
            documents,
            tuple(uid for uid in mentions if uid not in self._hidden) if mentions else (),
            message.proxy.host_user_id if message.proxy else None,
            pure_text,
        )

    def _notice_entry(self, message: HistoryMessage) -> SimplifiedEntry:
        notices = [self._card_text(card) for card in _shown_cards(message)]
        part = EntryPart(
            message_id=message.id, created_at=message.created_at, body=" ".join(notices)
        )
        return SimplifiedEntry(
            kind=EntryKind.NOTICE,
            author_id=message.author.id,
            author_name=_shown_name(message.shown_name),
            parts=(part,),
            persona_name=message.author.persona_name,
        )

    def _visible_target(self, message: HistoryMessage) -> HistoryMessage | None:
        """The reply target or thread starter, when known, its author may be seen and it is
        more than excluded cards."""
        reference = message.reference
        if reference is None or reference.kind is ReferenceKind.FORWARD:
            return None
        if self._by_id is None:  # made on the first reference (a warm turn renders few)
            self._by_id = {message.id: message for message in self._window}
        target = self._by_id.get(reference.message_id) or self._reply_targets.get(
            reference.message_id
        )
        if target is None or _only_excluded_cards(target):
            return None
        author = target.accountable_user_id
        if author in self._hidden or author in self._blocked:
            return None
        return target

    def _head(self, message: HistoryMessage, target: HistoryMessage | None) -> str:
        key = self.id_map.register_message(message.id)
        reference = message.reference
        if reference is not None and reference.kind is ReferenceKind.FORWARD:
            return f"[{key}, forwarded]"
        if target is None or reference is None:
            return f"[{key}]"
        target_key = self.id_map.register_message(target.id)
        label = (
            f"{REFERENCE_VERBS[reference.kind]} {target_key} {scrub_snowflakes(target.shown_name)}"
        )
        quote = self._quote(target)
        return f'[{key}, {label}: "{quote}"]' if quote else f"[{key}, {label}]"

    def _quote(self, target: HistoryMessage) -> str:
        """The target's words, else its first shown card, flattened to one line and cut."""
        text = self._body(target.content, target.containers)
        if not text:
            text = next((self._card_text(card) for card in _shown_cards(target)), "")
        text = " ".join(text.split())
        return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 1].rstrip() + "…"

    def _body(self, content: str, containers: Sequence[ComponentContainer]) -> str:
        if not containers:  # most messages: their words alone
            return render_markup(content, self._names, self._hidden) if content else ""
        texts = [content] if content else []
        if containers:
            texts += [
                "\n".join(container.text_displays)
                for container in containers
                if container.kind.is_shown and not container.kind.is_notice
            ]
        return render_markup("\n".join(texts), self._names, self._hidden)

    def _media(
        self, message: HistoryMessage, target: HistoryMessage | None
    ) -> tuple[
        tuple[MediaDescriptor, ...], tuple[MediaDescriptor, ...], tuple[MediaDescriptor, ...]
    ]:
        """Register media keys for the message's own, forwarded and carried attachments.

        Returns (images, text documents, other files), each in registration order.
        """
        if not (message.attachments or message.snapshots or (target and target.attachments)):
            return (), (), ()
        images: list[MediaDescriptor] = []
        documents: list[MediaDescriptor] = []
        files: list[MediaDescriptor] = []
        for source_id, attachment in _carried_attachments(message, target):
            ref = MediaDescriptor(
                key=self.id_map.register_media(attachment.id),
                filename=scrub_snowflakes(attachment.filename),
                url=attachment.url,
                content_type=attachment.content_type,
                message_id=source_id,
                is_gif=attachment.is_gif,
                image_identity=attachment.image_identity if attachment.is_image else None,
            )
            if attachment.is_image:
                images.append(ref)
            elif attachment.is_text_document:
                documents.append(ref)
            else:
                files.append(ref)
        return tuple(images), tuple(documents), tuple(files)

    def _tail(self, message: HistoryMessage, files: Sequence[MediaDescriptor]) -> str:
        """Annotations after the words: cards, stickers, forwards, files, reactions."""
        if not (
            message.embeds
            or message.containers
            or message.stickers
            or message.snapshots
            or files
            or message.reactions
        ):
            return ""
        pieces = self._card_annotations(message.embeds, message.containers)
        pieces += _sticker_annotations(message.stickers)
        for snapshot in message.snapshots:
            forwarded = self._body(snapshot.content, ())
            pieces.append(f'[forwarded: "{forwarded}"]' if forwarded else "[forwarded]")
            pieces += self._card_annotations(snapshot.embeds, ())
            pieces += _sticker_annotations(snapshot.stickers)
        pieces += [f"[file {ref.key}: {ref.filename}]" for ref in files]
        if message.reactions:
            reactions = ", ".join(
                f"{render_markup(reaction.emoji, self._names, self._hidden)} {reaction.count}"
                for reaction in message.reactions
            )
            pieces.append(f"[reactions: {reactions}]")
        return " ".join(pieces)

    def _card_annotations(
        self, embeds: Sequence[Embed], containers: Sequence[ComponentContainer]
    ) -> list[str]:
        annotations = []
        cards: tuple[Embed | ComponentContainer, ...] = (*embeds, *containers)
        for card in cards:
            if card.kind.is_notice:
                annotations.append(f"[System: {self._card_text(card)}]")
            elif card.kind.is_shown and isinstance(card, Embed):
                annotations.append(f"[Embed: {self._card_text(card)}]")
        return annotations

    def _card_text(self, card: Embed | ComponentContainer) -> str:
        if isinstance(card, ComponentContainer):
            pieces = list(card.text_displays)
        elif card.kind is CardKind.MINIMAL_NOTICE:
            # Its footer only names the memory: the memory's text is the body it left out.
            body = self._notice_bodies.get(card.memory_id) if card.memory_id is not None else None
            pieces = [card.title, body or ""]
        else:
            pieces = [card.title, card.description]
            pieces += [f"{field.name}: {field.value}" for field in card.fields]
            pieces.append(card.footer)
        text = " — ".join(piece for piece in pieces if piece)
        return render_markup(text, self._names, self._hidden)


@functools.lru_cache(maxsize=4096)
def _shown_name(name: str) -> str:
    """A display name as prompts show it, raw snowflakes scrubbed (the same few names recur
    in every message of a window)."""
    return scrub_snowflakes(name)


def _sticker_annotations(stickers: Sequence[Sticker]) -> list[str]:
    return [f"[sticker: {scrub_snowflakes(sticker.name)}]" for sticker in stickers]


def _shown_cards(message: HistoryMessage) -> Iterator[Embed | ComponentContainer]:
    return (card for card in _cards(message) if card.kind.is_shown)


def _cards(message: HistoryMessage) -> tuple[Embed | ComponentContainer, ...]:
    """The message's embeds, then its Components V2 containers."""
    return (*message.embeds, *message.containers)


def _carried_attachments(
    message: HistoryMessage, target: HistoryMessage | None
) -> list[tuple[int, Attachment]]:
    """(source message id, attachment): own, then forwarded, then the target's."""
    carried = [(message.id, attachment) for attachment in message.attachments]
    for snapshot in message.snapshots:
        carried += [(message.id, attachment) for attachment in snapshot.attachments]
    if target is not None:
        carried += [(target.id, attachment) for attachment in target.attachments]
    return carried


def _is_pure_text(message: HistoryMessage) -> bool:
    return not (
        message.attachments
        or message.stickers
        or message.snapshots
        or message.reference
        or (
            (message.embeds or message.containers)
            and any(card.kind.is_shown for card in _cards(message))
        )
    )


def _only_excluded_cards(message: HistoryMessage) -> bool:
    """A message whose only content is cards no prompt shows (seed 002: diagnostic embeds and
    unshared dice rolls stay excluded)."""
    if not (message.embeds or message.containers):
        return False
    cards = _cards(message)
    return bool(cards) and not any(card.kind.is_shown for card in cards) and _cards_alone(message)


def _is_notice_only(message: HistoryMessage) -> bool:
    """A message with nothing but this bot's system-notice cards (and possibly hidden cards)."""
    cards = list(_shown_cards(message))
    return bool(cards) and all(card.kind.is_notice for card in cards) and _cards_alone(message)


def _cards_alone(message: HistoryMessage) -> bool:
    """No text, file, sticker, forward or reply beside the message's cards."""
    return not (
        message.content
        or message.attachments
        or message.stickers
        or message.snapshots
        or message.reference
    )
