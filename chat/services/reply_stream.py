"""Streaming delivery: a persona whose delivery mode is ``paragraphs`` or ``edit`` speaks as
the model writes, each piece checked (when moderation is on), sent and recorded in order.

Two tasks share one reply: the model's stream is read by `reply_stream_deliver`, which only
says what the channel should show now (`_StreamDelivery.want`); a sending task brings the channel
up to that, piece by piece, as each piece clears moderation. A piece's check starts the moment
the piece is known, while the model writes the next one, and several run at once, so moderation
adds one check's wait to a message, not one per piece before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import time
from collections.abc import AsyncIterator

from chat.llm.streaming import Restart
from chat.models import Turn
from chat.pipeline.dialogue import humanize_stably
from chat.pipeline.reply_pieces import MAX_REPLY_PIECES, edit_pieces, paragraph_pieces
from chat.ports import Delivered, DeliveryError
from chat.services.reply_moderation import (
    ModerationCheck,
    PieceKind,
    ReplyModeration,
    reply_moderation_start,
    reply_withhold,
)
from chat.services.turn_delivery import failure_notice_send, persona_speaker, queued_notice
from chat.services.turn_lifecycle import (
    ANSWERED_ELSEWHERE,
    turn_aborted,
    turn_claim,
    turn_failed,
    turn_piece_delivered,
    turn_replied,
)
from chat.services.turn_record import turn_completion_record, turn_refusal_record
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
        2. With moderation on (`chat.services.reply_moderation`), each piece — a paragraph, or
           the new text of the message being edited — is checked as soon as it is known, and
           goes out once it passes (in ``edit`` mode a message shows the newest text that
           passed). A piece that is withheld stops the reply: the model call is cancelled,
           what was sent stands, one notice follows, and the turn is ``withheld``.
        3. As soon as the first piece is known (while it is checked): ``abort_if`` (the
           planner's send safety check), then the claim that this turn answers its trigger
           (``delivering``); a refusal of either cancels the model call and ends the turn
           ``aborted``, nothing sent. Messages that arrive after that do not cut the reply.
        4. Each piece goes out with its own nonce (a queued webhook reply's "Replying to …"
           line before the first) and is recorded on the turn and in the message index before
           the next; the channel's dashboard hears of it (``turn.delivered``).
        5. At the reply cap (`MAX_REPLY_PIECES` messages) the last piece ends with "[…]" and
           the model call is cancelled.
        6. A model failure before any piece was cleared to go out ends the turn as a whole
           reply's does (``failed``, one failure notice; a piece still waiting for its check
           is not delivered, so the model is retried as if nothing had been written); after,
           the sent pieces stand, `CUT_NOTICE` follows them, and the turn is ``replied`` with
           the error kept. A piece Discord refuses ends the reply there the same way, without
           a notice.
           A limit that refused the first call ends the turn ``refused``
           (`chat.services.turn_refusal`).
    """
    persona = request.persona
    moderation = await reply_moderation_start(runtime=runtime, request=request, turn=turn)
    delivery = _StreamDelivery(runtime, request, turn, abort_if, moderation)
    stream = runtime.runner.stream_turn(
        models=prepared.models,
        render=prepared.render,
        persona_name=persona.name,
        toolbox=prepared.toolbox,
        delivered=lambda: delivery.committed,
        meter=prepared.meter,
    )
    text = ""
    async with delivery.sending():
        async for event in stream:
            if isinstance(event, Restart):
                text = ""
                delivery.restart()
            else:
                text += event
            delivery.want(text, final=False)
            if delivery.stop_reason:
                await stream.stop(delivery.stop_reason)
                break
        else:
            if stream.result().error is None:
                delivery.want(text, final=True)
        await delivery.caught_up()
    completion = stream.result()
    turn_completion_record(turn=turn, completion=completion)
    if delivery.withheld is not None:
        turn.deliver_ms = round(delivery.deliver_s * 1000, 2)
        if not delivery.sent and not await delivery.claim():
            await turn_aborted(turn=turn, reason=delivery.refusal)
            return
        assert moderation is not None  # only a check withholds
        await reply_withhold(
            runtime=runtime,
            request=request,
            turn=turn,
            moderation=moderation,
            check=delivery.withheld,
            shown=delivery.shown,
            written=delivery.reply,
        )
        return
    pieces = len(delivery.shown)
    if delivery.sent and completion.error is not None and delivery.failure is None:
        await delivery.send(CUT_NOTICE)
    turn.deliver_ms = round(delivery.deliver_s * 1000, 2)
    if completion.refusal is not None:
        await turn_refuse(runtime=runtime, request=request, turn=turn, refusal=completion.refusal)
        return
    if delivery.refusal:
        await turn_aborted(turn=turn, reason=delivery.refusal)
        return
    if not delivery.sent:
        turn_refusal_record(turn=turn, failure=delivery.failure)
        failure = f"delivery failed: {delivery.failure}" if delivery.failure else None
        await turn_failed(turn=turn, error=failure)
        if delivery.failure is None:
            await failure_notice_send(runtime=runtime, request=request)
        return
    if completion.error is not None or delivery.failure is not None:
        cause = completion.error or f"delivery failed: {delivery.failure}"
        turn.error = f"the reply was cut after {pieces} of its messages: {cause}"
        turn_refusal_record(turn=turn, failure=delivery.failure)
    await turn_replied(turn=turn, memory_user_id=request.memory_user_id, now=runtime.clock())


