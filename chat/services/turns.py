"""Preparing a persona turn, and running it to a delivered reply.

`turn_prepare` is the read side (seed 000's Build Context as a service): it reads the history
window, gathers what the database says about the people in it, builds the context through the
pure pipeline and renders the exact request the model would get. With ``dry_run`` it changes
nothing anywhere — the dashboard's prompt preview calls it that way and gets byte for byte the
request a real turn would send.

`turn_run` is `turn_prepare` followed by the acting side: the model call, the delivery, the
`Turn` record and the live updates. It is the imperative shell around the pure pipeline
(Cosmic Python's "functional core, imperative shell").
"""

from __future__ import annotations

import asyncio
import logging
import time

from chat import selectors
from chat.llm.attempts import request_body
from chat.llm.base import Message
from chat.llm.metering import UNMETERED, CallMeter
from chat.llm.turn_completion import TurnCompletion
from chat.models import Turn
from chat.pipeline.context import build_turn_context
from chat.pipeline.spend import CallKind
from chat.pipeline.triggers import TurnReason
from chat.pipeline.truncation import context_budget
from chat.ports import LeaseLost
from chat.services.reply_moderation import trigger_moderation_refusal
from chat.services.reply_stream import reply_stream_deliver
from chat.services.spend import SpendMeter, spend_site
from chat.services.turn_delivery import reply_deliver
from chat.services.turn_input import (
    WindowReasons,
    turn_participants_read,
    turn_renderer,
    turn_window_read,
)
from chat.services.turn_lifecycle import (
    turn_aborted,
    turn_context_recorded,
    turn_delivery_unsettled,
    turn_exchange_recorded,
    turn_failed,
    turn_refused,
    turn_start,
)
from chat.services.turn_record import ms_since, turn_context_record
from chat.services.turn_refusal import turn_refuse
from chat.services.turn_request import (
    AbortCheck,
    FixedInputs,
    PreparedTurn,
    TurnRequest,
    TurnRuntime,
)
from chat.services.turn_tools import turn_toolbox
from personas.models import DeliveryMode

logger = logging.getLogger(__name__)


async def turn_prepare(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    dry_run: bool = False,
    turn_id: int | None = None,
    meter: SpendMeter | None = None,
) -> PreparedTurn:
    """Prepare one persona turn up to the model request.

    Steps:
        1. Read the history window (reused within a busy stretch) and select the anchored
           window ending at the trigger; store the anchor.
        2. Fetch reply targets outside the window (at most four at a time), then at once
           read privacy, blacklist and short-term memory for the people in it (shared with
           the turns answering the same message; the channel's personas and blocks come from
           ``request.configuration``, read once) and recall the long-term memories that bear
           on the trigger, while the window's images are hashed (each read once):
           `turn_input.turn_participants_read`, each read timed.
        3. Build the context (pure pipeline) and keep it to make the channel's next build warm.
        4. Render the first attempt's exact request.

    A request with ``fixed`` inputs (a persona test case) skips step 1 (its history is the
    window) and the recall of step 2 (its memories are given).

    With ``dry_run`` nothing changes: the anchor is not stored, the window registry and the
    warm contexts are untouched, no row is written and no live update published; the result is the
    same. ``turn_id`` is the `Turn` being run (memory written by a tool names it); None for a
    dry run. The prepared turn's ``meter`` counts its model calls against its guild's and
    persona's budgets (a dry run's counts nothing): ``meter`` when given (`turn_run`'s, its
    first call's admission already under way), else `turn_meter`'s. Raises what the port or
    the database raise (a caller records the failure).
    """
    channel, persona, trigger = request.channel, request.persona, request.trigger
    now = runtime.clock()

    started = time.perf_counter()
    if request.fixed is not None:
        history, window = request.fixed.history, _fixed_window(request.fixed)
    else:
        history, window = await turn_window_read(
            runtime=runtime,
            channel=channel,
            trigger=trigger,
            now=now,
            dry_run=dry_run,
            pinned_anchor_id=request.pinned_anchor_id,
        )
    history_ms = ms_since(started=started)

    started = time.perf_counter()
    participants = await turn_participants_read(
        runtime=runtime,
        request=request,
        history=history,
        now=now,
        dry_run=dry_run,
        anchor_id=window.anchor_id,
    )
    turn_input = participants.turn_input
    participant_ms = ms_since(started=started)

    started = time.perf_counter()
    context = build_turn_context(turn_input)
    build_ms = ms_since(started=started)
    if not dry_run:
        runtime.caches.remember_context(channel.channel_id, persona.id, context)

    models = selectors.persona_model_specs(persona=persona)
    budget = context_budget(persona.context_window, persona.max_output_tokens)
    render = turn_renderer(
        context=context, limit=channel.fetch_limit, budget=budget, counter=runtime.token_counter
    )
    if meter is None and not dry_run:
        meter = turn_meter(runtime=runtime, request=request)
    if meter is not None:
        meter.count_prompt(min(budget, sum(item.tokens for item in context.items)))
    call_meter: CallMeter = meter if meter is not None else UNMETERED
    toolbox = turn_toolbox(
        runtime=runtime,
        context=context,
        turn_input=turn_input,
        request=request,
        turn_id=turn_id,
        meter=call_meter,
    )
    return PreparedTurn(
        request=request,
        turn_input=turn_input,
        context=context,
        models=models,
        render=render,
        toolbox=toolbox,
        body=request_body(models=models, render=render, toolbox=toolbox, stream=runtime.streams),
        rest_reason=window.rest_reason,
        window=window.as_record(),
        history_ms=history_ms,
        participant_ms=participant_ms,
        build_ms=build_ms,
        recalled=participants.recalled,
        participant_timings=participants.timings,
        meter=call_meter,
    )


