"""What is recorded about one message, for the why-trace (`chat.why`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from chat.models import (
    EventQueue,
    MessageIndex,
    PlannerStep,
    Turn,
    UnreadEvent,
)


@dataclass(frozen=True)
class MessageRecord:
    """What the worker recorded about one message: whether the queue or the pool holds its key
    (``stored``) and its event (None once only the key is kept), whether it is still waiting,
    and the turns it triggered."""

    message_id: int
    channel_id: int | None
    guild_id: int | None
    event: dict[str, Any] | None
    stored: bool
    queued: bool
    unread: bool
    consumed_status: str | None
    turns: tuple[Turn, ...]
    delivered_by: str | None
    received_at: dt.datetime | None = None


def message_record(*, message_id: int) -> MessageRecord:
    """Everything recorded about ``message_id`` (a message people sent, or one the bot
    delivered: ``delivered_by`` names its persona)."""
    unread = UnreadEvent.objects.filter(message_id=message_id).first()
    queued = EventQueue.objects.filter(message_id=message_id).first()
    row = unread or queued
    delivered = MessageIndex.objects.filter(message_id=message_id).select_related("persona").first()
    turns = tuple(Turn.objects.filter(trigger_message_id=message_id).order_by("created_at"))
    channel_id = row.channel_id if row else (turns[0].channel_id if turns else None)
    if channel_id is None and delivered is not None:
        channel_id = delivered.channel_id
    guild_id = row.guild_id if row else (turns[0].guild_id if turns else None)
    return MessageRecord(
        message_id=message_id,
        channel_id=channel_id,
        guild_id=guild_id,
        event=(row.event or None) if row else None,
        stored=row is not None,
        queued=bool(queued and queued.status == EventQueue.Status.READY),
        unread=unread is not None,
        consumed_status=queued.status if queued else None,
        turns=turns,
        delivered_by=delivered.persona.name
        if delivered and delivered.persona
        else ("the bot" if delivered else None),
        received_at=min((r.created_at for r in (unread, queued) if r is not None), default=None),
    )


def planner_loop_after(*, channel_id: int, since: dt.datetime) -> tuple[PlannerStep, ...]:
    """The steps of the first planner loop of the channel that began at or after ``since`` (when
    a message reached the bot), in order; empty when none has run since."""
    first = (
        PlannerStep.objects.filter(channel_id=channel_id, created_at__gte=since)
        .order_by("id")
        .first()
    )
    if first is None:
        return ()
    return tuple(PlannerStep.objects.filter(loop_id=first.loop_id).order_by("iteration", "id"))
