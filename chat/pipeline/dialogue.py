"""The dialogue history contributor (seed 002): simplified history to tagged prompt items.

Each entry becomes one DIALOGUE_HISTORY item ``Name: content``; date spacers and context notes
are injected between them. What this stage leaves out, and why:

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
from datetime import date, tzinfo
from functools import partial

from chat.pipeline.items import ContextItem, ItemTag, MediaDescriptor
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.media import EntryMedia, plan_media
from chat.pipeline.notes import context_note_items, place_notes
from chat.pipeline.simplify import EntryKind, SimplifiedEntry
from chat.pipeline.types import ContextNote, PersonaSpec, Role

DOCUMENT_HINT_TEMPLATE = (
    "[System: {filename} is attached as {media_id}."
    "{{if tool:read_file}} Call read_file with {media_id} to read it."
    "{{else}} Its contents are not available in this turn.{{/if}}]"
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

_DOCUMENT_FIELD = re.compile(r"\{(filename|media_id)\}")
_SEMICOLON_BETWEEN_WORDS = re.compile(r";(?=\s)")


def append_dialogue_history(
    items: Sequence[ContextItem],
    history: Sequence[SimplifiedEntry],
    *,
    persona: PersonaSpec,
    impersonated_user_id: int | None,
    macros: MacroContext,
    timezone: tzinfo,
    media_window: int,
    fetch_limit: int,
    notes: Sequence[ContextNote],
    placed: Sequence[ContextItem] = (),
) -> tuple[ContextItem, ...]:
    """Return ``items`` followed by the rendered dialogue history.

    Steps:
        1. Plan media over the newest ``min(media_window, fetch_limit)`` messages.
        2. Expand the document hint template once with the turn's tools (``macros.tools``).
        3. For each entry: a date spacer when its calendar day in ``timezone`` differs from the
           previous entry's (the first entry gets none: the window's start is not a day change),
           then the entry item with its role, label, media markers and document hints.
        4. Place ``placed`` items (the short-term memory at its saved depth), then ``notes``,
           at their depths (`notes.place_notes`).

    Args:
        items: The items so far (system prompt, memories, samples …); returned unchanged first.
        history: Simplified history, oldest first.
        persona: The persona speaking this turn: its own messages are ``assistant`` and pass
            through its deterministic humanizer toggles.
        impersonated_user_id: A user whose messages are also ``assistant`` (the persona is
            speaking as them); None when not impersonating.
        macros: Resolves author labels and the document hint's tool conditional.
        timezone: The guild's timezone, for date spacers.
        media_window: How many of the newest messages may show media.
        fetch_limit: The turn's normalized fetch limit; it caps the media window.
        notes: The turn's active notes in same-position order (`notes.active_context_notes`).
        placed: Ready items with ``depth`` set, placed like notes ahead of them.

    Returns:
        A new tuple; DIALOGUE_HISTORY, DATE_SPACER and CONTEXT_NOTE_INJECTION items follow
        ``items``.
    """
    media = plan_media(history, media_window=min(media_window, fetch_limit))
    document_hint = expand_macros(DOCUMENT_HINT_TEMPLATE, macros)
    humanizer = _stable_humanizer(persona)
    dialogue: list[ContextItem] = []
    previous_day: date | None = None
    for entry, entry_media in zip(history, media, strict=True):
        first, last = entry.parts[0].created_at, entry.parts[-1].created_at
        day = first.astimezone(timezone).date()
        if previous_day is not None and day != previous_day:
            dialogue.append(date_spacer(day))
        previous_day = day if last is first else last.astimezone(timezone).date()
        role = dialogue_role(entry, persona.name, impersonated_user_id)
        dialogue.append(
            _entry_item(
                entry,
                entry_media,
                role=role,
                label=expand_macros(entry.author_name, macros),
                humanizer=humanizer if role is Role.ASSISTANT else None,
                document_hint=document_hint,
            )
        )
    return (*items, *place_notes(dialogue, (*placed, *context_note_items(notes, macros))))


def date_label(day: date) -> str:
    """``Saturday, July 11, 2026``: absolute, English, locale-independent."""
    return f"{WEEKDAYS[day.weekday()]}, {MONTHS[day.month - 1]} {day.day}, {day.year}"


def date_spacer(day: date) -> ContextItem:
    """``[System: New day: Saturday, July 11, 2026]``: absolute, English, locale-independent."""
    label = date_label(day)
    return ContextItem(
        tag=ItemTag.DATE_SPACER,
        role=Role.USER,
        text=f"[System: New day: {label}]",
        completion_text=f"New day: {label}",
    )


def humanize_stably(text: str, *, force_lowercase: bool, punctuation_splits: bool) -> str:
    """The deterministic part of the persona's humanizer, for its own past messages.

    ``punctuation_splits`` turns a semicolon between words into a full stop (the live humanizer
    splits sentences there); ``force_lowercase`` lowercases. The live humanizer's random comma
    noise is never applied to history: it would change the prompt every turn.
    """
    if punctuation_splits:
        text = _SEMICOLON_BETWEEN_WORDS.sub(".", text)
    return text.lower() if force_lowercase else text


def dialogue_role(
    entry: SimplifiedEntry, persona_name: str, impersonated_user_id: int | None
) -> Role:
    """``assistant`` for the persona's own messages and the impersonated user's; else ``user``
    (other personas, people, notices)."""
    if entry.kind is EntryKind.MESSAGE and (
        entry.persona_name == persona_name or entry.author_id == impersonated_user_id
    ):
        return Role.ASSISTANT
    return Role.USER


def _stable_humanizer(persona: PersonaSpec) -> Callable[[str], str] | None:
    """`humanize_stably` with the persona's toggles; None when both are off."""
    if not (persona.force_lowercase or persona.punctuation_splits):
        return None
    return partial(
        humanize_stably,
        force_lowercase=persona.force_lowercase,
        punctuation_splits=persona.punctuation_splits,
    )


def _entry_item(
    entry: SimplifiedEntry,
    media: EntryMedia,
    *,
    role: Role,
    label: str,
    humanizer: Callable[[str], str] | None,
    document_hint: str,
) -> ContextItem:
    """Render one entry; ``humanizer`` applies to its words (given for the persona's own)."""
    if entry.kind is EntryKind.BLOCKED:
        count = len(entry.parts)
        text = f"[System: {count} message(s) from a user you have blocked are hidden.]"
        completion_text = ""
    elif entry.kind is EntryKind.NOTICE:
        text = "\n".join(f"[System: {part.body}]" for part in entry.parts)
        completion_text = entry.prose
    else:
        text, completion_text = _message_texts(entry, media, label, humanizer, document_hint)
    return ContextItem(
        tag=ItemTag.DIALOGUE_HISTORY,
        role=role,
        text=text,
        completion_text=completion_text,
        source_ids=entry.message_ids,
        media=media.shown,
    )


def _message_texts(
    entry: SimplifiedEntry,
    media: EntryMedia,
    label: str,
    humanizer: Callable[[str], str] | None,
    document_hint: str,
) -> tuple[str, str]:
    """(text, completion text) of a MESSAGE entry: one line per part, then the media
    annotations; the completion text keeps only the words."""
    bodies = [humanizer(part.body) if humanizer else part.body for part in entry.parts]
    lines = [
        " ".join(piece for piece in (part.head, body, part.tail) if piece)
        for part, body in zip(entry.parts, bodies, strict=True)
    ]
    content = " ".join(["\n".join(lines), *_media_annotations(entry, media, document_hint)])
    prose = "\n".join(body for body in bodies if body)
    return f"{label}: {content}", f"{label}: {prose}" if prose else ""


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
