"""Reads of short-term memory: a scope's memory, a persona's list, what is due for a refresh."""

from __future__ import annotations

import datetime as dt

from django.db.models import F

from chat.models import (
    ShortTermMemory,
    UnreadEvent,
)
from personas.models import Persona


def short_term_memory(
    *, persona: Persona, channel_id: int, user_id: int | None = None
) -> ShortTermMemory | None:
    """The persona's memory of the channel (``user_id`` None), or of its DM with ``user_id``;
    None when it has none. A channel's memory is only ever read for that channel."""
    if user_id is not None:  # a DM memory belongs to the user, whichever DM channel it is
        return ShortTermMemory.objects.filter(persona=persona, user_id=user_id).first()
    return ShortTermMemory.objects.filter(
        persona=persona, channel_id=channel_id, user_id=None
    ).first()


def short_term_memories(*, persona_id: int) -> list[ShortTermMemory]:
    """Every memory the persona keeps, newest change first (the dashboard's list)."""
    return list(
        ShortTermMemory.objects.filter(persona_id=persona_id)
        .select_related("persona")
        .order_by("-updated_at", "id")
    )


def short_term_memories_due(
    *, now: dt.datetime, idle_for: dt.timedelta, raw_turns_ttl: dt.timedelta
) -> list[int]:
    """Ids of memories the background maintenance should refresh at ``now``: the persona is
    enabled and has tools on, its unexpired raw turns reached its cadence, and the channel has
    been idle: no raw turn for ``idle_for`` and nothing waiting in its unread pool. Oldest
    first. The task re-checks each row
    (`chat.pipeline.memory.short_term_memory_maintenance_due`)."""
    busy = UnreadEvent.objects.values("channel_id")
    rows = (
        ShortTermMemory.objects.filter(
            persona__enabled=True,
            persona__tools_enabled=True,
            turns_since_refresh__gte=F("persona__short_term_memory_refresh_every"),
            last_turn_at__gt=now - raw_turns_ttl,
            last_turn_at__lte=now - idle_for,
        )
        .exclude(channel_id__in=busy)
        .order_by("last_turn_at")
    )
    return list(rows.values_list("id", flat=True))


def short_term_memory_get(*, memory_id: int) -> ShortTermMemory | None:
    """The memory with its persona; None when it is gone."""
    return ShortTermMemory.objects.select_related("persona").filter(id=memory_id).first()
