"""Use cases of the bot worker: preparing a persona turn, and running it to a delivered reply.

`turn_prepare` is the read side (seed 000's Build Context as a service): it reads the history
window, gathers what the database says about the people in it, builds the context through the
pure pipeline and renders the exact request the model would get. With ``dry_run`` it changes
nothing anywhere — the dashboard's prompt preview calls it that way and gets byte for byte the
request a real turn would send.

`turn_run` is `turn_prepare` followed by the acting side: the model call, the delivery, the
`Turn` record and the live events. It is the imperative shell around the pure pipeline
(Cosmic Python's "functional core, imperative shell").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from botproject.events import (
    TurnDelivered,
    TurnFinished,
    TurnStarted,
    WindowChanged,
    channel_group,
    publish,
)
from chat import selectors
from chat.llm.attempts import AttemptPlan, AttemptRunner, Render, Restart, TurnCompletion
from chat.llm.base import ModelApi, ModelSpec
from chat.llm.embeddings import EmbeddingModel
from chat.llm.tools import TOOL_SPECS, MessageMetadata, ToolBox, ToolError, VisionModel
from chat.llm.tools import Attachment as ToolAttachment
from chat.memory_recall import memories_recall_for_turn, recalled_record
from chat.memory_store import MemoryRefused, MemoryScope, memory_add
from chat.models import (
    ChannelWindowAnchor,
    EventQueue,
    Memory,
    MessageIndex,
    PlannerStep,
    ShortTermMemory,
    Turn,
)
from chat.pipeline.context import TurnContext, TurnInput, build_turn_context
from chat.pipeline.dialogue import humanize_stably
from chat.pipeline.instruct import InstructPrompt, to_instruct_prompt
from chat.pipeline.items import ItemTag
from chat.pipeline.markup import scrub_snowflakes
from chat.pipeline.memory import (
    MAX_CATEGORIES,
    RAW_TURNS_TTL,
    SUMMARY_TTL,
    build_summary_messages,
    clip_summary,
    pending_raw_turns,
    stm_maintenance_due,
    visible_memory_text,
)
from chat.pipeline.projections import AttemptProfile, to_openai_messages
from chat.pipeline.recall import (
    RecalledMemory,
    memory_line,
    names_someone_else,
    recall_query,
    window_people,
)
from chat.pipeline.reply_pieces import MAX_REPLY_PIECES, ReplyPieces, edit_pieces, paragraph_pieces
from chat.pipeline.simplify import EntryKind, hidden_user_ids
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.tools import ToolName
from chat.pipeline.triggers import TurnReason
from chat.pipeline.truncation import context_budget, item_tokens, truncate_dialogue_history
from chat.pipeline.types import (
    HistoryMessage,
    PrivacyLevel,
    ReferenceKind,
    signed_url_expiry,
    with_attachment_urls,
)
from chat.pipeline.window import (
    ReanchorReason,
    history_window_stride,
    select_anchored_history,
)
from chat.pipeline.window_reuse import RestReason
from chat.ports import Delivered, DeliveryError, DiscordPort, Speaker
from chat.selectors import ChannelConfiguration, ChannelSettings
from chat.windows import WindowRegistry
from personas.models import DeliveryMode, Persona

logger = logging.getLogger(__name__)

ANCHOR_IDLE_TTL = dt.timedelta(minutes=5)
REPLY_TARGET_CONCURRENCY = 4
FAILURE_NOTICE_QUIET = dt.timedelta(minutes=5)
MAX_WARM_CONTEXTS = 2000
URL_REFRESH_MARGIN = dt.timedelta(minutes=10)
"""An attachment URL whose signature runs out within this is signed anew before a turn hands
it to a model or a tool (a kept window outlives Discord's day-long signatures)."""
MAX_REFRESHED_URLS = 4096


@dataclass
class TurnRuntime:
    """The worker's long-lived dependencies, passed to every turn."""

    port: DiscordPort
    windows: WindowRegistry
    llm: AttemptRunner
    token_counter: TokenCounter
    clock: Callable[[], dt.datetime] = timezone.now
    previous_contexts: dict[tuple[int, int], TurnContext] = field(default_factory=dict)
    """Per (channel, persona): the last built context, whose token counts and simplified
    history make the next build warm."""
    failure_notices: dict[int, dt.datetime] = field(default_factory=dict)
    vision: VisionModel | None = None
    """The model behind ``analyze_image`` (``LLM_VISION_MODEL``); None: the tool is never
    offered."""
    max_warm_contexts: int = MAX_WARM_CONTEXTS
    """How many contexts `remember_context` keeps (``WORKER_WARM_CONTEXTS``)."""
    embeddings: EmbeddingModel | None = None
    """The embedding model long-term memory recall uses; None: the process's own
    (`memory_store.default_embedding_model`)."""
    refreshed_urls: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Attachment URLs signed anew (original → refreshed), the newest `MAX_REFRESHED_URLS`:
    the window keeps a message's original, so later turns reuse the refreshed one."""

    def remember_context(self, channel_id: int, persona_id: int, context: TurnContext) -> None:
        """Keep the last built context per (channel, persona) for a warm next build; the least
        recently used beyond ``max_warm_contexts`` are dropped, so memory stays bounded."""
        key = (channel_id, persona_id)
        self.previous_contexts.pop(key, None)
        self.previous_contexts[key] = context
        while len(self.previous_contexts) > self.max_warm_contexts:
            del self.previous_contexts[next(iter(self.previous_contexts))]


@dataclass(frozen=True)
class TurnRequest:
    """One persona turn to run: the channel's configuration (read once for the whole batch of
    messages it answers), the persona, its trigger and why it runs."""

    configuration: ChannelConfiguration
    persona: Persona
    trigger: HistoryMessage
    reason: TurnReason
    reason_detail: Mapping[str, object] = field(default_factory=dict)
    is_queued_turn: bool = False
    later_queued_trigger_ids: frozenset[int] = frozenset()

    @property
    def channel(self) -> ChannelSettings:
        return self.configuration.settings


@dataclass(frozen=True)
class PreparedTurn:
    """Everything a turn needs to call the model, and what it was built from.

    ``body`` is the exact Chat Completions body the first model attempt sends; ``render`` and
    ``toolbox`` let the attempt runner re-render it per attempt (fallback model, shorter
    history). ``rest_reason`` is why the window was read from Discord (None: reused);
    ``window`` is what the turn record keeps of how the window was read and anchored.
    """

    request: TurnRequest
    turn_input: TurnInput
    context: TurnContext
    models: tuple[ModelSpec, ...]
    render: Render
    toolbox: ToolBox
    body: dict[str, Any]
    rest_reason: RestReason | None
    window: Mapping[str, object]
    history_ms: float
    participant_ms: float
    build_ms: float
    recalled: tuple[RecalledMemory, ...] = ()


async def turn_prepare(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    dry_run: bool = False,
    turn_id: int | None = None,
) -> PreparedTurn:
    """Prepare one persona turn up to the model request.

    Steps:
        1. Read the history window (reused within a busy stretch) and select the anchored
           window ending at the trigger; store the anchor.
        2. Fetch reply targets outside the window (at most four at a time) and read privacy,
           blacklist and short-term memory for the people in it (the channel's personas and
           blocks come from ``request.configuration``, read once); recall the long-term
           memories that bear on the trigger (`_recall_memories`).
        3. Build the context (pure pipeline) and keep it to make the channel's next build warm.
        4. Render the first attempt's exact request.

    With ``dry_run`` nothing changes: the anchor is not stored, the window registry and the
    warm contexts are untouched, no row is written and no event published; the result is the
    same. ``turn_id`` is the `Turn` being run (memory written by a tool names it); None for a
    dry run. Raises what the port or the database raise (a caller records the failure).
    """
    channel, persona, trigger = request.channel, request.persona, request.trigger
    now = runtime.clock()

    started = time.perf_counter()
    history, window = await _history(runtime, channel, trigger, now=now, dry_run=dry_run)
    history_ms = _ms_since(started)

    started = time.perf_counter()
    turn_input = await _turn_input(runtime, request, history, now=now)
    if not dry_run:
        turn_input = await _with_fresh_attachment_urls(runtime, turn_input, now=now)
    recalled = await sync_to_async(_recall_memories)(runtime, request, turn_input)
    turn_input = replace(turn_input, memories=tuple(memory_line(m.record) for m in recalled))
    participant_ms = _ms_since(started)

    started = time.perf_counter()
    context = build_turn_context(turn_input)
    build_ms = _ms_since(started)
    if not dry_run:
        runtime.remember_context(channel.channel_id, persona.id, context)

    models = selectors.persona_model_specs(persona)
    render = _renderer(context, limit=channel.fetch_limit)
    toolbox = _toolbox(runtime, context, turn_input, persona, channel, turn_id=turn_id)
    return PreparedTurn(
        request=request,
        turn_input=turn_input,
        context=context,
        models=models,
        render=render,
        toolbox=toolbox,
        body=runtime.llm.first_request_body(models=models, render=render, toolbox=toolbox),
        rest_reason=window.rest_reason,
        window=window.as_record(),
        history_ms=history_ms,
        participant_ms=participant_ms,
        build_ms=build_ms,
        recalled=recalled,
    )


def _recall_memories(
    runtime: TurnRuntime, request: TurnRequest, turn_input: TurnInput
) -> tuple[RecalledMemory, ...]:
    """The long-term memories this turn shows (`memory_recall.memories_recall_for_turn`): its
    query is the trigger and the message before it; the personal memories of the people
    speaking in the window are eligible, except of those with partial or full privacy or on the
    blacklist; at most ``MEMORY_RECALL_BUDGET_PERCENT`` of the prompt budget."""
    unremembered = frozenset(
        user_id
        for user_id, level in turn_input.privacy.items()
        if level in (PrivacyLevel.PARTIAL, PrivacyLevel.FULL)
    ) | frozenset(turn_input.blacklisted_user_ids)
    hidden = hidden_user_ids(turn_input.privacy, turn_input.blacklisted_user_ids)
    model = turn_input.persona.model
    budget = context_budget(model.context_window, model.max_output_tokens)
    return memories_recall_for_turn(
        guild_id=request.configuration.guild_id,
        persona_id=request.persona.id,
        people=window_people(
            turn_input.history, trigger_id=turn_input.trigger_id, unremembered=unremembered
        ),
        query=recall_query(turn_input.history, trigger_id=turn_input.trigger_id, hidden=hidden),
        token_budget=budget * settings.MEMORY_RECALL_BUDGET_PERCENT // 100,
        count_tokens=runtime.token_counter.count,
        embedder=runtime.embeddings,
    )


AbortCheck = Callable[[], Awaitable[str | None]]


async def turn_run(
    *, runtime: TurnRuntime, request: TurnRequest, abort_if: AbortCheck | None = None
) -> Turn:
    """Run one persona turn and return its saved `Turn`.

    Steps:
        1. Record the turn as running and publish ``turn.started``.
        2. `turn_prepare` it; record its context (window, items, request) and publish
           ``window.changed``.
        3. Ask the model (retries, fallbacks, tool rounds) while typing.
        4. Unless ``abort_if`` now gives a reason (the turn ends ``aborted``, undelivered),
           deliver the reply, index the delivered messages, record everything on the turn.
           A persona whose delivery mode streams (`reply_stream_deliver`) does 3 and 4 as the
           model writes: ``abort_if`` is asked before the first piece goes out.
        5. Publish ``turn.finished``; a delivered reply counts toward short-term memory
           maintenance.
    Failures of the model or of delivery end the turn as ``failed`` with the error recorded;
    they never raise out of here except for cancellation.
    """
    channel, persona = request.channel, request.persona
    turn = await sync_to_async(_turn_create)(request)
    group = channel_group(channel.channel_id)
    await publish(group, TurnStarted(turn_id=turn.id, persona=persona.name))
    try:
        prepared = await turn_prepare(runtime=runtime, request=request, turn_id=turn.id)
        _record_context(turn, prepared)
        await sync_to_async(turn.save)()  # the window is on record while the model runs
        message_ids = [str(m.id) for m in prepared.turn_input.history]
        await publish(group, WindowChanged(message_ids=message_ids))

        if persona.delivery_mode != DeliveryMode.WHOLE:
            await reply_stream_deliver(
                runtime=runtime, request=request, turn=turn, prepared=prepared, abort_if=abort_if
            )
        else:
            async with runtime.port.typing(channel.channel_id):
                completion = await runtime.llm.complete_turn(
                    models=prepared.models,
                    render=prepared.render,
                    persona_name=persona.name,
                    toolbox=prepared.toolbox,
                )
            _record_completion(turn, completion)
            await sync_to_async(turn.save)()  # the exchange is on record before anything is sent
            abort_reason = await abort_if() if abort_if and completion.error is None else None
            if abort_reason:
                turn.status, turn.error = Turn.Status.ABORTED, abort_reason
                await sync_to_async(_turn_save)(turn)
            else:
                await _finish(runtime, request, turn, completion)
    except asyncio.CancelledError:
        # Only a turn that sent nothing is aborted: a delivering one is reconciled at the next
        # start, and a replied one stays replied (its record may be saving as we stop).
        if turn.status == Turn.Status.RUNNING:
            turn.status, turn.error = Turn.Status.ABORTED, "the worker stopped during the turn"
        await asyncio.shield(sync_to_async(_turn_save)(turn))
        raise
    except Exception as error:
        logger.exception("turn %s failed", turn.id)
        if turn.status in (Turn.Status.DELIVERING, Turn.Status.REPLIED):
            # The reply is (or may be) out there: keep the turn delivering, so it still holds
            # the trigger against a second answer and the next start records what was sent.
            turn.status = Turn.Status.DELIVERING
            turn.error = f"recording the delivery failed: {type(error).__name__}: {error}"
        else:
            turn.status, turn.error = Turn.Status.FAILED, f"{type(error).__name__}: {error}"
        await sync_to_async(_turn_save)(turn)
    await publish(group, TurnFinished(turn_id=turn.id, persona=persona.name, status=turn.status))
    return turn


def proxied_message_record(
    *,
    message_id: int,
    channel_id: int,
    guild_id: int | None,
    webhook_id: int | None,
    member_id: str,
    member_name: str,
    sender_id: int,
    original_id: int | None,
) -> None:
    """Index a proxy system's message: the member it speaks as, the sender behind it (whose
    blocks and privacy apply), and the original it superseded (never answered, never in
    history). Recording it again changes nothing."""
    MessageIndex.objects.update_or_create(
        message_id=message_id,
        defaults={
            "channel_id": channel_id,
            "guild_id": guild_id,
            "author_id": webhook_id,
            "webhook_id": webhook_id,
            "proxy_member_id": member_id,
            "proxy_member_name": member_name[:100],
            "proxy_sender_id": sender_id,
            "proxy_original_id": original_id,
        },
    )


def turn_already_answered(*, trigger_id: int, persona_id: int) -> bool:
    """True when a turn for this trigger and persona replied or is delivering its reply
    (exactly-once replies across restarts and overlapping workers)."""
    return Turn.objects.filter(
        trigger_message_id=trigger_id,
        persona_id=persona_id,
        status__in=[Turn.Status.DELIVERING, Turn.Status.REPLIED],
    ).exists()


@dataclass(frozen=True)
class Reconciled:
    """What `turns_reconcile_interrupted` found: turns aborted, and delivering turns whose
    reply was (``replied``) or was not (``unsent``) on Discord."""

    aborted: int = 0
    replied: int = 0
    unsent: int = 0


async def turns_reconcile_interrupted(
    *, port: DiscordPort, on_shard: Callable[[int | None], bool]
) -> Reconciled:
    """Settle the turns a stopped or killed worker left behind, in guilds ``on_shard`` accepts
    (None: DMs), before this worker answers anything.

    - ``running`` turns end ``aborted``: nothing was sent, their triggers are still unread, so
      they run again.
    - ``delivering`` turns are checked against the channel (`DiscordPort.find_delivery`): a
      reply that is there makes the turn ``replied`` and is indexed, so it is not sent again;
      a reply that is not there makes it ``aborted``, and the trigger runs again. A streamed
      reply whose pieces were recorded is ``replied`` with what was sent (the pieces on
      record, and any sent but not recorded yet): it is neither continued nor sent again. A channel
      that cannot be read leaves the turn ``delivering`` for the next start (never a guess that
      could answer twice).
    """
    aborted = await sync_to_async(_turns_abort_running)(on_shard)
    replied = unsent = 0
    for turn in await sync_to_async(_turns_delivering)(on_shard):
        persona = turn.persona
        speaker = Speaker(
            persona_id=persona.id if persona else 0,
            name=turn.persona_name,
            is_main=bool(persona and persona.is_main),
            avatar_url=persona.avatar_url if persona else "",
        )
        try:
            found = await port.find_delivery(
                channel_id=turn.channel_id, speaker=speaker, reply_to=turn.trigger_message_id
            )
        except DeliveryError:
            logger.warning("turn %s: its channel cannot be read; reconciled later", turn.id)
            continue
        indexed = await sync_to_async(selectors.indexed_message_ids)(
            message_ids=[item.message_id for item in found]
        )
        recorded = [int(i) for i in turn.delivered_message_ids]
        sent = [i for i in found if i.message_id not in indexed or i.message_id in recorded]
        if sent or recorded:
            turn.status = Turn.Status.REPLIED
            ids = sorted({*recorded, *(item.message_id for item in sent)})
            turn.delivered_message_ids = [str(i) for i in ids]
            if recorded:
                turn.error = (
                    f"the worker stopped while the reply was being delivered: {len(ids)} "
                    "messages were sent, the rest was not"
                )
            await sync_to_async(_turn_delivered_record)(turn, sent)
            replied += 1
        else:
            turn.status = Turn.Status.ABORTED
            turn.error = "the worker stopped before the reply was sent"
            await sync_to_async(_turn_save)(turn)
            unsent += 1
    return Reconciled(aborted=aborted, replied=replied, unsent=unsent)


def _turns_abort_running(on_shard: Callable[[int | None], bool]) -> int:
    running = Turn.objects.filter(status=Turn.Status.RUNNING).values_list("id", "guild_id")
    stale = [turn_id for turn_id, guild_id in running if on_shard(guild_id)]
    return Turn.objects.filter(id__in=stale).update(
        status=Turn.Status.ABORTED, error="the worker stopped during the turn"
    )


def _turns_delivering(on_shard: Callable[[int | None], bool]) -> list[Turn]:
    turns = Turn.objects.filter(status=Turn.Status.DELIVERING).select_related("persona")
    return [turn for turn in turns if on_shard(turn.guild_id)]


# -- acting ---------------------------------------------------------------------------------------


async def _finish(
    runtime: TurnRuntime, request: TurnRequest, turn: Turn, completion: TurnCompletion
) -> None:
    channel_id = request.channel.channel_id
    if completion.error is not None or not completion.reply_text.strip():
        turn.status = Turn.Status.FAILED
        await sync_to_async(_turn_save)(turn)
        await _failure_notice(runtime, request)
        return
    runtime.failure_notices.pop(channel_id, None)
    persona = request.persona
    speaker = _speaker(persona)
    notice = _queued_notice(request, speaker)
    turn.status = Turn.Status.DELIVERING
    try:
        await sync_to_async(_turn_save_status)(turn)
    except IntegrityError:
        turn.status = Turn.Status.ABORTED
        turn.error = "another turn already answered this message as this persona"
        await sync_to_async(_turn_save)(turn)
        return
    started = time.perf_counter()
    try:
        delivered = await runtime.port.deliver(
            channel_id=channel_id,
            speaker=speaker,
            # The same deterministic humanizer the persona's past lines get in history, so the
            # model later sees exactly what it sent.
            text=humanize_stably(
                completion.reply_text,
                force_lowercase=persona.force_lowercase,
                punctuation_splits=persona.punctuation_splits,
            ),
            reply_to=request.trigger.id,
            notice=notice,
            nonce_seed=f"{request.trigger.id}:{persona.id}",
        )
    except DeliveryError as error:
        turn.deliver_ms = _ms_since(started)
        turn.status, turn.error = Turn.Status.FAILED, f"delivery failed: {error}"
        await sync_to_async(_turn_save)(turn)
        return
    turn.deliver_ms = _ms_since(started)
    for item in delivered:
        runtime.windows.record_delivery(channel_id, item.message, item.message_id)
    turn.delivered_message_ids = [str(item.message_id) for item in delivered]
    turn.status = Turn.Status.REPLIED
    await sync_to_async(_turn_delivered_record)(
        turn, delivered, memory_user_id=memory_scope_user_id(request), now=runtime.clock()
    )


def _speaker(persona: Persona) -> Speaker:
    return Speaker(
        persona_id=persona.id,
        name=persona.name,
        is_main=persona.is_main,
        avatar_url=persona.avatar_url,
    )


def _queued_notice(request: TurnRequest, speaker: Speaker) -> str | None:
    """The "Replying to …" line a webhook persona sends before a queued reply (the bot account
    replies natively instead)."""
    if request.is_queued_turn and not speaker.is_main:
        return f"Replying to {request.trigger.shown_name}…"
    return None


async def _failure_notice(runtime: TurnRuntime, request: TurnRequest) -> None:
    """One short notice per failure burst: none again until a reply succeeds or time passes."""
    channel_id, now = request.channel.channel_id, runtime.clock()
    last = runtime.failure_notices.get(channel_id)
    if last is not None and now - last < FAILURE_NOTICE_QUIET:
        return
    runtime.failure_notices[channel_id] = now
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


# -- streaming delivery ---------------------------------------------------------------------------

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
           handled, tool rounds first) while typing, until the last piece is out. The text is
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
           ends the reply there the same way, without a notice.
    """
    persona = request.persona
    delivery = _StreamDelivery(runtime, request, turn, abort_if)
    stream = runtime.llm.stream_turn(
        models=prepared.models,
        render=prepared.render,
        persona_name=persona.name,
        toolbox=prepared.toolbox,
        delivered=lambda: bool(delivery.sent),
    )
    text = ""
    async with runtime.port.typing(request.channel.channel_id):
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
    _record_completion(turn, completion)
    turn.deliver_ms = round(delivery.deliver_s * 1000, 2)
    if delivery.refusal:
        turn.status, turn.error = Turn.Status.ABORTED, delivery.refusal
        await sync_to_async(_turn_save)(turn)
        return
    if not delivery.sent:
        turn.status = Turn.Status.FAILED
        if delivery.failure is not None:
            turn.error = f"delivery failed: {delivery.failure}"
        await sync_to_async(_turn_save)(turn)
        if delivery.failure is None:
            await _failure_notice(runtime, request)
        return
    if completion.error is not None or delivery.failure is not None:
        cause = completion.error or f"delivery failed: {delivery.failure}"
        turn.error = f"the reply was cut after {pieces} of its messages: {cause}"
    turn.status = Turn.Status.REPLIED
    await sync_to_async(_turn_delivered_record)(
        turn, [], memory_user_id=memory_scope_user_id(request), now=runtime.clock()
    )


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
        self.speaker = _speaker(self.persona)
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
                notice=_queued_notice(self.request, self.speaker) if index == 0 else None,
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
        turn = self.turn
        turn.delivered_message_ids = [str(item.message_id) for item in self.sent]
        turn.reply_text = "\n\n".join(self.shown)
        await sync_to_async(_turn_piece_record)(turn, delivered)
        await publish(
            channel_group(self.channel_id),
            TurnDelivered(turn_id=turn.id, persona=self.persona.name, pieces=len(self.shown)),
        )

    async def _claim(self) -> bool:
        """Whether this turn may answer: the send safety check, then the ``delivering`` claim
        (at most one answer per trigger and persona); False sets ``refusal``."""
        reason = await self.abort_if() if self.abort_if is not None else None
        if reason:
            self.refusal = self.stop_reason = reason
            return False
        self.turn.status = Turn.Status.DELIVERING
        try:
            await sync_to_async(_turn_save_status)(self.turn)
        except IntegrityError:
            self.turn.status = Turn.Status.RUNNING
            self.refusal = self.stop_reason = (
                "another turn already answered this message as this persona"
            )
            return False
        self.runtime.failure_notices.pop(self.channel_id, None)
        return True


# -- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WindowReasons:
    """How a turn's window was obtained: why it was read over REST (None: reused), why it
    was re-anchored (None: the stored anchor kept), where it starts and how far the stride
    rule moved it."""

    rest_reason: RestReason | None
    reanchor_reason: ReanchorReason | None
    anchor_id: int | None
    advanced_by: int
    message_count: int

    def as_record(self) -> dict[str, object]:
        return {
            "rest_reason": str(self.rest_reason) if self.rest_reason else None,
            "reanchor_reason": str(self.reanchor_reason) if self.reanchor_reason else None,
            "anchor_message_id": str(self.anchor_id) if self.anchor_id is not None else None,
            "advanced_by": self.advanced_by,
            "message_count": self.message_count,
        }


async def _history(
    runtime: TurnRuntime,
    channel: ChannelSettings,
    trigger: HistoryMessage,
    *,
    now: dt.datetime,
    dry_run: bool,
) -> tuple[tuple[HistoryMessage, ...], _WindowReasons]:
    """The anchored window for this turn and how it was read (REST or reused, re-anchored or
    not); the anchor is stored for the channel unless ``dry_run``. Originals a proxy system
    replaced (seed 002: "Superseded originals are excluded") are left out.

    A queued trigger older than everything in the channel's newest window (it waited while
    more than a window's worth was said) gets its own window: the ``limit`` messages up to it,
    selected without the channel's anchor (which it neither uses nor moves), so its context is
    what was said before it rather than nothing. Those messages come from the window registry,
    which keeps what the window moved past and reads further back at most once for a stretch
    of such turns (`WindowRegistry.read_up_to`); the turn then records ``older_than_window``.
    """
    read = await runtime.windows.read(
        channel.channel_id, limit=channel.fetch_limit, is_dm=channel.guild is None, dry_run=dry_run
    )
    messages = await _without_superseded(read.messages)
    reset = await sync_to_async(selectors.channel_reset_marker)(channel_id=channel.channel_id)
    reset_marker_id = reset.marker_id if reset is not None else None
    if messages and trigger.id < messages[0].id:
        held = await runtime.windows.read_up_to(
            channel.channel_id,
            trigger.id,
            count=channel.fetch_limit,
            fetch_before=runtime.port.fetch_history_before,
            dry_run=dry_run,
        )
        if held is None:
            earlier = await runtime.port.fetch_history_before(
                channel.channel_id, trigger.id, channel.fetch_limit - 1
            )
            held = ((*earlier, trigger), True)
        up_to_trigger, read_older = held
        around = await _without_superseded(tuple(sorted(up_to_trigger, key=lambda m: m.id)))
        selection = select_anchored_history(
            around,
            limit=channel.fetch_limit,
            anchor_id=None,
            anchor_limit=None,
            required_ids=frozenset({trigger.id}),
            reset_marker_id=reset_marker_id,
        )
        reasons = _WindowReasons(
            rest_reason=read.rest_reason or (RestReason.OLDER_THAN_WINDOW if read_older else None),
            reanchor_reason=selection.reanchor_reason,
            anchor_id=None,
            advanced_by=selection.advanced_by,
            message_count=len(selection.messages),
        )
        return await _with_thread_starter(runtime.port, channel, selection.messages), reasons
    if trigger.id not in {m.id for m in messages}:
        messages = tuple(sorted((*messages, trigger), key=lambda m: m.id))
    anchor = await sync_to_async(selectors.window_anchor)(channel_id=channel.channel_id)
    fresh = anchor is not None and now - anchor.updated_at < ANCHOR_IDLE_TTL
    selection = select_anchored_history(
        messages,
        limit=channel.fetch_limit,
        anchor_id=anchor.anchor_message_id if fresh else None,
        anchor_limit=anchor.limit if fresh else None,
        required_ids=frozenset({trigger.id}),
        force_reanchor=read.force_reanchor,
        reset_marker_id=reset_marker_id,
    )
    if selection.anchor_id is not None and not dry_run:
        await sync_to_async(_anchor_store)(
            channel.channel_id, selection.anchor_id, channel.fetch_limit
        )
    reasons = _WindowReasons(
        rest_reason=read.rest_reason,
        reanchor_reason=selection.reanchor_reason,
        anchor_id=selection.anchor_id,
        advanced_by=selection.advanced_by,
        message_count=len(selection.messages),
    )
    return await _with_thread_starter(runtime.port, channel, selection.messages), reasons


async def _without_superseded(
    messages: tuple[HistoryMessage, ...],
) -> tuple[HistoryMessage, ...]:
    """``messages`` less the originals a proxy system replaced with a member's message."""
    superseded = await sync_to_async(selectors.superseded_original_ids)(
        message_ids=[m.id for m in messages]
    )
    return tuple(m for m in messages if m.id not in superseded)