class _StreamDelivery:
    """The delivering side of one streamed reply: what the channel should show (``want``),
    the checks of what it is to show, and what was sent and shown so far.

    ``sent`` holds every message sent (a "Replying to …" line included), ``shown`` the text
    each reply message shows now. ``stop_reason`` is set when the model may stop writing
    (refused, capped, withheld, or Discord failed); ``halted`` when nothing more may be sent;
    ``refusal`` when the turn may not answer at all, ``failure`` when Discord refused a piece,
    ``withheld`` the check that withheld a piece.

    A message's text goes out only once it is *cleared*: its check passed (without moderation,
    at once). ``committed`` says whether any text was cleared: the model is then not retried
    from the start, since that text will be sent.
    """

    def __init__(
        self,
        runtime: TurnRuntime,
        request: TurnRequest,
        turn: Turn,
        abort_if: AbortCheck | None,
        moderation: ReplyModeration | None,
    ) -> None:
        self.runtime, self.request, self.turn, self.abort_if = runtime, request, turn, abort_if
        self.moderation = moderation
        self.persona = request.persona
        self.speaker = persona_speaker(persona=self.persona)
        self.channel_id = request.channel.channel_id
        self.edits = self.persona.delivery_mode == DeliveryMode.EDIT
        self.kind = PieceKind.EDIT if self.edits else PieceKind.PARAGRAPH
        self.reply = ""
        """The reply so far, humanized (what the model wrote, as it would be shown)."""
        self.sent: list[Delivered] = []
        self.shown: list[str] = []
        self.message_ids: list[int] = []
        self.stop_reason = ""
        self.halted = False
        self.refusal = ""
        self.failure: DeliveryError | None = None
        self.withheld: ModerationCheck | None = None
        self.committed = False
        self._claimed: bool | None = None
        self.deliver_s = 0.0
        self._wanted: list[str] = []
        self._cleared: dict[int, tuple[int, str]] = {}
        """Per message: the newest text that passed its check, with the check's number."""
        self._checks: dict[tuple[int, str], asyncio.Task[ModerationCheck]] = {}
        self._checking: dict[int, asyncio.Task[ModerationCheck]] = {}
        """Per message: the check in flight (one at a time per message)."""
        self._numbers = itertools.count()
        self._last_edit = -math.inf
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._error: BaseException | None = None
        self._closed = False

    # --- What the channel should show (the stream's side) ------------------------------------

    def want(self, text: str, *, final: bool) -> None:
        """The channel should show ``text`` (the reply so far; all of it when ``final``):
        the messages it cuts into are handed to the sending task, and their checks start."""
        self.reply = humanize_stably(
            text,
            force_lowercase=self.persona.force_lowercase,
            punctuation_splits=self.persona.punctuation_splits,
        )
        if self.edits:
            cut, writing = edit_pieces(self.reply, final=final)
            wanted = [*cut.pieces, writing] if writing else list(cut.pieces)
        else:
            cut = paragraph_pieces(self.reply, final=final)
            wanted = list(cut.pieces)
        if cut.capped:
            self.stop_reason = f"the reply reached its cap of {MAX_REPLY_PIECES} messages"
        if self.halted or self.withheld is not None or wanted == self._wanted:
            return
        self._wanted = wanted
        self._start_checks()
        self._settled.clear()
        self._wake.set()

    def restart(self) -> None:
        """The text given so far is void (the model starts over; none of it was cleared):
        its checks are dropped."""
        assert not self.committed, "a restart after text was cleared to go out"
        # A claim already taken stands: the reply written over answers the same trigger.
        for task in self._checks.values():
            task.cancel()
        self._checks.clear()
        self._checking.clear()
        self._wanted = []
        self.reply = ""
        self._wake.set()

    async def caught_up(self) -> None:
        """Until the channel shows everything wanted so far, or nothing more may be sent.
        Raises what the sending task raised."""
        await self._settled.wait()
        if self._error is not None:
            raise self._error

    @contextlib.asynccontextmanager
    async def sending(self) -> AsyncIterator[None]:
        """Run the sending task while the block runs; on exit it and every check stop."""
        task = asyncio.create_task(self._send_loop(), name=f"reply-{self.turn.id}")
        try:
            yield
        finally:
            self._closed = True  # a check done from now on starts nothing
            for check in [task, *self._checks.values()]:
                check.cancel()
            await asyncio.gather(task, *self._checks.values(), return_exceptions=True)

    # --- Checks -------------------------------------------------------------------------------

    def _start_checks(self) -> None:
        """Start a check for each wanted text not shown, checked or being checked yet (one at a
        time per message; in ``edit`` mode a newer text waits for the check before it). Without
        moderation every text is cleared at once. Once a piece is withheld, only the messages
        before it are still checked."""
        for index, text in enumerate(self._wanted):
            if self.withheld is not None and index >= (self.withheld.message or 0):
                break
            if index < len(self.shown) and self.shown[index] == text:
                continue
            if self.moderation is None:
                self._clear(index, next(self._numbers), text)
                continue
            if (index, text) in self._checks or index in self._checking:
                continue
            number = next(self._numbers)
            task = asyncio.create_task(
                self.moderation.check(text, kind=self.kind, message=index),
                name=f"moderation-{self.turn.id}-{index}",
            )
            task.add_done_callback(functools.partial(self._checked, index, number, text))
            self._checks[(index, text)] = self._checking[index] = task

    def _checked(
        self, index: int, number: int, text: str, task: asyncio.Task[ModerationCheck]
    ) -> None:
        """A check is done: its text is cleared, or it withholds its message and every later
        one (the earliest withheld message counts), or it failed (the reply stops)."""
        if self._checking.get(index) is task:
            del self._checking[index]
        if self._closed or task.cancelled() or self._checks.get((index, text)) is not task:
            return  # the reply is over, or the check was dropped by a restart
        error = task.exception()
        if error is not None:
            self._fail(error)
        elif task.result().passes:
            self._clear(index, number, text)
        elif self.withheld is None or index < (self.withheld.message or 0):
            self.withheld = task.result()
            self.stop_reason = "moderation withheld the rest of the reply"
        self._start_checks()
        self._settled.clear()
        self._wake.set()

    def _clear(self, index: int, number: int, text: str) -> None:
        if index not in self._cleared or self._cleared[index][0] < number:
            self._cleared[index] = (number, text)
        self.committed = True

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self.stop_reason = self.stop_reason or f"delivery stopped: {type(error).__name__}"
        self.halted = True
        self._settled.set()

    # --- Sending (the sending task) ------------------------------------------------------------

    async def _send_loop(self) -> None:
        """Bring the channel up to what is wanted whenever something changes (a new wanted
        text, a check done, an edit allowed again), until halted."""
        try:
            while not self.halted:
                self._wake.clear()
                due = await self._advance()
                if self.halted:
                    break
                if self._is_caught_up():
                    self._settled.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), due)
        except Exception as error:  # raised again by `caught_up`
            self._fail(error)
        self._settled.set()

    def _target(self) -> list[str]:
        """What the channel is to show: the wanted messages; once a piece is withheld, the
        messages before it, then what of its own message passed (in ``edit`` mode, an earlier
        text of it)."""
        if self.withheld is None:
            return self._wanted
        index = self.withheld.message or 0
        target = self._wanted[:index]
        if index in self._cleared:
            target.append(self._cleared[index][1])
        return target

    def _is_caught_up(self) -> bool:
        return self.shown == self._target()

    async def _advance(self) -> float | None:
        """Send every new message whose text is cleared, in order, then edit a message whose
        cleared text is newer than what it shows, at most one edit a second; nothing of a
        withheld message or after it. Returns the seconds until the next edit is allowed when
        one waits, else None.

        The claim is taken as soon as a first piece is wanted, while its check runs, so the
        first message waits for the slower of the two, not for both."""
        if self._wanted and not await self.claim():
            return None
        while not self.halted and len(self.shown) < len(self._target()):
            cleared = self._cleared.get(len(self.shown))
            if cleared is None:
                break
            await self.send(cleared[1])
        if self.halted:
            return None
        last = len(self._target())
        stale = [
            i
            for i, text in enumerate(self.shown[:last])
            if i in self._cleared and self._cleared[i][1] != text
        ]
        if not stale:
            return None
        wait = self._last_edit + EDIT_INTERVAL_S - time.monotonic()
        if wait > 0:
            return wait
        index = stale[0]
        text = self._cleared[index][1]
        try:
            await self.runtime.port.edit_message(
                channel_id=self.channel_id,
                speaker=self.speaker,
                message_id=self.message_ids[index],
                text=text,
            )
        except DeliveryError as error:
            self.failure, self.stop_reason, self.halted = error, f"delivery failed: {error}", True
            return None
        finally:
            # Counted from the answer: Discord saw this edit before that, so the next one
            # reaches it more than a second later.
            self._last_edit = time.monotonic()
        self.shown[index] = text
        return 0.0 if len(stale) > 1 else None

    async def send(self, piece: str) -> None:
        """Send one piece as the next message of the reply, and record it."""
        if not await self.claim():
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
                notice=queued_notice(request=self.request, speaker=self.speaker)
                if index == 0
                else None,
                nonce_seed=f"{trigger.id}:{self.persona.id}:{index}",
            )
        except DeliveryError as error:
            self.failure, self.stop_reason, self.halted = error, f"delivery failed: {error}", True
            return
        finally:
            self.deliver_s += time.perf_counter() - started
        for item in delivered:
            self.runtime.windows.record_delivery(self.channel_id, item.message, item.message_id)
        self.sent += delivered
        self.shown.append(piece)
        self.message_ids.append(delivered[-1].message_id)
        await turn_piece_delivered(turn=self.turn, delivered=delivered, shown=self.shown)

    async def claim(self) -> bool:
        """Whether this turn may answer: the send safety check, then the ``delivering`` claim
        (at most one answer per trigger and persona), asked once; False sets ``refusal``."""
        if self._claimed is None:
            self._claimed = await self._claim()
        return self._claimed

    async def _claim(self) -> bool:
        reason = await self.abort_if() if self.abort_if is not None else None
        if reason:
            self.refusal = self.stop_reason = reason
            self.halted = True
            return False
        if not await turn_claim(turn=self.turn):
            self.refusal = self.stop_reason = ANSWERED_ELSEWHERE
            self.halted = True
            return False
        self.runtime.caches.channel_replied(self.channel_id)
        return True
