"""Memory extraction: after a channel's conversation goes quiet, one model call proposes the
durable facts its people said, which are deduplicated and stored as long-term memories.

`memory_extraction_due` finds the channels to read (Celery beat); `memories_extract` reads one.
Each extraction is a `Turn` of reason ``extraction`` (the turn inspector shows its request, the
model's answer and, in ``reason_detail``, what was stored and what was refused and why).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import Count, Max

from chat import selectors
from chat.llm.embeddings import EmbeddingModel
from chat.models import EventQueue, Memory, Turn
from chat.pipeline.extraction import (
    SERVER,
    ExtractionError,
    build_extraction_messages,
    parse_extraction,
    resolve_subject,
)
from chat.pipeline.items import ItemTag
from chat.pipeline.recall import MemoryKind, window_people
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import PrivacyLevel
from chat.ports import DeliveryError
from chat.services.memory_store import MemoryRefused, MemoryScope, memory_add
from chat.services.spend import spend_site
from chat.services.turn_lifecycle import turn_failed, turn_refused, turn_replied
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.services.turns import turn_ask, turn_prepare

KNOWN_FACTS_SHOWN = 40
"""Most facts already kept that the request lists (so the model proposes what is new)."""


@dataclass(frozen=True)
class Extraction:
    """What `memories_extract` did: ``extracted`` (``turn_id`` holds the record), ``skipped``
    (nothing new, nobody to remember, the channel no longer served), ``waiting`` (the guild's
    budget is spent: the channel is read again once it renews) or ``failed`` (``retry``: a
    model or Discord failure worth another try)."""

    status: str
    detail: str
    turn_id: int | None = None
    retry: bool = False


def last_extracted_message_id(*, channel_id: int) -> int:
    """The newest message the channel's last extraction read (0: none yet); an extraction
    that failed, or that a spent budget refused, read nothing."""
    turn = (
        Turn.objects.filter(channel_id=channel_id, reason=TurnReason.EXTRACTION)
        .exclude(status__in=[Turn.Status.FAILED, Turn.Status.REFUSED])
        .order_by("-id")
        .first()
    )
    return int(turn.reason_detail.get("window_newest_message_id", 0)) if turn else 0


def memory_extraction_due(*, now: dt.datetime) -> list[tuple[int, int]]:
    """``(channel id, guild id)`` of the guild channels whose conversation went quiet: their
    newest message arrived between a day and ``MEMORY_EXTRACTION_QUIET_SECONDS`` ago, and at
    least ``MEMORY_EXTRACTION_MIN_MESSAGES`` arrived since the channel's last extraction."""
    quiet_since = now - dt.timedelta(seconds=settings.MEMORY_EXTRACTION_QUIET_SECONDS)
    recent = (
        EventQueue.objects.filter(
            guild_id__isnull=False, created_at__gte=now - dt.timedelta(days=1)
        )
        .values("channel_id", "guild_id")
        .annotate(newest_at=Max("created_at"))
        .filter(newest_at__lte=quiet_since)
    )
    due = []
    for row in recent:
        since = last_extracted_message_id(channel_id=row["channel_id"])
        new = EventQueue.objects.filter(
            channel_id=row["channel_id"], message_id__gt=since
        ).aggregate(n=Count("id"))["n"]
        if new >= settings.MEMORY_EXTRACTION_MIN_MESSAGES:
            due.append((row["channel_id"], row["guild_id"]))
    return due