async def _with_thread_starter(
    port: DiscordPort, channel: ChannelSettings, window: tuple[HistoryMessage, ...]
) -> tuple[HistoryMessage, ...]:
    """A thread's window with the message the thread was started from first, when the
    thread's own start (Discord's starter message pointing at it, or a forum post's first
    message) has left the window: the thread's prompts always show what it is about."""
    if channel.guild is None or any(
        m.id == channel.channel_id
        or (m.reference is not None and m.reference.kind is ReferenceKind.THREAD_STARTER)
        for m in window
    ):
        return window
    starter = await port.thread_starter(channel.channel_id)
    return window if starter is None else (starter, *window)


async def _with_fresh_attachment_urls(
    runtime: TurnRuntime, turn_input: TurnInput, *, now: dt.datetime
) -> TurnInput:
    """``turn_input`` with every attachment URL that expires within `URL_REFRESH_MARGIN`
    signed anew (remembered ones reused, the others asked of Discord in one go). A refresh
    that fails leaves the URLs as they were: the model is then told a file could not be read."""
    messages = (*turn_input.history, *turn_input.reply_targets.values())
    attachments = [
        a
        for m in messages
        for a in (*m.attachments, *(a for s in m.snapshots for a in s.attachments))
    ]
    stale = {
        a.url
        for a in attachments
        if (ex := a.url_expires_at) is not None and ex - now < URL_REFRESH_MARGIN
    }
    if not stale:
        return turn_input
    fresh = {url: runtime.refreshed_urls[url] for url in stale if url in runtime.refreshed_urls}
    fresh = {
        url: new
        for url, new in fresh.items()
        if (ex := signed_url_expiry(new)) is None or ex - now >= URL_REFRESH_MARGIN
    }
    missing = sorted(stale - fresh.keys())
    if missing:
        try:
            fetched = await runtime.port.refresh_attachment_urls(missing)
        except DeliveryError:
            logger.warning("could not refresh %d attachment URLs", len(missing), exc_info=True)
            fetched = {}
        for url, new in fetched.items():
            runtime.refreshed_urls[url] = new
            runtime.refreshed_urls.move_to_end(url)
        while len(runtime.refreshed_urls) > MAX_REFRESHED_URLS:
            runtime.refreshed_urls.popitem(last=False)
        fresh |= fetched
    if not fresh:
        return turn_input
    return replace(
        turn_input,
        history=tuple(with_attachment_urls(m, fresh) for m in turn_input.history),
        reply_targets={
            i: with_attachment_urls(m, fresh) for i, m in turn_input.reply_targets.items()
        },
    )


