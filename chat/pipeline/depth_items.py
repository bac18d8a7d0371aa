"""The items a turn places inside the dialogue rather than in the system block
(`chat.pipeline.context`): fired lorebook entries, the recalled memories and the short-term
memory at its saved depth. What changes with what is being said sits there, after the cacheable
prefix, so it costs the provider's prompt cache nothing."""

from __future__ import annotations

from collections.abc import Sequence

from chat.pipeline.items import ContextItem, ItemTag, system_note
from chat.pipeline.lorebook import LoreActivation, LoreHit, LorePosition
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.memory import SHORT_TERM_MEMORY_HEADER
from chat.pipeline.recall import memory_note_text
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
