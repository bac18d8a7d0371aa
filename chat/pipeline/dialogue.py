"""The dialogue history contributor (seed 002): simplified history to tagged prompt items.

Each entry becomes one DIALOGUE_HISTORY item ``Name: content``, with a date spacer before it
when the day changes (context notes are placed among them afterwards, `notes.place_notes`).
A warm turn re-renders only what is new or changed (`render_dialogue`'s ``previous``). What
this stage leaves out, and why:

- media bytes: items carry capability-neutral `MediaDescriptor`s and name them ``media_N``;
  each model attempt decides later whether they become image parts or a notice;
- images beyond the media window, the rendered-image limit, or repeated later (`media.py`);
- randomness: the humanizer applies only the deterministic casing and semicolon rules, so the
  same history renders byte-identically turn after turn (the provider's prompt cache);
- relative dates: spacers name the absolute date, which never changes wording at midnight;
- macros in message bodies: only author labels resolve ``{bot}``/``{user}``/``{char}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, tzinfo
from functools import partial
from typing import NamedTuple

from chat.pipeline.items import ContextItem, ItemTag, MediaDescriptor, system_note
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.media import EntryMedia, plan_media
from chat.pipeline.simplify import EntryKind, SimplifiedEntry
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.types import PersonaProfile, Role

DOCUMENT_HINT_TEMPLATE = (
    "[System: {filename} is attached as {media_id}."
    "{{if tool:read_file}} Call read_file with {media_id} to read it."
    "{{else}} Its contents are not available in this turn.{{/if}}]"
)
DATE_SPACER_POINTER_TEMPLATE = (
    "{{if tool:reveal_message_metadata}}"
    " Call reveal_message_metadata with a ref_N for a message's exact time.{{/if}}"
)
"""Seed 002: the date spacer points at reveal_message_metadata only when the turn offers it."""
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

_DOCUMENT_FIELD = re.compile(r"\{(filename|media_id)\}")
_SEMICOLON_BETWEEN_WORDS = re.compile(r";(?=\s)")


class RenderInputs(NamedTuple):
    """What every entry's rendering depends on besides the entry itself (the tokenizer that
    counted its items included)."""

    persona_name: str
    force_lowercase: bool
    punctuation_splits: bool
    impersonated_user_id: int | None
    timezone: tzinfo
    counter: str = ""


@dataclass(slots=True, unsafe_hash=True)
class RenderedEntry:
    """One simplified entry as a turn rendered it (immutable by contract, not ``frozen``: see
    `simplify.EntryPart`).

    ``label`` is the author label with macros resolved; ``first_day`` and ``last_day`` are the
    local calendar days of its first and last message; ``spacer`` is the date spacer rendered
    before it (None when the day did not change).
    """

    entry: SimplifiedEntry
    media: EntryMedia
    label: str
    role: Role
    first_day: date
    last_day: date
    item: ContextItem
    spacer: ContextItem | None = None


@dataclass(frozen=True, slots=True)
class RenderedDialogue:
    """A turn's dialogue, one `RenderedEntry` per simplified entry, oldest first.

    ``inputs`` is everything turn-wide that every entry's rendering depended on (persona,
    impersonation, timezone); ``document_hint`` is the hint template expanded for the turn's
    tools, which only entries with documents depend on. The channel's next turn passes this
    as ``previous`` to `render_dialogue`, which re-renders only the entries that are new,
    changed or show different media; everything else keeps its item objects, so their token
    counts and string hashes carry over too.
    """

    entries: tuple[RenderedEntry, ...]
    inputs: RenderInputs
    document_hint: str
    spacer_pointer: str = ""
    images_at: tuple[int, ...] = field(default=(), compare=False)
    """Positions of the entries with images, documents, and author names holding macros or
    markup: all that can keep an unchanged entry from standing as it was (`render_dialogue`)."""
    documents_at: tuple[int, ...] = field(default=(), compare=False)
    labels_at: tuple[int, ...] = field(default=(), compare=False)

    @property
    def items(self) -> tuple[ContextItem, ...]:
        """The dialogue's items in order: each entry's item, after its date spacer if any."""
        items: list[ContextItem] = []
        append = items.append
        for rendered in self.entries:
            if rendered.spacer is not None:
                append(rendered.spacer)
            append(rendered.item)
        return tuple(items)

    def completion_texts(self) -> dict[tuple[int, ...], str]:
        """Each entry's completion projection (`_completion_text`), by its item's source ids."""
        humanizer = _stable_humanizer(self.inputs)
        return {r.item.source_ids: _completion_text(r, humanizer) for r in self.entries}


def render_dialogue(
    history: Sequence[SimplifiedEntry],
    *,
    persona: PersonaProfile,
    impersonated_user_id: int | None,
    macros: MacroContext,
    timezone: tzinfo,
    media_window: int,
    fetch_limit: int,
    previous: RenderedDialogue | None = None,
    counter: TokenCounter | None = None,
    kept_entries: int | None = None,
) -> RenderedDialogue:
    """Render the simplified history as dialogue items (notes are placed later, `place_notes`).

    Steps:
        1. Plan media over the newest ``min(media_window, fetch_limit)`` messages.
        2. Expand the document hint template and the date spacer's pointer to
           reveal_message_metadata once with the turn's tools (``macros.tools``).
        3. For each entry: a date spacer when its calendar day in ``timezone`` differs from the
           previous entry's (the first entry gets none: the window's start is not a day change),
           then the entry item with its role, label, media markers and document hints.

    An entry is taken from ``previous`` instead of being rendered when it is the same entry
    object at the same position (simplification resumed from the previous turn), its media
    plan and label are equal, the turn-wide inputs are equal, and (for an entry with
    documents) so is the expanded document hint: the result is the same either way.

    Args:
        history: Simplified history, oldest first.
        persona: The persona speaking this turn: its own messages are ``assistant`` and pass
            through its deterministic humanizer toggles.
        impersonated_user_id: A user whose messages are also ``assistant`` (the persona is
            speaking as them); None when not impersonating.
        macros: Resolves author labels and the document hint's tool conditional.
        timezone: The guild's timezone, for date spacers.
        media_window: How many of the newest messages may show media.
        fetch_limit: The turn's normalized fetch limit; it caps the media window.
        previous: The channel's previous turn's result for this persona, or None.
        counter: Counts each item it renders (`ContextItem.tokens`); the items it keeps
            keep theirs (the previous result is reused only under the same tokenizer). None:
            items are left uncounted.
        kept_entries: How many leading entries of ``history`` are ``previous``'s own entry
            objects (`simplify.SimplifiedHistory.kept_entries`): the prefix that stands is
            then found by checking only its entries with images, documents or macro labels.
            None: found by comparing every entry.
    """
    media = plan_media(history, media_window=min(media_window, fetch_limit))
    document_hint = expand_macros(DOCUMENT_HINT_TEMPLATE, macros)
    inputs = RenderInputs(
        persona.name,
        persona.force_lowercase,
        persona.punctuation_splits,
        impersonated_user_id,
        timezone,
        counter.name if counter is not None else "",
    )
    count = counter.count if counter is not None else None
    reusable = previous.entries if previous is not None and previous.inputs == inputs else ()
    hint_changed = previous is None or previous.document_hint != document_hint
    spacer_pointer = expand_macros(DATE_SPACER_POINTER_TEMPLATE, macros)
    pointer_changed = previous is not None and previous.spacer_pointer != spacer_pointer
    humanizer = _stable_humanizer(inputs)
    rendered: list[RenderedEntry] = []
    previous_day: date | None = None
    position = 0
    if previous is not None and reusable and kept_entries and not pointer_changed:
        position = _standing_prefix(
            previous, history, media, macros, kept=kept_entries, hint_changed=hint_changed
        )
        rendered = list(reusable[:position])
        previous_day = rendered[-1].last_day if rendered else None
    standing = position  # these are the previous entries as they were, at the same positions
    while position < len(history):
        # The entries standing as they were, taken whole (a warm turn's window is the previous
        # one plus what is new: all of them but a few), when the entry before them ends on
        # the day it ended on before, so their date spacers stand too.
        if not pointer_changed and (
            position == 0 or previous_day == reusable[position - 1].last_day
            if position <= len(reusable)
            else False
        ):
            run = _reusable_run(
                reusable, history, media, macros, start=position, hint_changed=hint_changed
            )
            if run:
                rendered.extend(reusable[position : position + run])
                position += run
                previous_day = rendered[-1].last_day
                continue
        entry, entry_media = history[position], media[position]
        cached = reusable[position] if position < len(reusable) else None
        label = (
            cached.label
            if cached is not None and cached.label is entry.author_name
            else expand_macros(entry.author_name, macros)
        )
        if (
            cached is None
            or cached.entry is not entry
            or (cached.media is not entry_media and cached.media != entry_media)
            or cached.label != label
            or (hint_changed and entry.documents)
        ):
            cached = None
            parts = entry.parts
            first, last = parts[0].created_at, parts[-1].created_at
            day = first.astimezone(timezone).date()
            if day == previous_day:
                day = previous_day  # a kept dialogue holds one date object per day
            last_day = day if last is first else last.astimezone(timezone).date()
            if last_day == day:
                last_day = day
            role = (
                Role.ASSISTANT
                if entry.kind is EntryKind.MESSAGE
                and (entry.persona_name == persona.name or entry.author_id == impersonated_user_id)
                else Role.USER
            )  # the persona's own messages and the impersonated user's; others' are the user's
            item = _entry_item(
                entry,
                entry_media,
                role=role,
                label=label,
                humanizer=humanizer if role is Role.ASSISTANT else None,
                document_hint=document_hint,
                count=count,
            )
        else:
            day, last_day, role, item = cached.first_day, cached.last_day, cached.role, cached.item
        spacer = None
        if previous_day is not None and day != previous_day:
            kept = cached.spacer if cached is not None and not pointer_changed else None
            spacer = kept or date_spacer(day, pointer=spacer_pointer)
            if count is not None and not spacer.tokens:
                spacer = spacer.with_tokens(count(spacer.text))
        if cached is None or spacer is not cached.spacer:
            cached = RenderedEntry(entry, entry_media, label, role, day, last_day, item, spacer)
        rendered.append(cached)
        previous_day = last_day
        position += 1
    images_at: list[int] = []
    documents_at: list[int] = []
    labels_at: list[int] = []
    if previous is not None and standing:
        images_at = [at for at in previous.images_at if at < standing]
        documents_at = [at for at in previous.documents_at if at < standing]
        labels_at = [at for at in previous.labels_at if at < standing]
    for at in range(standing, len(rendered)):
        entry = rendered[at].entry
        if entry.images:
            images_at.append(at)
        if entry.documents:
            documents_at.append(at)
        if _may_expand(entry.author_name):
            labels_at.append(at)
    return RenderedDialogue(
        tuple(rendered),
        inputs,
        document_hint,
        spacer_pointer,
        tuple(images_at),
        tuple(documents_at),
        tuple(labels_at),
    )


def _may_expand(text: str) -> bool:
    """Whether `expand_macros` could change ``text`` (its fast path's test)."""
    return "{" in text or "<" in text


def _standing_prefix(
    previous: RenderedDialogue,
    history: Sequence[SimplifiedEntry],
    media: Sequence[EntryMedia],
    macros: MacroContext,
    *,
    kept: int,
    hint_changed: bool,
) -> int:
    """How many leading entries of ``previous`` stand as they were, of the ``kept`` that are
    the same entry objects: up to the first whose media plan changed, that holds a document
    when the hint changed, or whose label expands differently. Only those entries are looked
    at (`RenderedDialogue.images_at` and the others): the rest cannot differ. Their date
    spacers stand too: each depends only on the entries before it."""
    entries = previous.entries
    standing = min(kept, len(entries), len(history))
    for at in previous.images_at:
        if at >= standing:
            break
        if entries[at].media is not media[at] and entries[at].media != media[at]:
            standing = at
            break
    if hint_changed and previous.documents_at and previous.documents_at[0] < standing:
        standing = previous.documents_at[0]
    for at in previous.labels_at:
        if at >= standing:
            break
        if entries[at].label != expand_macros(history[at].author_name, macros):
            standing = at
            break
    return standing


def _reusable_run(
    reusable: Sequence[RenderedEntry],
    history: Sequence[SimplifiedEntry],
    media: Sequence[EntryMedia],
    macros: MacroContext,
    *,
    start: int,
    hint_changed: bool,
) -> int:
    """How many entries of ``reusable`` from ``start`` on stand as they are: the same entry
    object at the same position, showing the same media under the same label, and (with
    ``hint_changed``) holding no document. Their date spacers stand too when the entry before
    ``start`` ends on the day it ended on before: each depends only on the entries before
    it."""
    end = min(len(reusable), len(history))
    position = start
    while position < end:
        cached, entry, entry_media = reusable[position], history[position], media[position]
        if cached.entry is not entry or (hint_changed and entry.documents):
            break
        if cached.media is not entry_media and cached.media != entry_media:
            break
        if cached.label is not entry.author_name and cached.label != expand_macros(
            entry.author_name, macros
        ):
            break
        position += 1
    return position - start


def date_label(day: date) -> str:
    """``Saturday, July 11, 2026``: absolute, English, locale-independent."""
    return f"{WEEKDAYS[day.weekday()]}, {MONTHS[day.month - 1]} {day.day}, {day.year}"


def date_spacer(day: date, *, pointer: str = "") -> ContextItem:
    """``[System: New day: Saturday, July 11, 2026]``: absolute, English, locale-independent;
    ``pointer`` (the expanded `DATE_SPACER_POINTER_TEMPLATE`) follows the date when the turn
    offers reveal_message_metadata."""
    text = f"New day: {date_label(day)}" + (f".{pointer}" if pointer else "")
    return ContextItem(tag=ItemTag.DATE_SPACER, role=Role.USER, text=system_note(text))


def humanize_stably(text: str, *, force_lowercase: bool, punctuation_splits: bool) -> str:
    """The deterministic part of the persona's humanizer, for its own past messages.

    ``punctuation_splits`` turns a semicolon between words into a full stop (the live humanizer
    splits sentences there); ``force_lowercase`` lowercases. The live humanizer's random comma
    noise is never applied to history: it would change the prompt every turn.
    """
    if punctuation_splits:
        text = _SEMICOLON_BETWEEN_WORDS.sub(".", text)
    return text.lower() if force_lowercase else text


def _stable_humanizer(inputs: RenderInputs) -> Callable[[str], str] | None:
    """`humanize_stably` with the persona's toggles; None when both are off."""
    if not (inputs.force_lowercase or inputs.punctuation_splits):
        return None
    return partial(
        humanize_stably,
        force_lowercase=inputs.force_lowercase,
        punctuation_splits=inputs.punctuation_splits,
    )


def _entry_item(
    entry: SimplifiedEntry,
    media: EntryMedia,
    *,
    role: Role,
    label: str,
    humanizer: Callable[[str], str] | None,
    document_hint: str,
    count: Callable[[str], int] | None = None,
) -> ContextItem:
    """Render one entry; ``humanizer`` applies to its words (given for the persona's own);
    ``count`` counts its tokens (None: left at 0)."""
    if entry.kind is EntryKind.BLOCKED:
        hidden = len(entry.parts)
        text = system_note(f"{hidden} message(s) from a user you have blocked are hidden.")
    elif entry.kind is EntryKind.NOTICE:
        text = "\n".join(system_note(part.body) for part in entry.parts)
    else:
        text = _message_text(entry, media, label, humanizer, document_hint)
    return ContextItem(
        tag=ItemTag.DIALOGUE_HISTORY,
        role=role,
        text=text,
        source_ids=entry.message_ids,
        media=media.shown,
        tokens=count(text) if count is not None else 0,
    )


def _message_text(
    entry: SimplifiedEntry,
    media: EntryMedia,
    label: str,
    humanizer: Callable[[str], str] | None,
    document_hint: str,
) -> str:
    """The text of a MESSAGE entry: one line per part, then the media annotations."""
    lines = []
    for part in entry.parts:
        body = humanizer(part.body) if humanizer else part.body
        lines.append(" ".join([piece for piece in (part.head, body, part.tail) if piece]))
    content = "\n".join(lines)
    if media.shown or media.over_limit or media.repeated or entry.documents:
        content = " ".join([content, *_media_annotations(entry, media, document_hint)])
    return f"{label}: {content}"


def _completion_text(rendered: RenderedEntry, humanizer: Callable[[str], str] | None) -> str:
    """What a completion model reads for one entry (seed 002's NovelAI projection): the words
    under the label, without references, reactions or media hints; a notice's prose; nothing
    for a blocked run or an entry without words. ``humanizer`` applies to the persona's own."""
    entry = rendered.entry
    if entry.kind is EntryKind.BLOCKED:
        return ""
    if entry.kind is EntryKind.NOTICE:
        return entry.prose
    own = humanizer if rendered.role is Role.ASSISTANT else None
    bodies = [own(part.body) if own else part.body for part in entry.parts]
    prose = "\n".join(body for body in bodies if body)
    return f"{rendered.label}: {prose}" if prose else ""


def _media_annotations(entry: SimplifiedEntry, media: EntryMedia, document_hint: str) -> list[str]:
    annotations = [_image_marker(image) for image in media.shown]
    if media.over_limit:
        annotations.append(
            f"[System: {media.over_limit} image(s) omitted due to rendered-image limit]"
        )
    if media.repeated:
        annotations.append(f"[System: {media.repeated} image(s) omitted here; shown again later]")
    annotations += [_document_hint(document_hint, document) for document in entry.documents]
    return annotations


def _image_marker(image: MediaDescriptor) -> str:
    kind = "GIF" if image.is_gif else "image"
    return f"[{kind} {image.key}: {image.filename}]"


def _document_hint(expanded_template: str, document: MediaDescriptor) -> str:
    """Fill an already expanded hint in one pass: the filename is inserted, never parsed."""
    values = {"filename": document.filename, "media_id": document.key}
    return _DOCUMENT_FIELD.sub(lambda match: values[match[1]], expanded_template)