async def _turn_input(
    runtime: TurnRuntime,
    request: TurnRequest,
    history: tuple[HistoryMessage, ...],
    *,
    now: dt.datetime,
) -> TurnInput:
    channel, persona = request.channel, request.persona
    reply_targets = await _reply_targets(
        runtime, channel.channel_id, [m for m in history if m.id <= request.trigger.id]
    )
    people = await sync_to_async(_gather_people)(request, history, reply_targets, now)
    user_ids = [i for m in history for i in (m.author.id, m.accountable_user_id, *m.mention_ids)]
    previous = runtime.previous_contexts.get((channel.channel_id, persona.id))
    return TurnInput(
        persona=selectors.persona_spec(persona),
        history=history,
        trigger_id=request.trigger.id,
        now=now,
        timezone=channel.timezone,
        token_counter=runtime.token_counter,
        personas=tuple(selectors.persona_spec(p) for p in request.configuration.personas),
        reply_targets=reply_targets,
        is_queued_turn=request.is_queued_turn,
        later_queued_trigger_ids=request.later_queued_trigger_ids,
        fetch_limit=channel.fetch_limit,
        media_window=channel.fetch_limit,
        names=runtime.port.names(request.configuration.guild_id, user_ids),
        privacy=people.privacy,
        blacklisted_user_ids=people.blacklisted,
        blocks=request.configuration.blocks,
        channel_note=channel.channel_note,
        global_note=channel.global_note,
        stm_text=people.stm_text,
        stm_depth=persona.stm_depth,
        configured_tools=_configured_tools(runtime, request),
        tool_schema_tokens=tool_schema_tokens(runtime.token_counter),
        tools_enabled=persona.tools_enabled,
        verbatim_tool_nudge=persona.verbatim_tool_nudge,
        reunion_last_seen=people.last_seen,
        stm_maintenance_due=people.stm_due,
        lorebooks=selectors.lorebooks(persona=persona, guild=channel.guild),
        previous=previous,
    )


