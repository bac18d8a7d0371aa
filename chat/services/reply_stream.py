"""Streaming delivery: a persona whose delivery mode is ``paragraphs`` or ``edit`` speaks as
the model writes, each piece sent and recorded before the next."""

from __future__ import annotations

import asyncio
import math
import time

from chat.llm.streaming import Restart
from chat.models import Turn
from chat.pipeline.dialogue import humanize_stably
from chat.pipeline.reply_pieces import MAX_REPLY_PIECES, ReplyPieces, edit_pieces, paragraph_pieces
from chat.ports import Delivered, DeliveryError
from chat.services.turn_delivery import failure_notice_send, persona_speaker, queued_notice
from chat.services.turn_lifecycle import (
    ANSWERED_ELSEWHERE,
    turn_aborted,
    turn_claim,
    turn_failed,
    turn_piece_delivered,
    turn_replied,
)
from chat.services.turn_record import turn_completion_record
from chat.services.turn_refusal import turn_refuse
from chat.services.turn_request import AbortCheck, PreparedTurn, TurnRequest, TurnRuntime
from personas.models import DeliveryMode

EDIT_INTERVAL_S = 1.0
"""``edit`` delivery edits at most once a second (Discord rate-limits edits)."""
CUT_NOTICE = "(The rest of this reply was lost: the model stopped answering.)"


async def reply_stream_deliver(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    turn: Turn,
    prepared: PreparedTurn,
    abort_if: AbortCheck | None = None,
) -> None:
    """Ask the model and deliver its reply as it is written (the persona's delivery mode is
    ``paragraphs`` or ``edit``), recording each piece; ``turn`` ends with its final status.

    Steps:
        1. Stream the model's reply (`AttemptRunner.stream_turn`: label, prefill and reasoning
           handled, tool rounds first) until the last piece is out (the caller, `turn_run`,
           keeps the typing indicator on from the start of the turn). The text is
           humanized as a whole reply is, then cut by `paragraph_pieces` (each paragraph as
           soon as it is complete) or `edit_pieces` (one message, edited at most once a
           second, continued in a new one at 2,000 characters).
        2. Before the first piece: ``abort_if`` (the planner's send safety check), then the
           claim that this turn answers its trigger (``delivering``); a refusal of either
           cancels the model call and ends the turn ``aborted``, nothing sent. Messages that
           arrive after the first piece do not cut the reply.
        3. Each piece goes out with its own nonce (a queued webhook reply's "Replying to …"
           line before the first) and is recorded on the turn and in the message index before
           the next; the channel's dashboard hears of it (``turn.delivered``).
        4. At the reply cap (`MAX_REPLY_PIECES` messages) the last piece ends with "[…]" and
           the model call is cancelled.
        5. A model failure before anything was sent ends the turn as a whole reply's does
           (``failed``, one failure notice); after, the sent pieces stand, `CUT_NOTICE` follows
           them, and the turn is ``replied`` with the error kept. A piece Discord refuses
           ends the reply there the same way, without a notice. A limit that refused the
           first call ends the turn ``refused`` (`chat.services.turn_refusal`).
    """
    persona = request.persona
    delivery = _StreamDelivery(runtime, request, turn, abort_if)
    stream = runtime.runner.stream_turn(
        models=prepared.models,
        render=prepared.render,
        persona_name=persona.name,
        toolbox=prepared.toolbox,
        delivered=lambda: bool(delivery.sent),
        meter=prepared.meter,
    )
    text = ""
    async for event in stream:
        text = "" if isinstance(event, Restart) else text + event
        await delivery.show(text, final=False)
        if delivery.stop_reason:
            await stream.stop(delivery.stop_reason)
            break
    else:
        if stream.result().error is None:
            await delivery.show(text, final=True)
    completion = stream.result()
    pieces = len(delivery.shown)
    if delivery.sent and completion.error is not None and delivery.failure is None:
        await delivery.send(CUT_NOTICE)
    turn_completion_record(turn, completion)
    turn.deliver_ms = round(delivery.deliver_s * 1000, 2)
    if completion.refusal is not None:
        await turn_refuse(runtime, request, turn, refusal=completion.refusal)
        return
    if delivery.refusal:
        await turn_aborted(turn, reason=delivery.refusal)
        return
    if not delivery.sent:
        failure = f"delivery failed: {delivery.failure}" if delivery.failure else None
        await turn_failed(turn, error=failure)
        if delivery.failure is None:
            await failure_notice_send(runtime, request)
        return
    if completion.error is not None or delivery.failure is not None:
        cause = completion.error or f"delivery failed: {delivery.failure}"
        turn.error = f"the reply was cut after {pieces} of its messages: {cause}"
    await turn_replied(turn, memory_user_id=request.memory_user_id, now=runtime.clock())


