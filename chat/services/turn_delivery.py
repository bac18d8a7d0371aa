"""Delivering a whole reply: the persona speaks as the bot account or through its webhook,
the turn claims its trigger before anything is sent, and a failure burst gets one short notice.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from chat.llm.turn_completion import TurnCompletion
from chat.models import Turn
from chat.pipeline.dialogue import humanize_stably
from chat.ports import DeliveryError, Speaker
from chat.services.reply_moderation import PieceKind, reply_moderation_start, reply_withhold
from chat.services.turn_lifecycle import (
    ANSWERED_ELSEWHERE,
    turn_aborted,
    turn_claim,
    turn_failed,
    turn_replied,
)
from chat.services.turn_record import ms_since, turn_refusal_record
from chat.services.turn_request import TurnRequest, TurnRuntime
from personas.models import Persona

logger = logging.getLogger(__name__)

FAILURE_NOTICE_QUIET = dt.timedelta(minutes=5)


async def reply_deliver(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn, completion: TurnCompletion
) -> None:
    """Deliver a whole reply (``completion``) as the turn's persona and record it: a failed or
    empty completion ends the turn ``failed`` with one failure notice; with moderation on, the
    reply is checked first, and a withheld one ends the turn ``withheld`` with one notice
    (`reply_withhold`); the ``delivering`` claim refuses a second answer to the trigger (the
    turn ends ``aborted``); a delivery Discord refuses ends it ``failed``; else it is
    ``replied``, its messages indexed."""
    channel_id = request.channel.channel_id
    if completion.error is not None or not completion.reply_text.strip():
        await turn_failed(turn=turn)
        await failure_notice_send(runtime=runtime, request=request)
        return
    persona = request.persona
    # The same deterministic humanizer the persona's past lines get in history, so the model
    # later sees exactly what it sent.
    text = humanize_stably(
        completion.reply_text,
        force_lowercase=persona.force_lowercase,
        punctuation_splits=persona.punctuation_splits,
    )
    moderation = await reply_moderation_start(runtime=runtime, request=request, turn=turn)
    check = None
    if moderation is not None:
        check = await moderation.check(text, kind=PieceKind.WHOLE, message=0)
    runtime.caches.channel_replied(channel_id)
    speaker = persona_speaker(persona=persona)
    notice = queued_notice(request=request, speaker=speaker)
    if not await turn_claim(turn=turn):
        await turn_aborted(turn=turn, reason=ANSWERED_ELSEWHERE)
        return
    if moderation is not None and check is not None and not check.passes:
        await reply_withhold(
            runtime=runtime,
            request=request,
            turn=turn,
            moderation=moderation,
            check=check,
            shown=[],
            written=text,
        )
        return
    started = time.perf_counter()
    try:
        delivered = await runtime.port.deliver(
            channel_id=channel_id,
            speaker=speaker,
            text=text,
            reply_to=request.trigger.id,
            notice=notice,
            nonce_seed=f"{request.trigger.id}:{persona.id}",
        )
    except DeliveryError as error:
        turn.deliver_ms = ms_since(started=started)
        turn_refusal_record(turn=turn, failure=error)
        await turn_failed(turn=turn, error=f"delivery failed: {error}")
        return
    turn.deliver_ms = ms_since(started=started)
    for item in delivered:
        runtime.windows.record_delivery(channel_id, item.message, item.message_id)
    turn.delivered_message_ids = [str(item.message_id) for item in delivered]
    await turn_replied(
        turn=turn, delivered=delivered, memory_user_id=request.memory_user_id, now=runtime.clock()
    )


async def failure_notice_send(*, runtime: TurnRuntime, request: TurnRequest) -> None:
    """One short notice per failure burst: none again until a reply succeeds or time passes."""
    channel_id = request.channel.channel_id
    if not runtime.caches.failure_notice_due(channel_id, runtime.clock(), FAILURE_NOTICE_QUIET):
        return
    main = Speaker(persona_id=0, name=request.persona.name, is_main=True)
    text = f"({request.persona.name} could not answer just now; the model did not respond.)"
    try:
        await runtime.port.deliver(
            channel_id=channel_id,
            speaker=main,
            text=text,
            reply_to=request.trigger.id,
            as_notice=True,
        )
    except DeliveryError:
        logger.warning("could not send the failure notice in %s", channel_id, exc_info=True)


def persona_speaker(*, persona: Persona) -> Speaker:
    """Who delivers the persona's reply: the bot account for the main persona, else its
    webhook (name and avatar)."""
    return Speaker(
        persona_id=persona.id,
        name=persona.name,
        is_main=persona.is_main,
        avatar_url=persona.avatar_url,
    )


def queued_notice(*, request: TurnRequest, speaker: Speaker) -> str | None:
    """The "Replying to …" line a webhook persona sends before a queued reply (the bot account
    replies natively instead)."""
    if request.is_queued_turn and not speaker.is_main:
        return f"Replying to {request.trigger.shown_name}…"
    return None