@functools.cache
def tool_schema_tokens(counter: TokenCounter) -> Mapping[str, int]:
    """What each tool's definition costs in a request's ``tools`` list, by tool name."""
    return {
        name.value: counter.count(json.dumps(spec.definition(), ensure_ascii=False))
        for name, spec in TOOL_SPECS.items()
    }


def _configured_tools(runtime: TurnRuntime, request: TurnRequest) -> frozenset[str]:
    """The tools whose outside service this turn has: ``analyze_image`` and ``process_gif``
    with a vision model, ``remember`` in a guild (long-term memories are kept per guild)."""
    configured = (
        {ToolName.ANALYZE_IMAGE, ToolName.PROCESS_GIF} if runtime.vision is not None else set()
    )
    if request.configuration.guild_id is not None:
        configured.add(ToolName.REMEMBER)
    return frozenset(configured)


@dataclass(frozen=True)
class _People:
    """What the database says about the people in a turn's window, and the persona's memory."""

    privacy: Mapping[int, PrivacyLevel]
    blacklisted: frozenset[int]
    stm_text: str | None
    stm_due: bool
    last_seen: dt.datetime | None


def _gather_people(
    request: TurnRequest,
    history: tuple[HistoryMessage, ...],
    reply_targets: Mapping[int, HistoryMessage],
    now: dt.datetime,
) -> _People:
    """Privacy and blacklist for everyone in the window, and this scope's short-term memory:
    its text unless expired, and whether maintenance is due (`chat.pipeline.memory`)."""
    messages = [*history, *reply_targets.values()]
    user_ids = {m.accountable_user_id for m in messages} | {
        i for m in messages for i in m.mention_ids
    }
    standing = selectors.user_standing(user_ids=user_ids)
    persona = request.persona
    memory = selectors.short_term_memory(
        persona=persona,
        channel_id=request.channel.channel_id,
        user_id=memory_scope_user_id(request),
    )
    scope_user_id = memory_scope_user_id(request)
    if scope_user_id is not None and not _remembered(scope_user_id, standing):
        memory = None  # partial or full privacy: nothing about them is remembered or recalled
    state = memory.state if memory is not None else None
    trigger = request.trigger
    last_seen = None
    if trigger.author.persona_name is None and not request.reason.answers_no_message:
        last_seen = selectors.last_presence(
            persona_id=persona.id, user_id=trigger.accountable_user_id
        )
    return _People(
        last_seen=last_seen,
        privacy=standing.privacy,
        blacklisted=standing.blacklisted,
        stm_text=visible_memory_text(state, now=now),
        stm_due=stm_maintenance_due(
            state,
            refresh_every=persona.stm_refresh_every,
            tools_on=persona.tools_enabled,
            now=now,
        ),
    )