def turn_meter(*, runtime: TurnRuntime, request: TurnRequest) -> SpendMeter | None:
    """The meter of a persona turn: its calls counted against the guild's and the persona's
    budgets, its first call's trigger against the user's turns (None: no guild pays)."""
    site = spend_site(
        configuration=request.configuration, persona=request.persona, user_id=request.user_id
    )
    if site is None:
        return None
    return runtime.spend.meter(
        site, trigger_id=request.trigger.id if request.user_id is not None else None
    )


def _fixed_window(fixed: FixedInputs) -> WindowReasons:
    """How a window given whole was "read": nowhere, anchored at its first message."""
    return WindowReasons(
        rest_reason=None,
        reanchor_reason=None,
        anchor_id=fixed.history[0].id if fixed.history else None,
        advanced_by=0,
        message_count=len(fixed.history),
    )


async def turn_run(
    *, runtime: TurnRuntime, request: TurnRequest, abort_if: AbortCheck | None = None
) -> Turn:
    """Run one persona turn and return its saved `Turn`.

    Steps (each change of the turn's status is `chat.services.turn_lifecycle`'s, which
    publishes the live updates):
        1. Record the turn as running (``turn.started``).
        2. `turn_prepare` it; record its context (window, items, request: ``window.changed``).
           When the guild checks triggering messages, a withheld trigger ends the turn
           ``refused`` here, before any model is asked.
        3. Ask the model (retries, fallbacks, tool rounds) while typing.
        4. Unless ``abort_if`` now gives a reason (the turn ends ``aborted``, undelivered),
           deliver the reply, index the delivered messages, record everything on the turn.
           A persona whose delivery mode streams (`reply_stream_deliver`) does 3 and 4 as the
           model writes: ``abort_if`` is asked before the first piece goes out.
        5. The turn ends (``turn.finished``); a delivered reply counts toward short-term memory
           maintenance. A limit that refused the first model call ends it ``refused``
           (`chat.services.turn_refusal`): a user past the guild's ``user_turns`` gets a ⏳
           reaction, a spent budget the channel's notice or a 💤 reaction.
    Failures of the model or of delivery end the turn as ``failed`` with the error recorded;
    they never raise out of here except for cancellation and `LeaseLost` (the turn ends
    ``aborted``, its trigger left unread for the worker that owns the channel now).

    The first call's admission (its trigger counted against the user's turns, the budget
    judged) begins as the turn starts and runs beside steps 1 and 2 (`SpendMeter.admit_early`);
    a turn that makes no call gives back what it took.
    """
    persona = request.persona
    meter = turn_meter(runtime=runtime, request=request)
    if meter is not None:
        first_model = selectors.persona_model_specs(persona=persona)[0]
        meter.admit_early(
            prompt_tokens=context_budget(persona.context_window, persona.max_output_tokens),
            model=first_model.name,
            max_output_tokens=first_model.max_output_tokens,
        )
    try:
        return await _turn_run(runtime, request, meter, abort_if)
    finally:
        if meter is not None:
            meter.close()


