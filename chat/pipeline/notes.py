"""Context notes at depth (seed 002, "Context note and spacer injection"; DESIGN §5).

A note is injected ``depth`` entries from the end of the dialogue: at position
``max(0, n − depth)`` it goes right before that entry (after the entry's date spacer); depth 0
puts it after the last entry. Depths count entries, not spacers or other notes. Truncation calls
`place_notes` again on the surviving history, so a note keeps its depth however much is cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from chat.pipeline.items import ContextItem, ItemTag, system_note
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.types import ContextNote, Role

TIME_AWARENESS_NOTE_DEPTH = 3
VERBATIM_TOOL_CALLING_NUDGE = (
    "When you call a tool, emit the call in the exact tool-calling format you were given. "
    "Never describe a tool call in prose or imitate one in your reply."
)


def active_context_notes(
    *,
    persona_note: ContextNote | None,
    channel_note: ContextNote | None,
    global_note: ContextNote | None,
    verbatim_tool_nudge: bool,
    reunion_note: str | None,
) -> tuple[ContextNote, ...]:
    """The notes this turn injects, in their same-position order.

    Persona and channel notes add up; the guild-wide note is a fallback used only when neither
    is configured. The verbatim tool-calling nudge (when flagged) and the reunion note (when
    precomputed for a returning user) sit at `TIME_AWARENESS_NOTE_DEPTH`. A note with blank
    text counts as not configured.
    """
    configured = [note for note in (persona_note, channel_note) if note and note.text.strip()]
    if not configured and global_note and global_note.text.strip():
        configured.append(global_note)
    if verbatim_tool_nudge:
        configured.append(ContextNote(VERBATIM_TOOL_CALLING_NUDGE, TIME_AWARENESS_NOTE_DEPTH))
    if reunion_note and reunion_note.strip():
        configured.append(ContextNote(reunion_note, TIME_AWARENESS_NOTE_DEPTH))
    return tuple(configured)


def context_note_items(
    notes: Sequence[ContextNote], macros: MacroContext
) -> tuple[ContextItem, ...]:
    """Render notes as ``[System: …]`` items (macros resolved) that remember their depth."""
    items = []
    for note in notes:
        text = expand_macros(note.text, macros)
        items.append(
            ContextItem(
                tag=ItemTag.CONTEXT_NOTE_INJECTION,
                role=Role.USER,
                text=system_note(text),
                depth=note.depth,
            )
        )
    return tuple(items)


def place_notes(
    history: Sequence[ContextItem], notes: Sequence[ContextItem]
) -> tuple[ContextItem, ...]:
    """Insert note items into a dialogue made of entries and date spacers.

    Args:
        history: Dialogue items without notes: DIALOGUE_HISTORY entries, each possibly preceded
            by its DATE_SPACER.
        notes: Note items with ``depth`` set, in same-position order.

    Returns:
        The dialogue with each note right before the entry at ``max(0, n − depth)`` (after that
        entry's spacer), or after the last entry when the position is ``n``.
    """
    if not notes:
        return tuple(history)
    # A note at depth d goes before the d-th entry from the end: only the newest entries (as
    # many as the deepest note's depth) are looked for, from the end.
    deepest = max((note.depth or 0) for note in notes)
    newest_first: list[int] = []
    for index in range(len(history) - 1, -1, -1):
        if len(newest_first) >= deepest:
            break
        if history[index].tag is ItemTag.DIALOGUE_HISTORY:
            newest_first.append(index)
    by_cut: dict[int, list[ContextItem]] = {}
    for note in notes:
        depth = note.depth or 0
        if depth <= 0 or not newest_first:
            cut = len(history)  # after the last entry
        else:  # before that entry; a depth past the first entry: before the first
            cut = newest_first[min(depth, len(newest_first)) - 1]
        by_cut.setdefault(cut, []).append(note)
    placed: list[ContextItem] = []
    start = 0
    for cut in sorted(by_cut):
        placed.extend(history[start:cut])
        placed.extend(by_cut[cut])
        start = cut
    placed.extend(history[start:])
    return tuple(placed)