def _remembered(user_id: int, standing: selectors.UserStanding) -> bool:
    """Whether memories about ``user_id`` may be kept and shown: only at minimal privacy."""
    level = standing.privacy.get(user_id, PrivacyLevel.MINIMAL)
    return level is PrivacyLevel.MINIMAL and user_id not in standing.blacklisted


def memory_scope_user_id(request: TurnRequest) -> int | None:
    """Whose memory a turn uses: in a DM the user's (the trigger's accountable account); in a
    guild channel None (one memory per guild, channel and persona)."""
    return request.trigger.accountable_user_id if request.channel.guild is None else None


async def _reply_targets(
    runtime: TurnRuntime, channel_id: int, history: Sequence[HistoryMessage]
) -> dict[int, HistoryMessage]:
    """Messages the turn's own window (up to its trigger: the pipeline leaves later messages
    to their own turns) points at but does not hold: same-channel reply
    targets, and a thread's starter message, fetched from the parent channel with its id
    (seed 000, "Thread starter media"). Those fetched for an earlier turn come from the window
    registry; the rest are fetched at most four at a time and kept there. One that cannot be
    fetched is left out (its annotation is omitted)."""
    present = {m.id for m in history}
    wanted = sorted(
        {
            (m.reference.channel_id, m.reference.message_id)
            for m in history
            if m.reference is not None
            and m.reference.message_id not in present
            and (
                m.reference.channel_id == channel_id
                or m.reference.kind is ReferenceKind.THREAD_STARTER
            )
        }
    )
    known = {(where, i): runtime.windows.reply_target(channel_id, i) for where, i in wanted}
    gate = asyncio.Semaphore(REPLY_TARGET_CONCURRENCY)

    async def fetch(where: int, message_id: int) -> HistoryMessage | None:
        async with gate:
            return await runtime.port.fetch_message(where, message_id)

    missing = [key for key, target in known.items() if target is None]
    for key, target in zip(
        missing, await asyncio.gather(*(fetch(where, i) for where, i in missing)), strict=True
    ):
        known[key] = target
        if target is not None:
            runtime.windows.remember_reply_target(channel_id, target)
    return {target.id: target for target in known.values() if target is not None}


