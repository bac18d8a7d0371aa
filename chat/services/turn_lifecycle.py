"""A turn's life, in one place: every change of a `Turn`'s status is one function here.

The allowed changes are written once, as data (`TRANSITIONS`); each function checks its change
against it, saves the turn in one transaction, and publishes the one live update the change
makes after the commit (`TurnStarted`, `WindowChanged`, `TurnDelivered`, `TurnFinished`). No
other module assigns a turn's status (`chat/tests/services/test_turn_lifecycle.py` walks the code
to keep it so).

::

    running ──claim──► delivering ──► replied | failed | aborted | withheld
       │
       └──► replied (a turn that answers no message: a greeting, a memory refresh or
       │             extraction) | failed | aborted | refused

- ``delivering`` is the claim on the trigger: at most one turn per (trigger, persona) is
  ``delivering``, ``replied`` or ``withheld`` (a database constraint), so a second turn's claim
  is refused and nothing is sent twice. A turn is claimed just before its first message goes out.
- ``refused``: a limit said no before any model was called; ``withheld``: a reply was stopped
  before Discord showed it. Both are terminal, like ``replied``, ``failed`` and ``aborted``.

Every change is a conditional update (``… WHERE status = <the status it leaves>``): a turn
that something else settled meanwhile (a new shard owner's recovery aborting it) is not moved
back; the change reports it did nothing (`StaleTurn` for the claim, False for the others).

The turn series of `chat.metrics` are counted here, at these changes and nowhere else: every
terminal change counts the turn by status and times it from its trigger, once committed; the
first message of a turn this process claimed times the wait for it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from botproject.live_updates import (
    LiveUpdate,
    TurnDelivered,
    TurnFinished,
    TurnStarted,
    WindowChanged,
    channel_group,
    publish_live_update,
    publish_live_update_on_commit,
)
from chat import metrics
from chat.llm.turn_completion import TurnCompletion
from chat.models import MessageIndex, Turn
from chat.pipeline.snowflakes import snowflake_time
from chat.pipeline.triggers import TurnReason
from chat.ports import Delivered
from chat.services.short_term_memory import short_term_memory_count_turn
from chat.services.turn_record import turn_completion_record, turn_context_record
from chat.services.turn_request import PreparedTurn, TurnRequest
from personas.models import Persona

logger = logging.getLogger(__name__)

Status = Turn.Status

TRANSITIONS: Mapping[str, frozenset[str]] = {
    Status.RUNNING: frozenset(
        {Status.DELIVERING, Status.REPLIED, Status.FAILED, Status.ABORTED, Status.REFUSED}
    ),
    Status.DELIVERING: frozenset({Status.REPLIED, Status.FAILED, Status.ABORTED, Status.WITHHELD}),
    Status.REPLIED: frozenset(),
    Status.FAILED: frozenset(),
    Status.ABORTED: frozenset(),
    Status.WITHHELD: frozenset(),
    Status.REFUSED: frozenset(),
}
"""From each status, the statuses a turn may move to. The last five are terminal."""

ANSWERED_ELSEWHERE = "another turn already answered this message as this persona"


class TransitionRefused(ValueError):
    """A change the table does not allow (a bug in the caller: e.g. a replied turn failed)."""


class StaleTurn(Exception):
    """The turn's row no longer has the status this process last saw: something else settled
    it (the turn object now holds the row's status)."""


def transition_allowed(*, source: str, target: str) -> bool:
    """Whether `TRANSITIONS` lets a turn move from ``source`` to ``target``."""
    return target in TRANSITIONS.get(source, frozenset())


# --- Start and records that change no status -------------------------------------------------


async def turn_start(*, request: TurnRequest) -> Turn:
    """Create the turn's row (``running``) and publish ``turn.started``.

    A turn that answers no message (a memory refresh or extraction) names no trigger, so it
    never counts as the persona's answer to one; its ``reason_detail`` says where the window
    it read ended."""
    turn = await sync_to_async(_turn_create)(request)
    metrics.TURNS_STARTED.inc()
    await _publish(turn, TurnStarted(turn_id=turn.id, persona=turn.persona_name))
    return turn


def _turn_create(request: TurnRequest) -> Turn:
    answers_no_message = TurnReason(request.reason).answers_no_message
    detail = dict(request.reason_detail)
    if answers_no_message:
        detail["window_newest_message_id"] = str(request.trigger.id)
    return Turn.objects.create(
        guild_id=request.configuration.guild_id,
        channel_id=request.channel.channel_id,
        persona=request.persona,
        persona_name=request.persona.name,
        trigger_message_id=None if answers_no_message else request.trigger.id,
        trigger_author_id=None
        if answers_no_message or request.trigger.author.persona_name is not None
        else request.trigger.accountable_user_id,
        reason=str(request.reason),
        reason_detail=detail,
    )


async def turn_start_unprompted(
    *, persona: Persona, channel_id: int, reason: TurnReason, **fields: Any
) -> Turn:
    """Create a turn in ``persona``'s guild that no message asked for (a greeting an admin
    posts) and publish ``turn.started``; ``fields`` are further columns (``reason_detail``,
    ``reply_text``)."""

    def create() -> Turn:
        return Turn.objects.create(
            guild_id=persona.guild.guild_id,
            channel_id=channel_id,
            persona=persona,
            persona_name=persona.name,
            reason=str(reason),
            **fields,
        )

    turn = await sync_to_async(create)()
    metrics.TURNS_STARTED.inc()
    await _publish(turn, TurnStarted(turn_id=turn.id, persona=turn.persona_name))
    return turn


async def turn_context_recorded(*, turn: Turn, prepared: PreparedTurn) -> None:
    """Put what the turn was built from on record (window, items, the exact request; they
    stay there while the model runs) and tell the channel's dashboard which messages the
    window holds (``window.changed``)."""
    turn_context_record(turn=turn, prepared=prepared)
    await sync_to_async(_save_record)(turn)
    message_ids = [str(m.id) for m in prepared.turn_input.history]
    await _publish(turn, WindowChanged(message_ids=message_ids))


async def turn_exchange_recorded(*, turn: Turn, completion: TurnCompletion) -> None:
    """Put the model exchange on record (attempts, usage, reply, error) before anything is
    sent."""
    turn_completion_record(turn=turn, completion=completion)
    await sync_to_async(_save_record)(turn)


def _save_record(turn: Turn) -> None:
    """Save every column but the status, whatever the status is (a record never moves it)."""
    Turn.objects.filter(pk=turn.pk).update(**_columns(turn, exclude={"status"}))


# --- The claim and the pieces ----------------------------------------------------------------


async def turn_claim(*, turn: Turn) -> bool:
    """``running`` → ``delivering``: claim the trigger just before the reply's first message
    goes out. False when another turn of the persona already answers the trigger (the
    constraint refuses the claim; the turn stays ``running`` for its caller to abort).

    Raises `StaleTurn` when the turn was settled elsewhere meanwhile."""
    _check(turn, Status.DELIVERING)
    try:
        await sync_to_async(_claim)(turn)
    except IntegrityError:
        return False
    turn.status = Status.DELIVERING
    _awaiting_first_message.add(turn.id)
    return True


def _claim(turn: Turn) -> None:
    with transaction.atomic():
        moved = Turn.objects.filter(pk=turn.pk, status=turn.status).update(status=Status.DELIVERING)
    if not moved:
        _stale(turn)


async def turn_piece_delivered(*, turn: Turn, delivered: list[Delivered], shown: list[str]) -> None:
    """One more piece of a streamed reply is out: the turn's delivered messages and reply so
    far (``shown``, one text per reply message) and the piece's index rows, in one
    transaction (a crash leaves them known); then ``turn.delivered``."""
    if turn.status != Status.DELIVERING:
        raise TransitionRefused(f"turn {turn.id} delivers a piece while {turn.status}")
    _first_message_out(turn)
    turn.delivered_message_ids = [
        *turn.delivered_message_ids,
        *(str(d.message_id) for d in delivered),
    ]
    turn.reply_text = "\n\n".join(shown)
    await sync_to_async(_piece_record)(turn, delivered)
    await _publish(
        turn, TurnDelivered(turn_id=turn.id, persona=turn.persona_name, pieces=len(shown))
    )


def _piece_record(turn: Turn, delivered: list[Delivered]) -> None:
    with transaction.atomic():
        Turn.objects.filter(pk=turn.pk).update(
            delivered_message_ids=turn.delivered_message_ids, reply_text=turn.reply_text
        )
        _index_delivered(turn, delivered)


async def turn_delivery_unsettled(*, turn: Turn, error: str | None = None) -> None:
    """A ``delivering`` turn stopped (an error, the worker stopping) after or while its reply
    went out: it stays ``delivering``, its record saved (with ``error``, when given), so it
    still holds the trigger against a second answer, and the next start reconciles it against
    what Discord shows (`chat.services.recovery`)."""
    if error is not None:
        turn.error = error
    _awaiting_first_message.discard(turn.id)
    await sync_to_async(_save_record)(turn)


# --- Terminal changes ------------------------------------------------------------------------


async def turn_replied(
    *,
    turn: Turn,
    delivered: list[Delivered] | None = None,
    memory_user_id: int | None = None,
    now: dt.datetime | None = None,
) -> bool:
    """→ ``replied``: save the turn and index ``delivered`` (the messages not recorded yet)
    as the persona's, in one transaction; with ``now``, also count the reply as one raw turn
    of the scope's short-term memory (the DM with ``memory_user_id``, else the channel). A turn
    that answers a message must be ``delivering`` (claimed) first; one that answers none (a
    greeting, a memory refresh or extraction) goes straight from ``running``. False when the
    turn was settled elsewhere meanwhile (nothing saved)."""
    if delivered:
        _first_message_out(turn)
    moved = await sync_to_async(_replied)(
        turn, delivered=delivered or [], memory_user_id=memory_user_id, now=now
    )
    await _publish_finished(turn, moved)
    return moved


def turn_replied_now(*, turn: Turn, delivered: list[Delivered] | None = None) -> bool:
    """`turn_replied` for sync code, inside the caller's transaction when there is one (the
    live update goes out when it commits)."""
    moved = _replied(turn, delivered=delivered or [], memory_user_id=None, now=None)
    _publish_finished_on_commit(turn, moved)
    return moved


def _replied(
    turn: Turn,
    *,
    delivered: list[Delivered],
    memory_user_id: int | None,
    now: dt.datetime | None,
) -> bool:
    seen = turn.status
    try:
        with transaction.atomic():
            if not _finish(turn, Status.REPLIED):
                return False
            _index_delivered(turn, delivered)
            if now is not None:
                short_term_memory_count_turn(turn=turn, user_id=memory_user_id, now=now)
    except BaseException:
        turn.status = seen  # rolled back: the row still has the status it had
        raise
    return True


async def turn_failed(*, turn: Turn, error: str | None = None) -> bool:
    """→ ``failed`` (the model or Discord failed; nothing holds the trigger any more), with
    ``error`` (None: keep the error already recorded, e.g. the model's)."""
    if error is not None:
        turn.error = error
    return await _finish_and_publish(turn, Status.FAILED)


def turn_failed_now(*, turn: Turn, error: str) -> bool:
    """`turn_failed` for sync code, inside the caller's transaction when there is one (the
    live update goes out when it commits)."""
    turn.error = error
    moved = _finish(turn, Status.FAILED)
    _publish_finished_on_commit(turn, moved)
    return moved


async def turn_aborted(*, turn: Turn, reason: str) -> bool:
    """→ ``aborted``: the turn stopped without answering (refused by the planner's send
    check, its trigger answered by another turn, the worker stopping or losing the lease,
    its reply not found on Discord after a crash); ``reason`` is kept as its error."""
    turn.error = reason
    return await _finish_and_publish(turn, Status.ABORTED)


async def turn_refused(*, turn: Turn, reason: str) -> bool:
    """→ ``refused``: a limit said no before any model was called; ``reason`` says which."""
    turn.error = reason
    return await _finish_and_publish(turn, Status.REFUSED)


async def turn_withheld(*, turn: Turn, reason: str) -> bool:
    """→ ``withheld``: the reply (or its rest) was stopped before Discord showed it; the
    pieces already delivered stay on record."""
    turn.error = reason
    return await _finish_and_publish(turn, Status.WITHHELD)


def turns_abort_interrupted(*, turn_ids: list[int], reason: str) -> int:
    """``running`` → ``aborted`` for turns a stopped worker left running (crash recovery;
    one statement, no live update: nobody watches a dead worker's turns). Returns how many
    moved; a turn no longer running is left as it is."""
    moved = Turn.objects.filter(id__in=turn_ids, status=Status.RUNNING).update(
        status=Status.ABORTED, error=reason, finished_at=timezone.now()
    )
    if moved:
        transaction.on_commit(lambda: metrics.TURNS.labels(status=Status.ABORTED).inc(moved))
    return moved


def _finish(turn: Turn, target: str) -> bool:
    """Move ``turn`` to the terminal ``target`` and save every column, stamping it finished,
    in one transaction. False (nothing saved) when the row was settled elsewhere meanwhile;
    the turn object then holds the row's status."""
    _check(turn, target)
    finished_at = timezone.now()
    with transaction.atomic():
        moved = Turn.objects.filter(pk=turn.pk, status=turn.status).update(
            **_columns(turn, exclude={"status", "finished_at"}),
            status=target,
            finished_at=finished_at,
        )
    if not moved:
        logger.warning("turn %s was settled elsewhere; it stays as it is", turn.id)
        turn.status = _stored_status(turn)
        return False
    turn.status, turn.finished_at = target, finished_at
    _awaiting_first_message.discard(turn.id)
    seconds = (finished_at - _asked_at(turn)).total_seconds()
    transaction.on_commit(lambda: metrics.turn_ended(status=target, seconds=seconds))
    return True


async def _finish_and_publish(turn: Turn, target: str) -> bool:
    moved = await sync_to_async(_finish)(turn, target)
    await _publish_finished(turn, moved)
    return moved


async def _publish_finished(turn: Turn, moved: bool) -> None:
    if moved:
        await _publish(turn, _finished(turn))


def _publish_finished_on_commit(turn: Turn, moved: bool) -> None:
    if moved:
        publish_live_update_on_commit(channel_group(turn.channel_id), _finished(turn))


def _finished(turn: Turn) -> TurnFinished:
    return TurnFinished(turn_id=turn.id, persona=turn.persona_name, status=turn.status)


# --- Timing ----------------------------------------------------------------------------------

_awaiting_first_message: set[int] = set()
"""Turns this process claimed whose first message has not gone out yet (each leaves the set
at its first message or when it ends)."""


def _asked_at(turn: Turn) -> dt.datetime:
    """When the turn was asked for: its trigger message's time on Discord (the snowflake's),
    else (a turn that answers no message, or a trigger stamped ahead of this clock) when the
    turn started."""
    started = turn.created_at or timezone.now()
    if turn.trigger_message_id is None:
        return started
    return min(snowflake_time(turn.trigger_message_id), started)


def _first_message_out(turn: Turn) -> None:
    """The turn's first message is on Discord (only the first, and only of a turn this process
    claimed: a turn a restarted worker reconciles was not timed here)."""
    if turn.id in _awaiting_first_message:
        _awaiting_first_message.discard(turn.id)
        seconds = time.time() - _asked_at(turn).timestamp()
        metrics.FIRST_MESSAGE_SECONDS.observe(max(seconds, 0.0))


# --- Helpers ---------------------------------------------------------------------------------


def _check(turn: Turn, target: str) -> None:
    if not transition_allowed(source=turn.status, target=target):
        raise TransitionRefused(f"turn {turn.id}: {turn.status} → {target} is not allowed")


def _stale(turn: Turn) -> None:
    status = _stored_status(turn)
    seen, turn.status = turn.status, status
    raise StaleTurn(f"turn {turn.id} is {status}, not {seen} as this process saw it")


def _stored_status(turn: Turn) -> str:
    """The status the turn's row has now (``aborted`` if the row is gone)."""
    stored = Turn.objects.filter(pk=turn.pk).values_list("status", flat=True).first()
    return stored or Status.ABORTED


def _columns(turn: Turn, *, exclude: set[str]) -> dict[str, Any]:
    """The turn's columns as `QuerySet.update` takes them (the primary key, the creation
    stamp and ``exclude`` left out)."""
    return {
        field.attname: getattr(turn, field.attname)
        for field in Turn._meta.concrete_fields
        if not field.primary_key and field.attname not in exclude and field.attname != "created_at"
    }


def _index_delivered(turn: Turn, delivered: list[Delivered]) -> None:
    for item in delivered:
        MessageIndex.objects.update_or_create(
            message_id=item.message_id,
            defaults={
                "channel_id": turn.channel_id,
                "guild_id": turn.guild_id,
                "persona": turn.persona,
                "author_id": item.author_id,
                "webhook_id": item.webhook_id,
            },
        )


def turn_extra_delivered(*, turn_id: int, delivered: list[Delivered]) -> None:
    """Index messages a turn's tool sent (a sticker) as the persona's, like its reply's."""
    turn = Turn.objects.filter(id=turn_id).first()
    if turn is not None:
        _index_delivered(turn, delivered)


async def _publish(turn: Turn, update: LiveUpdate) -> None:
    await publish_live_update(channel_group(turn.channel_id), update)
