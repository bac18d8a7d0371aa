"""Short-term memory rows (seed 000, "Short-term memory"): counting delivered turns, writing a
summary, clearing, expiring, claiming a memory for a background refresh and taking it for one
refresh run at a time."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from chat.models import ShortTermMemory, Turn
from chat.pipeline.memory import (
    MAX_CATEGORIES,
    RAW_TURNS_TTL,
    SUMMARY_TTL,
    clip_summary,
    pending_raw_turns,
)
from personas.models import Persona


def short_term_memory_count_turn(*, turn: Turn, user_id: int | None, now: dt.datetime) -> None:
    """Count the delivered ``turn`` as one raw turn of its persona's memory of the channel (of
    the DM with ``user_id``), creating the memory on the first reply; expired raw turns
    (`RAW_TURNS_TTL`) are dropped first. A turn that refreshed the memory itself (the memory
    tool) does not count: its summary covers it. Runs inside the caller's transaction (the
    row is locked while counted)."""
    if turn.persona_id is None:
        return
    # The scope is what the database holds unique: (persona, channel), or (persona, DM user).
    if user_id is None:
        scope = {"channel_id": turn.channel_id, "user_id": None}
    else:
        scope = {"user_id": user_id}
    defaults = {"guild_id": turn.guild_id, "channel_id": turn.channel_id}
    memory, _ = ShortTermMemory.objects.select_for_update().get_or_create(
        persona_id=turn.persona_id, **scope, defaults=defaults
    )
    if memory.last_refreshed_turn_id == turn.id:
        return
    memory.turns_since_refresh = pending_raw_turns(memory.state, now=now) + 1
    memory.last_turn_at = now
    memory.save(update_fields=["turns_since_refresh", "last_turn_at", "updated_at"])


def short_term_memory_write(
    *,
    persona: Persona,
    channel_id: int,
    guild_id: int | None,
    user_id: int | None,
    summary: str,
    categories: Mapping[str, str] | None = None,
    turn_id: int,
    now: dt.datetime,
) -> ShortTermMemory:
    """A refresh: the summary (clipped to 1,500 characters) and the categories (at most five)
    replace the old memory, the raw-turn count resets, and the writing turn and time are
    kept."""
    # A DM memory belongs to the user, whichever DM channel wrote it (one per persona and user).
    scope: dict[str, Any] = {"channel_id": channel_id} if user_id is None else {}
    memory, _ = ShortTermMemory.objects.update_or_create(
        persona=persona,
        user_id=user_id,
        **scope,
        defaults={
            "channel_id": channel_id,
            "summary": clip_summary(summary),
            "categories": dict(list((categories or {}).items())[:MAX_CATEGORIES]),
            "guild_id": guild_id,
            "turns_since_refresh": 0,
            "refreshed_at": now,
            "last_refreshed_turn_id": turn_id,
        },
    )
    return memory


def short_term_memory_clear(*, persona_id: int, memory_id: int | None = None) -> int:
    """Forget the persona's memories: the one ``memory_id`` names (only if it is this
    persona's), else all of them. Returns how many were deleted; the next reply starts a new
    one."""
    rows = ShortTermMemory.objects.filter(persona_id=persona_id)
    if memory_id is not None:
        rows = rows.filter(id=memory_id)
    deleted, _ = rows.delete()
    return deleted


def short_term_memories_forget_user(
    *, guild_id: int, turn_ids: frozenset[int]
) -> tuple[int, list[str]]:
    """Clear the guild's channel short-term memories that may have drawn on a user's lines:
    those last refreshed by one of ``turn_ids`` (the turns that showed their lines), and
    those whose refreshing turn is no longer known. A cleared memory has no summary, notes or
    refresh time; its next refresh writes it again from what may still be seen. Returns how
    many were cleared and their texts (summaries and notes), for the turn records that showed
    them."""
    drew_on = Q(last_refreshed_turn_id__in=turn_ids) | Q(last_refreshed_turn__isnull=True)
    rows = ShortTermMemory.objects.select_for_update().filter(
        drew_on, guild_id=guild_id, user_id__isnull=True
    )
    texts = []
    cleared = 0
    for row in rows:
        notes = row.categories if isinstance(row.categories, dict) else {}
        held = [row.summary, *(str(v) for v in notes.values())]
        held = [t.strip() for t in held if str(t).strip()]
        if not held:
            continue
        texts.extend(held)
        cleared += 1
        row.summary, row.categories, row.refreshed_at = "", {}, None
        row.save(update_fields=["summary", "categories", "refreshed_at", "updated_at"])
    return cleared, texts


def short_term_memory_expire(*, now: dt.datetime) -> int:
    """Clear what has expired at ``now``: summaries and categories older than 24 h, raw-turn
    counts whose newest turn is older than 12 h. Returns how many memories changed."""
    with transaction.atomic():
        summaries = (
            ShortTermMemory.objects.filter(refreshed_at__lte=now - SUMMARY_TTL)
            .filter(~Q(summary="") | ~Q(categories={}))
            .update(summary="", categories={}, updated_at=now)
        )
        summaries += (
            ShortTermMemory.objects.filter(refreshed_at__isnull=True)
            .filter(~Q(summary="") | ~Q(categories={}))
            .update(summary="", categories={}, updated_at=now)
        )
        raw = ShortTermMemory.objects.filter(
            turns_since_refresh__gt=0, last_turn_at__lte=now - RAW_TURNS_TTL
        ).update(turns_since_refresh=0, updated_at=now)
    return summaries + raw


REFRESH_CLAIM_TTL = dt.timedelta(minutes=15)
"""How long a queued background refresh holds its memory (its retries included); a claim older
than this is taken to be lost (a worker that died) and the memory can be queued again."""


def short_term_memory_claim(*, memory_ids: Sequence[int], now: dt.datetime) -> list[int]:
    """Claim memories for a background refresh, one refresh at a time per memory: returns the
    ids that were not already claimed (or whose claim is older than `REFRESH_CLAIM_TTL`), now
    claimed at ``now``. Each claim is one conditional update, so two schedulers never both win."""
    claimed = []
    for memory_id in memory_ids:
        free = Q(refresh_claimed_at__isnull=True) | Q(
            refresh_claimed_at__lte=now - REFRESH_CLAIM_TTL
        )
        rows = ShortTermMemory.objects.filter(free, id=memory_id)
        if rows.update(refresh_claimed_at=now):
            claimed.append(memory_id)
    return claimed


def short_term_memory_release(*, memory_id: int) -> None:
    """End a memory's background-refresh claim (the refresh finished or gave up)."""
    ShortTermMemory.objects.filter(id=memory_id).update(refresh_claimed_at=None)


REFRESH_RUN_TTL = dt.timedelta(minutes=5)
"""How long a running refresh holds its memory; one older than this is taken to be dead (its
process was killed) and the next request may run. A refresh is one model call."""


def short_term_memory_refresh_begin(*, memory_id: int) -> str | None:
    """Take the memory for one refresh run: the run's token, or None when another refresh of
    it runs now (begun less than `REFRESH_RUN_TTL` ago) or the memory is gone.

    One conditional update on the database's clock, so of two requests for one stretch of
    conversation (a task delivered twice, two schedulers, a worker that lost its lease) one
    runs; the other finds the stretch summarised when it comes later (no longer due)."""
    run = uuid.uuid4().hex
    free = Q(refresh_run="") | Q(refresh_run_at__lte=Now() - REFRESH_RUN_TTL)
    taken = ShortTermMemory.objects.filter(free, id=memory_id).update(
        refresh_run=run, refresh_run_at=Now()
    )
    return run if taken else None


def short_term_memory_refresh_end(*, memory_id: int, run: str) -> None:
    """End refresh run ``run`` (a run taken over meanwhile ends nothing)."""
    ShortTermMemory.objects.filter(id=memory_id, refresh_run=run).update(
        refresh_run="", refresh_run_at=None
    )