class _StreamDelivery:
    """The delivering side of one streamed reply: what it has sent and shown so far.

    ``sent`` holds every message sent (a "Replying to …" line included), ``shown`` the text
    each reply message shows now. ``stop_reason`` is set when no more may be sent (refused,
    capped, or Discord failed), ``refusal`` when the turn may not answer at all, ``failure``
    when Discord refused a piece.
    """

    def __init__(
        self,
        runtime: TurnRuntime,
        request: TurnRequest,
        turn: Turn,
        abort_if: AbortCheck | None,
    ) -> None:
        self.runtime, self.request, self.turn, self.abort_if = runtime, request, turn, abort_if
        self.persona = request.persona
        self.speaker = persona_speaker(self.persona)
        self.channel_id = request.channel.channel_id
        self.edits = self.persona.delivery_mode == DeliveryMode.EDIT
        self.sent: list[Delivered] = []
        self.shown: list[str] = []
        self.message_ids: list[int] = []
        self.stop_reason = ""
        self.refusal = ""
        self.failure: DeliveryError | None = None
        self.deliver_s = 0.0
        self._last_edit = -math.inf

    async def show(self, text: str, *, final: bool) -> None:
        """Bring the channel up to ``text`` (the reply so far; all of it when ``final``)."""
        reply = humanize_stably(
            text,
            force_lowercase=self.persona.force_lowercase,
            punctuation_splits=self.persona.punctuation_splits,
        )
        if self.edits:
            cut, writing = edit_pieces(reply, final=final)
            await self._show_edited(cut, writing, final=final)
        else:
            cut = paragraph_pieces(reply, final=final)
            for piece in cut.pieces[len(self.shown) :]:
                await self.send(piece)
                if self.stop_reason:
                    return
        if cut.capped:
            self.stop_reason = f"the reply reached its cap of {MAX_REPLY_PIECES} messages"

    async def _show_edited(self, cut: ReplyPieces, writing: str, *, final: bool) -> None:
        """New messages go out at once; a message whose text changed is edited, at most one
        edit a second (at the end, every stale message is edited, each waiting its turn)."""
        wanted = [*cut.pieces, writing] if writing else list(cut.pieces)
        for piece in wanted[len(self.shown) :]:
            await self.send(piece)
            if self.stop_reason:
                return
        while stale := [i for i, text in enumerate(self.shown) if text != wanted[i]]:
            wait = self._last_edit + EDIT_INTERVAL_S - time.monotonic()
            if wait > 0:
                if not (final or cut.capped):
                    return
                await asyncio.sleep(wait)
            index = stale[0]
            try:
                await self.runtime.port.edit_message(
                    channel_id=self.channel_id,
                    speaker=self.speaker,
                    message_id=self.message_ids[index],
                    text=wanted[index],
                )
            except DeliveryError as error:
                self.failure, self.stop_reason = error, f"delivery failed: {error}"
                return
            finally:
                # Counted from the answer: Discord saw this edit before that, so the next one
                # reaches it more than a second later.
                self._last_edit = time.monotonic()
            self.shown[index] = wanted[index]

    async def send(self, piece: str) -> None:
        """Send one piece as the next message of the reply, and record it."""
        if not self.sent and not await self._claim():
            return
        index = len(self.shown)
        trigger = self.request.trigger
        started = time.perf_counter()
        try:
            delivered = await self.runtime.port.deliver(
                channel_id=self.channel_id,
                speaker=self.speaker,
                text=piece,
                reply_to=trigger.id if index == 0 else None,
                notice=queued_notice(self.request, self.speaker) if index == 0 else None,
                nonce_seed=f"{trigger.id}:{self.persona.id}:{index}",
            )
        except DeliveryError as error:
            self.failure, self.stop_reason = error, f"delivery failed: {error}"
            return
        finally:
            self.deliver_s += time.perf_counter() - started
        for item in delivered:
            self.runtime.windows.record_delivery(self.channel_id, item.message, item.message_id)
        self.sent += delivered
        self.shown.append(piece)
        self.message_ids.append(delivered[-1].message_id)
        await turn_piece_delivered(self.turn, delivered, shown=self.shown)

    async def _claim(self) -> bool:
        """Whether this turn may answer: the send safety check, then the ``delivering`` claim
        (at most one answer per trigger and persona); False sets ``refusal``."""
        reason = await self.abort_if() if self.abort_if is not None else None
        if reason:
            self.refusal = self.stop_reason = reason
            return False
        if not await turn_claim(self.turn):
            self.refusal = self.stop_reason = ANSWERED_ELSEWHERE
            return False
        self.runtime.caches.channel_replied(self.channel_id)
        return True