def _renderer(context: TurnContext, *, limit: int) -> Render:
    """The attempt runner's ``render``: projects the context for each attempt's model."""
    stride = history_window_stride(limit)

    def render(plan: AttemptPlan) -> list[dict] | InstructPrompt:
        shortened = _shorten(context, batches=plan.shorten_batches, stride=stride)
        if plan.model.api is ModelApi.COMPLETIONS:
            return to_instruct_prompt(shortened, plan.model.template())
        profile = AttemptProfile(
            model=plan.model.name,
            supports_vision=plan.model.supports_vision,
            supports_prefill=plan.model.supports_prefill,
            tools=frozenset(plan.tools),
            merge_same_role=plan.model.merge_same_role,
        )
        return to_openai_messages(shortened, profile)

    return render


def _shorten(context: TurnContext, *, batches: int, stride: int) -> TurnContext:
    """``context`` with ``batches`` more stride batches of the oldest history removed (an
    empty answer is retried on shorter history)."""
    items = context.items
    for _ in range(batches):
        items, _report = truncate_dialogue_history(
            items, budget=max(0, item_tokens(items) - 1), stride=stride
        )
    return context if items is context.items else replace(context, items=items)


# -- tools ----------------------------------------------------------------------------------------


def _toolbox(
    runtime: TurnRuntime,
    context: TurnContext,
    turn_input: TurnInput,
    persona: Persona,
    channel: ChannelSettings,
    *,
    turn_id: int | None,
) -> ToolBox:
    """The turn's tools: the pipeline's allowlist, each backed by what it needs."""
    messages = (*turn_input.history, *turn_input.reply_targets.values())
    files = {
        attachment.id: attachment
        for message in messages
        for attachment in (
            *message.attachments,
            *(a for snapshot in message.snapshots for a in snapshot.attachments),
        )
    }
    media = {
        key: ToolAttachment(
            media_id=key,
            filename=scrub_snowflakes(files[snowflake].filename),
            url=files[snowflake].url,
            content_type=files[snowflake].content_type or "",
            size=files[snowflake].size,
        )
        for key, snowflake in context.message_ids.items()
        if key.startswith("media_") and snowflake in files
    }
    by_id = {m.id: m for m in messages}
    return ToolBox(
        allowlist=context.tools,
        attachments=media,
        attachment_reader=_AttachmentReader(runtime.port),
        message_metadata=_MetadataLookup(context.message_ids, by_id),
        short_term_memory=_MemoryWriter(
            persona, channel, turn_id, user_id=_scope_of(channel, turn_input), clock=runtime.clock
        ),
        long_term_memory=_LongTermMemoryWriter(
            channel.guild.guild_id,
            turn_id,
            context.message_ids,
            by_id,
            embedder=runtime.embeddings,
        )
        if channel.guild is not None
        else None,
        vision=runtime.vision,
    )


def _scope_of(channel: ChannelSettings, turn_input: TurnInput) -> int | None:
    if channel.guild is not None:
        return None
    trigger = next((m for m in turn_input.history if m.id == turn_input.trigger_id), None)
    return trigger.accountable_user_id if trigger is not None else None


class _AttachmentReader:
    def __init__(self, port: DiscordPort) -> None:
        self._port = port

    async def read(self, attachment: ToolAttachment, *, max_bytes: int) -> bytes:
        try:
            return await self._port.read_attachment(attachment.url, max_bytes=max_bytes)
        except DeliveryError as error:
            # The port's message names no URL; scrubbed all the same, as it reaches the model.
            reason = scrub_snowflakes(str(error))
            raise ToolError(f"could not read {attachment.filename}: {reason}") from None


class _MetadataLookup:
    """``reveal_message_metadata``'s answers, in the prompt's keys (``ref_N``, ``media_N``):
    the model never sees a raw snowflake."""

    def __init__(self, keys: Mapping[str, int], messages: Mapping[int, HistoryMessage]) -> None:
        self._keys, self._messages = keys, messages
        self._refs = {snowflake: key for key, snowflake in keys.items()}

    async def metadata(self, ref: str) -> MessageMetadata | None:
        message = self._messages.get(self._keys.get(ref, -1))
        if message is None:
            return None
        reference = message.reference
        reply_to = self._refs.get(reference.message_id) if reference is not None else None
        media = tuple(self._refs[a.id] for a in message.attachments if a.id in self._refs)
        return MessageMetadata(
            author_name=scrub_snowflakes(message.shown_name),
            sent_at=message.created_at,
            reply_to_ref=reply_to if reply_to and reply_to.startswith("ref_") else None,
            media_ids=media,
        )


