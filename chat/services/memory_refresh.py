"""The background refresh of a short-term memory: one summarisation call over its channel's
current window, recorded as a ``maintenance`` turn (nothing is sent to Discord)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.db import transaction

from chat import selectors
from chat.models import ShortTermMemory, Turn
from chat.pipeline.items import ItemTag
from chat.pipeline.memory import (
    build_summary_messages,
    clip_summary,
    short_term_memory_maintenance_due,
    visible_memory_text,
)
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import PrivacyLevel
from chat.ports import DeliveryError
from chat.selectors.short_term_memory import short_term_memory_get
from chat.services.short_term_memory import (
    short_term_memory_refresh_begin,
    short_term_memory_refresh_end,
    short_term_memory_release,
    short_term_memory_write,
)
from chat.services.spend import spend_site
from chat.services.turn_lifecycle import (
    turn_failed,
    turn_failed_now,
    turn_refused,
    turn_replied_now,
)
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.services.turns import turn_ask, turn_prepare


@dataclass(frozen=True)
class MemoryRefresh:
    """What `short_term_memory_refresh` did: ``status`` is ``refreshed``, ``skipped`` (the row
    is gone, no longer due, or its channel or persona is no longer served), ``waiting`` (the
    guild's or the persona's budget is spent: maintenance queues it again later) or
    ``failed``; ``retry`` says a failure is worth another try (the model or Discord failed for
    now)."""

    status: str
    detail: str = ""
    turn_id: int | None = None
    retry: bool = False


async def short_term_memory_refresh(*, runtime: TurnRuntime, memory_id: int) -> MemoryRefresh:
    """Refresh one due memory with one summarisation call over its channel's current window
    (steps in `_refresh`), claim-once: the refresh first takes the memory for its run
    (`short_term_memory_refresh_begin`), and a request made while another refresh of it runs
    is ``skipped`` without a model call; one made after finds the stretch summarised (no
    longer due). The summary is written only while the run still holds the memory. The
    memory's background-refresh claim ends with it, unless the result asks for a retry (the
    retry still holds it)."""
    run = await sync_to_async(short_term_memory_refresh_begin)(memory_id=memory_id)
    if run is None:
        if not await ShortTermMemory.objects.filter(id=memory_id).aexists():
            return MemoryRefresh("skipped", "the memory is gone")
        return MemoryRefresh("skipped", "another refresh of this memory is running")
    try:
        result = await _refresh(runtime, memory_id, run)
    finally:
        await sync_to_async(short_term_memory_refresh_end)(memory_id=memory_id, run=run)
    if not result.retry:
        await sync_to_async(short_term_memory_release)(memory_id=memory_id)
    return result


async def _refresh(runtime: TurnRuntime, memory_id: int, run: str) -> MemoryRefresh:
    """Refresh one due memory with one summarisation call over its channel's current window.

    Steps:
        1. Re-fetch the memory; skip it unless it is still due
           (`short_term_memory_maintenance_due`), and skip when the channel's guild or the
           persona is no longer configured.
        2. Read the newest message and `turn_prepare` a dry-run turn of the persona answering
           it: the window, privacy, blacklist and blocks are applied exactly as in a turn,
           and nothing (anchor, window registry) changes.
        3. Record a `Turn` of reason ``maintenance``; ask the model once with the rendered
           dialogue lines (`memory.build_summary_messages`) and the unexpired summary.
        4. Save the summary (clipped), reset the raw turns, stamp the refresh; the turn ends
           ``replied`` with the summary as its reply (nothing is sent to Discord).
    A model failure ends the turn ``failed`` and asks for a retry; a Discord failure before
    the turn asks for one too. A spent budget waits: nothing is read while it is spent, and a
    call it refuses meanwhile ends the turn ``refused``.
    """
    now = runtime.clock()
    memory = await sync_to_async(short_term_memory_get)(memory_id=memory_id)
    if memory is None:
        return MemoryRefresh("skipped", "the memory is gone")
    persona = memory.persona
    if not short_term_memory_maintenance_due(
        memory.state,
        refresh_every=persona.short_term_memory_refresh_every,
        tools_on=persona.tools_enabled,
        now=now,
    ):
        return MemoryRefresh("skipped", "no longer due")
    if memory.user_id is not None:
        standing = await sync_to_async(selectors.user_standing)(
            user_ids=[memory.user_id], guild_id=memory.guild_id
        )
        if not standing.remembers(memory.user_id):
            return MemoryRefresh("skipped", "the user's privacy keeps nothing about them")
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=memory.channel_id, guild_id=memory.guild_id, now=now
    )
    if configuration is None or all(p.id != persona.id for p in configuration.personas):
        return MemoryRefresh("skipped", "the channel or persona is no longer served")
    site = spend_site(configuration=configuration, persona=persona)
    spent = await runtime.spend.spent(site) if site is not None else None
    if spent is not None:
        return MemoryRefresh("waiting", spent.reason)
    try:
        newest = await runtime.port.fetch_history(memory.channel_id, 1)
    except DeliveryError as error:
        return MemoryRefresh("failed", f"history: {error}", retry=not error.permanent)
    if not newest:
        return MemoryRefresh("skipped", "the channel has no messages")
    request = TurnRequest(
        configuration=configuration,
        persona=persona,
        trigger=newest[0],
        reason=TurnReason.MAINTENANCE,
        reason_detail={
            "memory_id": memory.id,
            "turns_since_refresh": memory.turns_since_refresh,
            "refresh_every": persona.short_term_memory_refresh_every,
        },
    )
    prepared = await turn_prepare(runtime=runtime, request=request, dry_run=True)
    # Users with partial privacy are seen in conversation but never remembered: their lines,
    # and lines quoting them in a reply, stay out of what the memory summarises.
    turn_input = prepared.turn_input
    partial = {u for u, p in turn_input.privacy.items() if p is PrivacyLevel.PARTIAL}
    known = (*turn_input.history, *turn_input.reply_targets.values())
    authors = {m.id: m.accountable_user_id for m in known}
    replied = {m.id: m.reference.message_id for m in known if m.reference is not None}

    def about_partial(message_id: int) -> bool:
        target = replied.get(message_id)
        return authors.get(message_id) in partial or (
            target is not None and authors.get(target) in partial
        )

    lines = [
        item.text
        for item in prepared.context.items
        if item.tag in (ItemTag.DIALOGUE_HISTORY, ItemTag.DATE_SPACER)
        and not any(about_partial(i) for i in item.source_ids)
    ]
    previous = visible_memory_text(memory.state, now=now)
    names = runtime.port.names(configuration.guild_id, [])
    messages = build_summary_messages(
        persona_name=persona.name,
        channel_name=f"#{names.channels[memory.channel_id]}"
        if memory.channel_id in names.channels
        else ("a direct message" if configuration.guild_id is None else "this channel"),
        previous_summary=previous,
        conversation=lines,
    )
    turn, completion = await turn_ask(
        runtime=runtime,
        request=request,
        prepared=prepared,
        messages=messages,
        persona_name=persona.name,
    )
    if completion.refusal is not None:
        await turn_refused(turn=turn, reason=f"a limit said no: {completion.refusal.reason}")
        return MemoryRefresh("waiting", completion.refusal.reason, turn_id=turn.id)
    summary = clip_summary(completion.reply_text)
    if completion.error is not None or not summary:
        await turn_failed(turn=turn, error=turn.error or "the model gave an empty summary")
        return MemoryRefresh("failed", turn.error, turn_id=turn.id, retry=True)
    turn.reply_text = summary
    if not await sync_to_async(_memory_refreshed)(turn, memory, summary, now, run):
        return MemoryRefresh("skipped", "another refresh took the memory over", turn_id=turn.id)
    return MemoryRefresh("refreshed", turn_id=turn.id)


def _memory_refreshed(
    turn: Turn, memory: ShortTermMemory, summary: str, now: dt.datetime, run: str
) -> bool:
    """Save the maintenance turn and the refreshed memory together, if refresh ``run`` still
    holds the memory (False: it was taken over as dead, and the turn ends ``failed``). Replies
    the persona gave while the summary was being written stay counted (not in the summary)."""
    with transaction.atomic():
        current = ShortTermMemory.objects.select_for_update().filter(id=memory.id).first()
        if current is not None and current.refresh_run != run:
            turn_failed_now(
                turn=turn, error="another refresh took the memory over; this summary was not kept"
            )
            return False
        turn_replied_now(turn=turn)
        later = 0
        if current is not None:
            later = max(0, current.turns_since_refresh - memory.turns_since_refresh)
        written = short_term_memory_write(
            persona=memory.persona,
            channel_id=memory.channel_id,
            guild_id=memory.guild_id,
            user_id=memory.user_id,
            summary=summary,
            turn_id=turn.id,
            now=now,
        )
        if later:
            written.turns_since_refresh = later
            written.save(update_fields=["turns_since_refresh"])
    return True