async def memories_extract(*, runtime: TurnRuntime, channel_id: int, guild_id: int) -> Extraction:
    """Read what a channel said since its last extraction and keep the durable facts.

    Steps:
        1. Skip when the guild or its personas are no longer configured, or nothing arrived
           since the last extraction; wait (no turn) while the guild's budget is spent.
        2. `turn_prepare` a dry-run turn of the guild's main persona answering the newest
           message: the window, privacy, blacklist and blocks apply exactly as in a turn.
        3. Keep the lines holding messages newer than the last extraction; lines of people
           with partial or full privacy or on the blacklist are left out (nothing is kept
           about them). Skip when no person is left to remember.
        4. Record a `Turn` of reason ``extraction``; ask the model once
           (`extraction.build_extraction_messages`), listing the facts already kept.
        5. Validate the answer (`extraction.parse_extraction`); store each fact about a person
           of the conversation or about the server (`memory_add`: near duplicates update,
           bounds and privacy refuse); a fact about anyone else is refused.
        6. The turn ends ``replied`` with the stored and refused facts in its
           ``reason_detail``, or ``failed`` with the error (a model failure asks for a retry,
           an answer that is not the JSON asked for does not), or ``refused`` when the budget
           was spent meanwhile (the extraction waits).
    """
    now = runtime.clock()
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=channel_id, guild_id=guild_id, now=now
    )
    if configuration is None or not configuration.personas:
        return Extraction("skipped", "the channel is no longer served")
    site = spend_site(configuration=configuration, persona=configuration.personas[0])
    spent = await runtime.spend.spent(site) if site is not None else None
    if spent is not None:
        return Extraction("waiting", spent.reason)
    since = await sync_to_async(last_extracted_message_id)(channel_id=channel_id)
    try:
        newest = await runtime.port.fetch_history(channel_id, 1)
    except DeliveryError as error:
        return Extraction("failed", f"history: {error}", retry=not error.permanent)
    if not newest or newest[0].id <= since:
        return Extraction("skipped", "nothing new since the last extraction")
    persona = configuration.personas[0]
    request = TurnRequest(
        configuration=configuration,
        persona=persona,
        trigger=newest[0],
        reason=TurnReason.EXTRACTION,
        reason_detail={"since_message_id": str(since)},
    )
    prepared = await turn_prepare(runtime=runtime, request=request, dry_run=True)
    turn_input = prepared.turn_input
    unremembered = frozenset(
        user for user, level in turn_input.privacy.items() if level is not PrivacyLevel.MINIMAL
    ) | frozenset(turn_input.blacklisted_user_ids)
    authors = {m.id: m.accountable_user_id for m in turn_input.history}
    lines = [
        item.text
        for item in prepared.context.items
        if item.tag is ItemTag.DIALOGUE_HISTORY
        and item.source_ids
        and max(item.source_ids) > since
        and not any(authors.get(i) in unremembered for i in item.source_ids)
    ]
    present = window_people(
        [m for m in turn_input.history if m.id > since],
        trigger_id=newest[0].id,
        unremembered=unremembered,
    )
    people = {name: person for person, name in present.items()}
    if not people or not lines:
        return Extraction("skipped", "no one to remember in what was said")
    known = await sync_to_async(_known_facts)(guild_id, list(present))
    messages = build_extraction_messages(conversation=lines, people=list(people), known=known)

    turn, completion = await turn_ask(
        runtime=runtime,
        request=request,
        prepared=prepared,
        messages=messages,
        persona_name=persona.name,
    )
    if completion.refusal is not None:
        await turn_refused(turn=turn, reason=f"a limit said no: {completion.refusal.reason}")
        return Extraction("waiting", completion.refusal.reason, turn_id=turn.id)
    if completion.error is not None:
        await turn_failed(turn=turn)
        return Extraction("failed", turn.error, turn_id=turn.id, retry=True)
    try:
        answer = parse_extraction(completion.reply_text)
    except ExtractionError as error:
        await turn_failed(turn=turn, error=str(error))
        return Extraction("failed", turn.error, turn_id=turn.id)
    stored, refused = await sync_to_async(_store)(
        guild_id=guild_id,
        turn_id=turn.id,
        facts=answer.facts,
        people=people,
        embedder=runtime.embeddings,
    )
    turn.reason_detail = {**turn.reason_detail, "stored": stored, "refused": refused}
    await turn_replied(turn=turn)
    return Extraction("extracted", f"{len(stored)} stored, {len(refused)} refused", turn.id)


def _known_facts(guild_id: int, people: list[tuple[int, str]]) -> list[str]:
    """The facts already kept about ``people`` and the guild (newest first, bounded)."""
    rows = Memory.objects.filter(guild_id=guild_id, kind=MemoryKind.GUILD)
    texts = list(rows.order_by("-updated_at").values_list("text", flat=True)[:KNOWN_FACTS_SHOWN])
    for user_id, member_id in people:
        scope = MemoryScope.personal(guild_id, user_id, member_id=member_id)
        texts += list(scope.rows().order_by("-updated_at").values_list("text", flat=True))
    return texts[:KNOWN_FACTS_SHOWN]


def _store(
    *,
    guild_id: int,
    turn_id: int,
    facts: list[Any],
    people: dict[str, tuple[int, str]],
    embedder: EmbeddingModel | None,
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Store each proposed fact; returns (stored, refused) as the turn record keeps them."""
    stored, refused = [], []
    for proposed in facts:
        if proposed.about.strip().casefold() == SERVER:
            scope = MemoryScope.guild(guild_id)
        else:
            person = resolve_subject(proposed.about, people)
            if person is None:
                refused.append(
                    {
                        "about": proposed.about,
                        "fact": proposed.fact,
                        "why": "names nobody of this conversation",
                    }
                )
                continue
            name = next(n for n, p in people.items() if p == person)
            scope = MemoryScope.personal(guild_id, person[0], member_id=person[1], name=name)
        try:
            written = memory_add(
                scope=scope,
                text=proposed.fact,
                source=Memory.Source.EXTRACTION,
                turn_id=turn_id,
                embedder=embedder,
            )
        except MemoryRefused as refusal:
            refused.append({"about": proposed.about, "fact": proposed.fact, "why": str(refusal)})
            continue
        stored.append(
            {
                "about": proposed.about,
                "fact": written.memory.text,
                "memory_id": written.memory.id,
                "outcome": written.outcome,
            }
        )
    return stored, refused
