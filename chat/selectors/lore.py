"""The lorebooks a turn activates, read from the persona's and the guild's rows
(`chat.pipeline.lorebook` compiles and activates them)."""

from __future__ import annotations

from chat.caches import BoundedCache
from chat.pipeline.lorebook import (
    CompiledLorebook,
    Lorebook,
    LoreEntry,
    LorePosition,
    SelectiveLogic,
    compile_lorebook,
)
from chat.pipeline.types import Role
from personas.models import GuildConfig, Persona

COMPILED_LOREBOOKS_MAX = 256
_compiled_lorebooks: BoundedCache[tuple[str, int], tuple[object, CompiledLorebook]] = BoundedCache(
    COMPILED_LOREBOOKS_MAX
)
"""Compiled books by (owner kind, row id), with the stored book they were compiled from:
compiling indexes every key, so a book is compiled once per change, not once per turn
(comparing the stored book costs far less than compiling it)."""


def lorebooks(*, persona: Persona, guild: GuildConfig | None) -> tuple[CompiledLorebook, ...]:
    """The persona's lorebook, then its guild's, compiled (`chat.pipeline.lorebook`); empty
    when neither has one. A book is named by its ``name``, else by whose it is. A saved row's
    book is compiled once per change; an unsaved one's (a draft persona) each time."""
    owners = [("persona", persona, f"{persona.name}'s lorebook")]
    if guild is not None:
        owners.append(("guild", guild, "the guild's lorebook"))
    books = []
    for kind, owner, fallback_name in owners:
        stored = owner.lorebook
        if not stored:
            continue
        if owner._state.adding:  # an unsaved draft (a persona test run): never cached
            books.append(
                compile_lorebook(lorebook_from_stored(stored=stored, fallback_name=fallback_name))
            )
            continue
        key = (kind, owner.pk)
        cached = _compiled_lorebooks.get(key)
        if cached is None or cached[0] != owner.updated_at:
            cached = (
                owner.updated_at,
                compile_lorebook(lorebook_from_stored(stored=stored, fallback_name=fallback_name)),
            )
            _compiled_lorebooks.put(key, cached)
        books.append(cached[1])
    return tuple(books)


def lorebook_from_stored(*, stored: dict, fallback_name: str) -> Lorebook:
    """A stored lorebook (the configuration file's ``lorebook`` fields) as the pipeline's.
    An entry without an ``id`` is named by its place (``#3``)."""
    entries = []
    for index, entry in enumerate(stored.get("entries", [])):
        entry_id = entry.get("id")
        entries.append(
            LoreEntry(
                uid=str(entry_id) if entry_id is not None else f"#{index}",
                name=entry.get("name", ""),
                keys=tuple(entry.get("keys", ())),
                secondary_keys=tuple(entry.get("secondary_keys", ())),
                content=entry.get("content", ""),
                selective=entry.get("selective", False),
                selective_logic=SelectiveLogic(entry.get("selective_logic", "and_any")),
                constant=entry.get("constant", False),
                enabled=entry.get("enabled", True),
                insertion_order=entry.get("insertion_order", 100),
                priority=entry.get("priority", 0),
                case_sensitive=entry.get("case_sensitive", False),
                match_whole_words=entry.get("match_whole_words", False),
                use_regex=entry.get("use_regex", False),
                position=LorePosition(entry.get("position", "before_char")),
                depth=entry.get("depth", 4),
                role=Role(entry.get("role", "system")),
                probability=entry.get("probability", 100),
                exclude_recursion=entry.get("exclude_recursion", False),
                prevent_recursion=entry.get("prevent_recursion", False),
            )
        )
    return Lorebook(
        name=stored.get("name") or fallback_name,
        entries=tuple(entries),
        scan_depth=stored.get("scan_depth", 2),
        token_budget=stored.get("token_budget"),
        recursive_scanning=stored.get("recursive_scanning", False),
    )