class _MemoryWriter:
    """Writes the short-term memory of the turn's scope (``user_id`` in a DM) for the turn
    ``turn_id`` (a dry run has none: it never calls the model, so never a tool)."""

    def __init__(
        self,
        persona: Persona,
        channel: ChannelSettings,
        turn_id: int | None,
        *,
        user_id: int | None,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self._persona, self._channel, self._turn_id = persona, channel, turn_id
        self._user_id, self._clock = user_id, clock

    async def write(self, *, summary: str, categories: Mapping[str, str]) -> None:
        if self._turn_id is None:
            raise ToolError("a dry run writes no memory")
        if self._user_id is not None:
            standing = await sync_to_async(selectors.user_standing)(user_ids=[self._user_id])
            if not _remembered(self._user_id, standing):
                raise ToolError("this user's privacy allows no memory about them")
        await sync_to_async(_stm_write)(
            persona=self._persona,
            channel_id=self._channel.channel_id,
            guild_id=self._channel.guild.guild_id if self._channel.guild else None,
            user_id=self._user_id,
            summary=summary,
            categories=categories,
            turn_id=self._turn_id,
            now=self._clock(),
        )


class _LongTermMemoryWriter:
    """``remember``: keeps a fact in the guild's long-term memory for the turn ``turn_id``
    (a dry run has none). A personal fact is about the author of the cited message, who must
    be in this turn's conversation and a person (a proxied member counts as themself); the
    store refuses private users, full scopes and over-long facts."""

    def __init__(
        self,
        guild_id: int,
        turn_id: int | None,
        keys: Mapping[str, int],
        messages: Mapping[int, HistoryMessage],
        *,
        embedder: EmbeddingModel | None,
    ) -> None:
        self._guild_id, self._turn_id = guild_id, turn_id
        self._keys, self._messages, self._embedder = keys, messages, embedder

    async def remember(self, *, scope: str, fact: str, ref: str) -> str:
        if self._turn_id is None:
            raise ToolError("a dry run remembers nothing")
        message = self._messages.get(self._keys.get(ref, -1))
        if message is None:
            raise ToolError(f"{ref} is not a message in this conversation")
        if scope == "user":
            if message.author.persona_name is not None or (
                message.author.is_bot and message.proxy is None
            ):
                raise ToolError(f"{ref} was not written by a person: save facts people told you")
            other = names_someone_else(
                fact,
                author=message.shown_name,
                others={m.shown_name for m in self._messages.values()},
            )
            if other is not None:
                raise ToolError(
                    f"the fact names {other}, but {ref} is {message.shown_name}'s: save only "
                    "what people say about themselves, citing their own message"
                )
            memory_scope = MemoryScope.personal(
                self._guild_id,
                message.accountable_user_id,
                member_id=message.proxy.member_id if message.proxy is not None else "",
                name=message.shown_name,
            )
        else:
            memory_scope = MemoryScope.guild(self._guild_id)
        try:
            written = await sync_to_async(memory_add)(
                scope=memory_scope,
                text=fact,
                source=Memory.Source.TOOL,
                turn_id=self._turn_id,
                message_id=message.id,
                embedder=self._embedder,
            )
        except MemoryRefused as refusal:
            raise ToolError(str(refusal)) from None
        return written.outcome


def _stm_write(
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
    scope = {"channel_id": channel_id} if user_id is None else {}
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


# -- recording ------------------------------------------------------------------------------------

LEFT_OUT_AFTER_TRIGGER = "newer than the trigger: answered in its own turn"
LEFT_OUT_TRUNCATED = "removed by truncation to fit the token budget"
LEFT_OUT_HIDDEN = "full privacy or blacklisted: never shown"
LEFT_OUT_BLOCKED = "blocked for this persona: shown as a notice"
LEFT_OUT_EMPTY = "nothing to show (no text, media or cards)"


def window_report(prepared: PreparedTurn) -> dict[str, Any]:
    """The window a turn read, as the dashboard shows it (JSON-ready; ids as strings).

    Keys: ``anchor_message_id`` (the oldest message of the selected window, None when it is
    empty), ``message_ids`` (the window, oldest first), ``rest_reason`` (why it was read over
    REST; None: reused), ``refs`` (message id → its ``ref_N``/``media_N`` key) and ``left_out``
    (``[{"reason", "count"}]``: how many of the window's messages did not reach the prompt as
    themselves, and why). Counts only: the text of a hidden user is never part of it.
    """
    context, turn_input = prepared.context, prepared.turn_input
    history = turn_input.history
    entries = context.simplified_history.entries
    shown = {i for e in entries if e.kind != EntryKind.BLOCKED for i in e.message_ids}
    blocked = {i for e in entries if e.kind == EntryKind.BLOCKED for i in e.message_ids}
    removed = set(context.truncation.removed_message_ids)
    hidden = hidden_user_ids(turn_input.privacy, turn_input.blacklisted_user_ids)
    counts: dict[str, int] = {}
    for message in history:
        if message.id in shown and message.id not in removed:
            continue
        if message.id > turn_input.trigger_id:
            reason = LEFT_OUT_AFTER_TRIGGER
        elif message.id in removed:
            reason = LEFT_OUT_TRUNCATED
        elif message.accountable_user_id in hidden:
            reason = LEFT_OUT_HIDDEN
        elif message.id in blocked:
            reason = LEFT_OUT_BLOCKED
        else:
            reason = LEFT_OUT_EMPTY
        counts[reason] = counts.get(reason, 0) + 1
    return {
        "anchor_message_id": str(history[0].id) if history else None,
        "message_ids": [str(m.id) for m in history],
        "rest_reason": str(prepared.rest_reason) if prepared.rest_reason else None,
        "refs": {str(snowflake): key for key, snowflake in context.message_ids.items()},
        "left_out": [{"reason": reason, "count": n} for reason, n in counts.items()],
    }


def _record_context(turn: Turn, prepared: PreparedTurn) -> None:
    """What the turn was built from: items, request, truncation, tools, timings."""
    context = prepared.context
    turn.context_items = [
        {
            "tag": str(item.tag),
            "role": str(item.role),
            "text": item.text,
            "tokens": item.tokens,
            "source_ids": [str(i) for i in item.source_ids],
        }
        for item in context.items
    ]
    turn.request = prepared.body
    turn.window = {**prepared.window, **window_report(prepared)}
    turn.cache_prefix_end = context.cacheable_prefix_end
    turn.truncation = _jsonable(asdict(context.truncation))
    turn.tool_allowlist = list(context.tools)
    turn.recalled = recalled_record(prepared.recalled)
    turn.prefill = context.prefill or ""
    turn.warnings = list(context.warnings)
    turn.lorebook = context.lore.as_record()
    turn.history_ms = prepared.history_ms
    turn.participant_ms = prepared.participant_ms
    turn.build_ms = prepared.build_ms


def _record_completion(turn: Turn, completion: TurnCompletion) -> None:
    """The model exchange: one JSON object per model call, the summed token usage (None when
    the provider reported none), the exact body of the final attempt, the reply, the error and
    the completion's warnings after the context's."""
    turn.attempts = [record.as_json() for record in completion.attempts]
    turn.prompt_tokens = completion.usage.prompt_tokens
    turn.completion_tokens = completion.usage.completion_tokens
    turn.cached_prompt_tokens = completion.usage.cached_prompt_tokens
    turn.request = completion.request or turn.request
    turn.llm_ms = completion.llm_ms
    turn.reply_text = completion.reply_text
    turn.error = str(completion.error) if completion.error is not None else ""
    turn.warnings = [*turn.warnings, *completion.warnings]


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, int) and value > 2**53:
        return str(value)
    return value


def _turn_create(request: TurnRequest) -> Turn:
    """The turn's row, ``running``. A maintenance or extraction turn answers no message: it
    names no trigger (so it never counts as the persona's answer to one); its
    ``reason_detail`` says where the window it read ended."""
    maintenance = TurnReason(request.reason).answers_no_message
    detail = dict(request.reason_detail)
    if maintenance:
        detail["window_newest_message_id"] = str(request.trigger.id)
    return Turn.objects.create(
        guild_id=request.configuration.guild_id,
        channel_id=request.channel.channel_id,
        persona=request.persona,
        persona_name=request.persona.name,
        trigger_message_id=None if maintenance else request.trigger.id,
        trigger_author_id=None
        if maintenance or request.trigger.author.persona_name is not None
        else request.trigger.accountable_user_id,
        reason=str(request.reason),
        reason_detail=detail,
    )


def _turn_save(turn: Turn) -> None:
    turn.finished_at = timezone.now()
    turn.save()


def _turn_save_status(turn: Turn) -> None:
    turn.save(update_fields=["status"])


def _turn_delivered_record(
    turn: Turn,
    delivered: list[Delivered],
    *,
    memory_user_id: int | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Save the replied turn and index its messages as the persona's, in one transaction;
    with ``now``, also count it as one raw turn of the scope's short-term memory (the DM
    with ``memory_user_id``, else the channel; the memory is created on the persona's first
    reply)."""
    with transaction.atomic():
        _turn_save(turn)
        _index_delivered(turn, delivered)
        if now is not None:
            _stm_count_turn(turn, user_id=memory_user_id, now=now)


def _turn_piece_record(turn: Turn, delivered: list[Delivered]) -> None:
    """One more piece of a streamed reply is out: the turn's delivered messages and reply so
    far, and the piece's index rows, in one transaction (a crash leaves them known)."""
    with transaction.atomic():
        turn.save(update_fields=["delivered_message_ids", "reply_text"])
        _index_delivered(turn, delivered)


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


def _stm_count_turn(turn: Turn, *, user_id: int | None, now: dt.datetime) -> None:
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


def _anchor_store(channel_id: int, anchor_id: int, limit: int) -> None:
    ChannelWindowAnchor.objects.update_or_create(
        channel_id=channel_id, defaults={"anchor_message_id": anchor_id, "limit": limit}
    )


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


# -- planner steps --------------------------------------------------------------------------------


def planner_step_record(
    *,
    channel_id: int,
    guild_id: int | None,
    loop_id: str,
    iteration: int,
    prompt: list[dict],
    decision: str,
    action: Mapping[str, object],
    llm_ms: float | None,
) -> int:
    """Record what one planner step was shown and decided, before it is acted on; returns the
    step's id for `planner_step_finish` (and for the persona turn's ``reason_detail``)."""
    return PlannerStep.objects.create(
        channel_id=channel_id,
        guild_id=guild_id,
        loop_id=loop_id,
        iteration=iteration,
        prompt=prompt,
        decision=decision,
        action=dict(action),
        llm_ms=llm_ms,
    ).id


def planner_step_finish(
    *, step_id: int, success: bool, result: str, turn_id: int | None = None
) -> None:
    """Record what came of a planner step: its result and the persona turn it ran, if any."""
    PlannerStep.objects.filter(id=step_id).update(success=success, result=result, turn_id=turn_id)


# -- short-term memory ----------------------------------------------------------------------------


def short_term_memory_clear(*, persona_id: int, memory_id: int | None = None) -> int:
    """Forget the persona's memories: the one ``memory_id`` names (only if it is this
    persona's), else all of them. Returns how many were deleted; the next reply starts a new
    one."""
    rows = ShortTermMemory.objects.filter(persona_id=persona_id)
    if memory_id is not None:
        rows = rows.filter(id=memory_id)
    deleted, _ = rows.delete()
    return deleted


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


@dataclass(frozen=True)
class MemoryRefresh:
    """What `short_term_memory_refresh` did: ``status`` is ``refreshed``, ``skipped`` (the row
    is gone, no longer due, or its channel or persona is no longer served) or ``failed``;
    ``retry`` says a failure is worth another try (the model or Discord failed for now)."""

    status: str
    detail: str = ""
    turn_id: int | None = None
    retry: bool = False


async def short_term_memory_refresh(*, runtime: TurnRuntime, memory_id: int) -> MemoryRefresh:
    """Refresh one due memory with one summarisation call over its channel's current window
    (steps in `_refresh`). The memory's background-refresh claim ends with it, unless the
    result asks for a retry (the retry still holds it)."""
    result = await _refresh(runtime, memory_id)
    if not result.retry:
        await sync_to_async(short_term_memory_release)(memory_id=memory_id)
    return result


async def _refresh(runtime: TurnRuntime, memory_id: int) -> MemoryRefresh:
    """Refresh one due memory with one summarisation call over its channel's current window.

    Steps:
        1. Re-fetch the memory; skip it unless it is still due (`stm_maintenance_due`), and
           skip when the channel's guild or the persona is no longer configured.
        2. Read the newest message and `turn_prepare` a dry-run turn of the persona answering
           it: the window, privacy, blacklist and blocks are applied exactly as in a turn,
           and nothing (anchor, window registry) changes.
        3. Record a `Turn` of reason ``maintenance``; ask the model once with the rendered
           dialogue lines (`memory.build_summary_messages`) and the unexpired summary.
        4. Save the summary (clipped), reset the raw turns, stamp the refresh; the turn ends
           ``replied`` with the summary as its reply (nothing is sent to Discord).
    A model failure ends the turn ``failed`` and asks for a retry; a Discord failure before
    the turn asks for one too.
    """
    now = runtime.clock()
    memory = await sync_to_async(_memory_get)(memory_id)
    if memory is None:
        return MemoryRefresh("skipped", "the memory is gone")
    persona = memory.persona
    if not stm_maintenance_due(
        memory.state,
        refresh_every=persona.stm_refresh_every,
        tools_on=persona.tools_enabled,
        now=now,
    ):
        return MemoryRefresh("skipped", "no longer due")
    if memory.user_id is not None:
        standing = await sync_to_async(selectors.user_standing)(user_ids=[memory.user_id])
        if not _remembered(memory.user_id, standing):
            return MemoryRefresh("skipped", "the user's privacy keeps nothing about them")
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=memory.channel_id, guild_id=memory.guild_id, now=now
    )
    if configuration is None or all(p.id != persona.id for p in configuration.personas):
        return MemoryRefresh("skipped", "the channel or persona is no longer served")
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
            "refresh_every": persona.stm_refresh_every,
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
        return authors.get(message_id) in partial or authors.get(replied.get(message_id)) in partial

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
    turn = await sync_to_async(_turn_create)(request)
    _record_context(turn, prepared)
    turn.request = {"messages": messages}
    turn.tool_allowlist = []
    completion = await runtime.llm.complete_turn(
        models=prepared.models, render=lambda plan: messages, persona_name=persona.name
    )
    _record_completion(turn, completion)
    summary = clip_summary(completion.reply_text)
    if completion.error is not None or not summary:
        turn.status = Turn.Status.FAILED
        turn.error = turn.error or "the model gave an empty summary"
        await sync_to_async(_turn_save)(turn)
        return MemoryRefresh("failed", turn.error, turn_id=turn.id, retry=True)
    turn.status, turn.reply_text = Turn.Status.REPLIED, summary
    await sync_to_async(_memory_refreshed)(turn, memory, summary, now)
    return MemoryRefresh("refreshed", turn_id=turn.id)


