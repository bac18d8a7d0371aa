"""The items a turn places inside the dialogue rather than in the system block
(`chat.pipeline.context`): fired lorebook entries, the recalled memories and the short-term
memory at its saved depth. What changes with what is being said sits there, after the cacheable
prefix, so it costs the provider's prompt cache nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chat.pipeline.items import ContextItem, ItemTag, system_note
from chat.pipeline.lorebook import LoreActivation, LoreHit, LorePosition
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.memory import SHORT_TERM_MEMORY_HEADER
from chat.pipeline.recall import memory_note_text
from chat.pipeline.truncation import is_placed_at_depth
from chat.pipeline.types import Role


def in_configuration(hit: LoreHit) -> bool:
    """A constant entry placed before or after the character definitions stays in the system
    block (stable: it may sit in the cacheable prefix); every other fired entry goes into the
    dialogue."""
    return hit.entry.constant and hit.entry.position is not LorePosition.AT_DEPTH


def lore_at_depth(
    lore: LoreActivation, macros: MacroContext, *, after_prefix: int
) -> tuple[ContextItem, ...]:
    """Fired entries that go into the dialogue, each with its depth, in prompt order.

    An ``AT_DEPTH`` entry keeps its depth and role (a ``system`` role becomes a ``[System: …]``
    note: system-role items would move into the system block). An entry activated by its keys
    to go before or after the character definitions is placed right after the cacheable
    prefix of the dialogue (with its notes; ``after_prefix`` is how many dialogue entries follow
    that prefix's end), as a note: it changes from turn to turn, and there it costs the
    provider's prompt cache nothing (DESIGN §3).
    """
    placed = []
    for position in (LorePosition.BEFORE_CHAR, LorePosition.AFTER_CHAR, LorePosition.AT_DEPTH):
        for hit in lore.inserted:
            if in_configuration(hit) or hit.entry.position is not position:
                continue
            entry = hit.entry
            text = expand_macros(entry.content, macros).strip()
            if position is LorePosition.AT_DEPTH and entry.role is not Role.SYSTEM:
                role, depth = entry.role, entry.depth
            else:
                role, text = Role.USER, system_note(text)
                depth = entry.depth if position is LorePosition.AT_DEPTH else after_prefix
            placed.append(ContextItem(tag=ItemTag.LOREBOOK, role=role, text=text, depth=depth))
    return tuple(placed)


def recalled_memories(memories: Sequence[str]) -> tuple[ContextItem, ...]:
    """The recalled memories as one ``[System: …]`` item after the dialogue (`recall.py`);
    empty when none were recalled. Not in the system block: recall changes with what is being
    said, and anything that changes there would end the cacheable prefix at the very start."""
    text = memory_note_text(memories)
    if text is None:
        return ()
    return (ContextItem(tag=ItemTag.MEMORY, role=Role.USER, text=system_note(text)),)


def with_recalled_memories(
    dialogue: Sequence[ContextItem], memories: Sequence[str]
) -> tuple[tuple[ContextItem, ...], int | None]:
    """``dialogue`` (notes placed) with the recalled memories as late as the cacheable prefix
    allows: right before its first item placed at a depth (a note, the short-term memory or a
    lorebook entry: they move with every message, so the provider's cache of the previous
    request ends there), or after the last entry when there is none, or when no entry
    precedes it (a conversation shorter than the note's depth: the note stays first until
    the conversation outgrows it, and memories before every entry would end the repeated
    prefix there, at the start of the dialogue). Returns the items and the message the entry
    before the memories ends with (None when nothing was recalled or no entry precedes them):
    the next turns keep this set after that message (`memories_shown_earlier`), inside the
    repeated prefix, so a memory is new to the provider's cache only in the turn that recalls
    it."""
    recalled = recalled_memories(memories)
    if not recalled:
        return tuple(dialogue), None
    at = len(dialogue)
    for n, item in enumerate(dialogue):
        if item.tag is not ItemTag.DIALOGUE_HISTORY and is_placed_at_depth(item):
            at = n
            break
    before = next(
        (item for item in reversed(dialogue[:at]) if item.tag is ItemTag.DIALOGUE_HISTORY), None
    )
    if before is None:  # a conversation shorter than the first note's depth: after its end
        at = len(dialogue)
        before = next(
            (item for item in reversed(dialogue) if item.tag is ItemTag.DIALOGUE_HISTORY), None
        )
    after = before.source_ids[-1] if before is not None and before.source_ids else None
    return (*dialogue[:at], *recalled, *dialogue[at:]), after


def memories_shown_earlier(
    dialogue: Sequence[ContextItem], shown: Mapping[int, Sequence[Sequence[str]]]
) -> tuple[ContextItem, ...]:
    """``dialogue`` with the memories earlier turns recalled kept where they were shown.

    ``shown`` maps the message earlier turns of this persona showed their recalled memories
    after (`with_recalled_memories`) to those sets of lines, oldest first. Each set goes back,
    one item each, right after the entry
    holding that message, as the very item that turn sent (`recalled_memories`), tagged
    ``MEMORY_SHOWN``: the next request then repeats the previous one up to and past it, so a
    memory is new to the provider's prompt cache once, in the turn that recalls it, not in
    every turn. A message no longer in the dialogue takes its memories with it."""
    if not shown:
        return tuple(dialogue)
    placed: list[ContextItem] = []
    waiting = dict(shown)
    for item in dialogue:
        placed.append(item)
        if item.tag is not ItemTag.DIALOGUE_HISTORY:
            continue
        for message_id in item.source_ids:  # the first entry holding it (a reply quotes it)
            for lines in waiting.pop(message_id, ()):
                for recalled in recalled_memories(lines):
                    placed.append(
                        ContextItem(
                            tag=ItemTag.MEMORY_SHOWN, role=recalled.role, text=recalled.text
                        )
                    )
    return tuple(placed)


def short_term_memory_at_depth(
    short_term_memory_text: str | None, short_term_memory_depth: int | None
) -> tuple[ContextItem, ...]:
    """The short-term memory as a ``[System: …]`` item at its saved depth; empty when it has
    no depth (it is then in the system block) or there is no memory to show."""
    if short_term_memory_depth is None or not (
        short_term_memory_text and short_term_memory_text.strip()
    ):
        return ()
    text = f"{SHORT_TERM_MEMORY_HEADER}\n{short_term_memory_text.strip()}"
    return (
        ContextItem(
            tag=ItemTag.SHORT_TERM_MEMORY,
            role=Role.USER,
            text=system_note(text),
            depth=short_term_memory_depth,
        ),
    )
