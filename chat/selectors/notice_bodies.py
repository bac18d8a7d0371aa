"""The bodies minimal-verbosity notice cards leave out (seed 000, "System notice hydration"):
a card of this bot's that shows only a title and ``memory #N`` gets the memory's current text
back in prompts, read from the live row, so a memory since forgotten or changed is never shown
as it was."""

from __future__ import annotations

from collections.abc import Iterable

from chat.models import Memory
from chat.pipeline.recall import MemoryKind, MemoryRecord, memory_line
from chat.pipeline.types import CardKind, HistoryMessage
from chat.selectors import user_standing


def minimal_notice_memory_ids(*, messages: Iterable[HistoryMessage]) -> set[int]:
    """The memories the minimal notices among ``messages`` confirm."""
    return {
        embed.memory_id
        for message in messages
        for embed in message.embeds
        if embed.kind is CardKind.MINIMAL_NOTICE and embed.memory_id is not None
    }


def minimal_notice_bodies(*, guild_id: int | None, memory_ids: set[int]) -> dict[int, str]:
    """Memory id → the line the prompt shows for it (`memory_line`), for the guild's memories
    among ``memory_ids`` that still exist and whose subject may be remembered (minimal
    privacy, not blacklisted). Queries nothing without ids."""
    if not memory_ids or guild_id is None:
        return {}
    rows = list(
        Memory.objects.filter(guild_id=guild_id, id__in=memory_ids).values_list(
            "id", "kind", "text", "user_id", "subject_name"
        )
    )
    standing = user_standing(user_ids={row[3] for row in rows if row[3]}, guild_id=guild_id)
    return {
        memory_id: memory_line(
            MemoryRecord(id=memory_id, kind=MemoryKind(kind), text=text, subject=subject)
        )
        for memory_id, kind, text, user_id, subject in rows
        if user_id is None or standing.remembers(user_id)
    }