def _memory_get(memory_id: int) -> ShortTermMemory | None:
    return ShortTermMemory.objects.select_related("persona").filter(id=memory_id).first()


def _memory_refreshed(turn: Turn, memory: ShortTermMemory, summary: str, now: dt.datetime) -> None:
    """Save the maintenance turn and the refreshed memory together. Replies the persona gave
    while the summary was being written stay counted (they are not in the summary)."""
    with transaction.atomic():
        _turn_save(turn)
        current = ShortTermMemory.objects.select_for_update().filter(id=memory.id).first()
        later = 0
        if current is not None:
            later = max(0, current.turns_since_refresh - memory.turns_since_refresh)
        written = _stm_write(
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


# -- retention ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """How long records are kept: finished turns (and their planner steps), the message index,
    and the event queue's deduplication keys."""

    turns: dt.timedelta = dt.timedelta(days=30)
    message_index: dt.timedelta = dt.timedelta(days=90)
    dedup_keys: dt.timedelta = dt.timedelta(days=7)


def records_prune(
    *, now: dt.datetime, retention: Retention, batch_size: int = 5000, max_batches: int = 20
) -> dict[str, int]:
    """Delete records past their retention, ``batch_size`` rows per statement and at most
    ``max_batches`` statements per kind per run (a large backlog is worked off over several
    runs without long locks). Returns how many rows of each kind went.

    Never deleted: turns still running or delivering, ready queue rows (work not yet done),
    unread pools.
    """
    kinds = {
        "turns": Turn.objects.filter(created_at__lt=now - retention.turns).exclude(
            status__in=[Turn.Status.RUNNING, Turn.Status.DELIVERING]
        ),
        "planner_steps": PlannerStep.objects.filter(created_at__lt=now - retention.turns),
        "message_index": MessageIndex.objects.filter(created_at__lt=now - retention.message_index),
        "dedup_keys": EventQueue.objects.filter(created_at__lt=now - retention.dedup_keys).exclude(
            status=EventQueue.Status.READY
        ),
    }
    deleted = dict.fromkeys(kinds, 0)
    for kind, rows in kinds.items():
        for _ in range(max_batches):
            ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch_size])
            if not ids:
                break
            rows.model.objects.filter(pk__in=ids).delete()
            deleted[kind] += len(ids)
            if len(ids) < batch_size:
                break
    return deleted