async def _turn_run(
    runtime: TurnRuntime,
    request: TurnRequest,
    meter: SpendMeter | None,
    abort_if: AbortCheck | None,
) -> Turn:
    channel, persona = request.channel, request.persona
    turn = await turn_start(request=request)
    try:
        if persona.delivery_mode != DeliveryMode.WHOLE:
            # A streamed reply types from the start of its turn (the history read and the
            # prompt build included) until its last piece is out.
            async with runtime.port.typing(channel.channel_id):
                prepared = await _turn_prepare_recorded(runtime, request, turn, meter)
                if prepared is not None:
                    await reply_stream_deliver(
                        runtime=runtime,
                        request=request,
                        turn=turn,
                        prepared=prepared,
                        abort_if=abort_if,
                    )
        elif (prepared := await _turn_prepare_recorded(runtime, request, turn, meter)) is not None:
            async with runtime.port.typing(channel.channel_id):
                completion = await runtime.runner.complete_turn(
                    models=prepared.models,
                    render=prepared.render,
                    persona_name=persona.name,
                    toolbox=prepared.toolbox,
                    meter=prepared.meter,
                )
            await turn_exchange_recorded(turn=turn, completion=completion)
            abort_reason = await abort_if() if abort_if and completion.error is None else None
            if completion.refusal is not None:
                await turn_refuse(
                    runtime=runtime, request=request, turn=turn, refusal=completion.refusal
                )
            elif abort_reason:
                await turn_aborted(turn=turn, reason=abort_reason)
            else:
                await reply_deliver(
                    runtime=runtime, request=request, turn=turn, completion=completion
                )
    except LeaseLost as lost:
        # Another worker owns the channel now and answers the trigger (still unread there).
        # The fence refused before anything went out: a turn that sent nothing is aborted; a
        # stream with pieces out stays delivering, for that worker to reconcile.
        reason = f"this worker lost the lease: {lost}"
        await asyncio.shield(
            _turn_settle_stopped(turn, reason, sent=bool(turn.delivered_message_ids))
        )
        raise
    except asyncio.CancelledError:
        # Only a turn that sent nothing is aborted: a delivering one is reconciled at the next
        # start, and a replied one stays replied (its record may be saving as we stop).
        reason = "the worker stopped during the turn"
        await asyncio.shield(_turn_settle_stopped(turn, reason, sent=True))
        raise
    except Exception as error:
        logger.exception("turn %s failed", turn.id)
        cause = f"{type(error).__name__}: {error}"
        if turn.status == Turn.Status.DELIVERING:
            # The reply is (or may be) out there: the turn stays delivering, so it still
            # holds the trigger against a second answer and the next start records what
            # was sent.
            await turn_delivery_unsettled(
                turn=turn, error=f"recording the delivery failed: {cause}"
            )
        elif turn.status == Turn.Status.RUNNING:
            await turn_failed(turn=turn, error=cause)
    return turn


async def _turn_settle_stopped(turn: Turn, reason: str, *, sent: bool) -> None:
    """The turn stops here (cancelled, or the lease lost): one that is running, or that is
    delivering but has not ``sent`` anything, is aborted; one whose reply may be out stays
    delivering, its record saved, for the next start to reconcile."""
    if turn.status == Turn.Status.RUNNING or (turn.status == Turn.Status.DELIVERING and not sent):
        await turn_aborted(turn=turn, reason=reason)
    elif turn.status == Turn.Status.DELIVERING:
        await turn_delivery_unsettled(turn=turn)


async def _turn_prepare_recorded(
    runtime: TurnRuntime, request: TurnRequest, turn: Turn, meter: SpendMeter | None
) -> PreparedTurn | None:
    """`turn_prepare` the turn and put its window and request on record (they stay there while
    the model runs); the channel's dashboard hears which messages the window holds.

    Meanwhile, when the guild checks triggering messages, the trigger is checked
    (`trigger_moderation_refusal`); a withheld one ends the turn ``refused`` before any model
    sees it, nothing recorded of its prompt, and None is returned."""
    input_check = asyncio.ensure_future(
        trigger_moderation_refusal(runtime=runtime, request=request, turn=turn)
    )
    try:
        prepared = await turn_prepare(
            runtime=runtime, request=request, turn_id=turn.id, meter=meter
        )
        refusal = await input_check
    finally:
        input_check.cancel()
    if refusal:
        await turn_refused(turn=turn, reason=refusal)
        return None
    await turn_context_recorded(turn=turn, prepared=prepared)
    return prepared


async def turn_ask(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    prepared: PreparedTurn,
    messages: list[Message],
    persona_name: str,
) -> tuple[Turn, TurnCompletion]:
    """A background turn that asks the persona's models ``messages`` as written, with no tools
    (a memory refresh, a memory extraction). Steps: start the `Turn` (running), record the
    context ``prepared`` read and the request, ask (counted as the request's reason: a
    ``refresh`` or an ``extraction``), record the exchange. Returns the running turn and the
    completion (``refusal`` set when a spent budget refused the call): the caller judges the
    reply and ends the turn (`chat.services.turn_lifecycle`)."""
    turn = await turn_start(request=request)
    turn_context_record(turn=turn, prepared=prepared)
    turn.request = {"messages": messages}
    turn.tool_allowlist = []
    site = spend_site(configuration=request.configuration, persona=request.persona)
    completion = await runtime.runner.complete_turn(
        models=prepared.models,
        render=lambda plan: messages,
        persona_name=persona_name,
        meter=runtime.spend.meter(site) if site is not None else UNMETERED,
        kind=CallKind.EXTRACTION if request.reason == TurnReason.EXTRACTION else CallKind.REFRESH,
    )
    await turn_exchange_recorded(turn=turn, completion=completion)
    return turn, completion
