"""Reactive channels: trigger rules decide who answers each unread message.

Each unread message, oldest first, goes through the trigger rules (`chat.pipeline.triggers`);
every trigger gets its own turn in arrival order, and the message leaves the pool once its turns
are done, so a worker killed mid-burst answers the rest after a restart, and a turn that already
replied is not run again. Messages nobody answers leave together (one statement for a run of
them, not one each), before the next trigger's turn starts. A batch nobody answered is followed
by the next one no sooner than `QUIET_BATCH_INTERVAL` after it: a busy channel's chatter is read
a few times a second, with no query for the facts of messages no rule could address.

A turn is *queued* (seed 000's queued-reply guidance; an alter persona's "Replying to…" notice)
only when its trigger waited: it arrived before the previous message's reply was delivered, or
other messages stand between the trigger and the reply. A message posted after the previous
reply appeared, with nothing after it, is answered as an ordinary turn even within a busy
stretch; personas answering the same message are co-responders, never queued behind each other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from chat import selectors
from chat.loop.unread_counts import UnreadCounts
from chat.pipeline.triggers import Trigger, may_be_addressed, trigger_decision
from chat.pipeline.types import HistoryMessage
from chat.selectors import ChannelConfiguration, trigger_persona, turn_already_answered
from chat.selectors.event_queue import unread_pool_messages
from chat.services import event_queue
from chat.services.event_queue import OwnIdentity
from chat.services.turn_request import ParticipantScope, TurnRequest, TurnRuntime
from chat.services.turns import turn_run
from personas.models import Persona

logger = logging.getLogger(__name__)

QUIET_BATCH_INTERVAL = 0.2
"""Seconds from one batch's read to the next when nobody answered the first: a channel of
chatter is read a few times a second in batches, not once per message (each read costs the
worker more than storing the messages did), and a trigger in it waits at most this long."""


@dataclass(frozen=True)
class TriggerPlan:
    """One unread message and the (persona, trigger) pairs that answer it, in answer order."""

    message: HistoryMessage
    answers: tuple[tuple[Persona, Trigger], ...]


class ReactiveLoop:
    """Answers a reactive channel's unread messages; one instance serves every channel."""

    def __init__(
        self, *, runtime: TurnRuntime, own: Callable[[], OwnIdentity], counts: UnreadCounts
    ) -> None:
        self._runtime = runtime
        self._own = own
        self._counts = counts

    async def run(self, configuration: ChannelConfiguration) -> None:
        """Answer every unread message's triggers, oldest first, until the pool is empty
        (messages that arrive meanwhile are answered in the same stretch). The configuration
        is read anew for each batch of messages, so a change applies from the next batch."""
        channel_id = configuration.channel_id
        last_delivered_id: int | None = None  # the newest reply to an earlier message
        port = self._runtime.port
        reread = False  # the pass read the configuration for the first batch
        read: _ReadRun | None = None  # the last batch's unanswered run, to mark read first
        loop = asyncio.get_running_loop()
        batch_started = loop.time()
        while True:
            if read is not None:  # nobody was answered: let the next batch gather
                await asyncio.sleep(batch_started + QUIET_BATCH_INTERVAL - loop.time())
            batch_started = loop.time()
            served, pending = await sync_to_async(self._next_batch)(
                configuration, reread=reread, read=read
            )
            if served is None:
                taken = await sync_to_async(event_queue.unread_pool_take)(channel_id=channel_id)
                logger.info("channel %s is no longer served; %d dropped", channel_id, len(taken))
                return
            # A message a proxy system replaced (and deleted) is never answered: its proxied
            # copy, the member's message, is.
            pending = await event_queue.pool_without_superseded(
                pending=pending, port=port, channel_id=channel_id
            )
            if not pending:
                return
            configuration, reread, read = served, True, None
            plans = await self._plans(configuration, pending)
            await self._counts.announce({channel_id: len(pending)})
            trigger_ids = [plan.message.id for plan in plans if plan.answers]
            unanswered: int | None = None  # the newest message nobody answers, still pooled
            for plan in plans:
                if not plan.answers:
                    unanswered = plan.message.id
                    continue
                if unanswered is not None:  # those before this trigger leave together
                    await _take_through(channel_id, unanswered, pending)
                    unanswered = None
                later = frozenset(i for i in trigger_ids if i > plan.message.id)
                queued = trigger_waited(
                    plan.message.id,
                    previous_reply_id=last_delivered_id,
                    pending_ids=[m.id for m in pending],
                )
                delivered_ids: list[int] = []
                participants = ParticipantScope()  # read once for the co-responders
                for persona, trigger in plan.answers:
                    answered = await sync_to_async(turn_already_answered)(
                        trigger_id=plan.message.id, persona_id=persona.id
                    )
                    if answered:
                        continue
                    turn = await turn_run(
                        runtime=self._runtime,
                        request=TurnRequest(
                            configuration=configuration,
                            persona=persona,
                            trigger=plan.message,
                            reason=trigger.reason,
                            reason_detail={"rule": str(trigger.reason), "detail": trigger.detail},
                            is_queued_turn=queued,
                            later_queued_trigger_ids=later,
                            participants=participants,
                        ),
                    )
                    delivered_ids += [int(i) for i in turn.delivered_message_ids]
                if delivered_ids:
                    last_delivered_id = max(delivered_ids)
                await _take_through(channel_id, plan.message.id, pending)
            if unanswered is not None:  # marked read with the next batch's read
                read = _ReadRun(unanswered, tuple(m.id for m in pending))

    def _next_batch(
        self, configuration: ChannelConfiguration, *, reread: bool, read: _ReadRun | None
    ) -> tuple[ChannelConfiguration | None, list[HistoryMessage]]:
        """One trip to the database thread per batch: the last batch's unanswered run marked
        read, the configuration (with ``reread``, read anew), and the unread pool. A busy
        channel of chatter nobody answers costs this and nothing more per batch. None when
        the channel is no longer served."""
        channel_id = configuration.channel_id
        if read is not None:
            event_queue.unread_pool_mark_read(
                channel_id=channel_id, up_to_message_id=read.through, message_ids=read.planned
            )
        if reread:
            configuration = self._runtime.configurations(
                channel_id=channel_id, guild_id=configuration.guild_id, now=self._runtime.clock()
            )
            if configuration is None or not configuration.settings.enabled:
                return None, []
        return configuration, unread_pool_messages(channel_id=channel_id)

    async def _plans(
        self, configuration: ChannelConfiguration, pending: list[HistoryMessage]
    ) -> list[TriggerPlan]:
        """The batch's trigger plans; the database thread is asked only when a rule could
        address one of its messages (`trigger_plans` reads their facts)."""
        bot_user_id = self._own().bot_user_id
        candidates = addressable(
            configuration=configuration, pending=pending, bot_user_id=bot_user_id
        )
        if not candidates:
            return [TriggerPlan(message=m, answers=()) for m in pending]
        return await sync_to_async(_plans_with_facts)(
            configuration=configuration,
            pending=pending,
            candidates=candidates,
            bot_user_id=bot_user_id,
        )


@dataclass(frozen=True)
class _ReadRun:
    """Unread messages nobody answers, up to ``through``, of the ``planned`` batch."""

    through: int
    planned: tuple[int, ...]


async def _take_through(
    channel_id: int, message_id: int, planned: Sequence[HistoryMessage]
) -> None:
    """Mark the channel's unread messages up to ``message_id`` read (one statement), of those
    ``planned``: a message caught up over REST may be older than one that came live, and
    reach the pool after this batch was planned; it stays for the next batch."""
    await sync_to_async(event_queue.unread_pool_mark_read)(
        channel_id=channel_id,
        up_to_message_id=message_id,
        message_ids=[m.id for m in planned],
    )


def trigger_waited(
    message_id: int, *, previous_reply_id: int | None, pending_ids: list[int]
) -> bool:
    """Whether the turns answering ``message_id`` are queued turns: the message arrived before
    the reply to an earlier message was delivered (snowflakes order by time), or other unread
    messages came after it, so the reply will not sit right below it."""
    arrived_before_reply = previous_reply_id is not None and message_id < previous_reply_id
    return arrived_before_reply or any(i > message_id for i in pending_ids)


def trigger_plans(
    *, configuration: ChannelConfiguration, pending: list[HistoryMessage], bot_user_id: int
) -> list[TriggerPlan]:
    """Each pending message with the personas that answer it (none: nobody answers): the
    facts of the `addressable` messages gathered once for all of them
    (`selectors.trigger_inputs`), then the one trigger decision the dashboard's preview and
    "why (not)?" page also make."""
    candidates = addressable(configuration=configuration, pending=pending, bot_user_id=bot_user_id)
    return _plans_with_facts(
        configuration=configuration,
        pending=pending,
        candidates=candidates,
        bot_user_id=bot_user_id,
    )


def _plans_with_facts(
    *,
    configuration: ChannelConfiguration,
    pending: list[HistoryMessage],
    candidates: list[HistoryMessage],
    bot_user_id: int,
) -> list[TriggerPlan]:
    """`trigger_plans` once the ``candidates`` among ``pending`` are known."""
    by_name = {p.name: p for p in configuration.personas}
    inputs = (
        selectors.trigger_inputs(
            configuration=configuration, messages=candidates, bot_user_id=bot_user_id
        )
        if candidates
        else []
    )
    answers_of: dict[int, tuple[tuple[Persona, Trigger], ...]] = {}
    for facts in inputs:
        decision = trigger_decision(facts)
        answers_of[facts.message.id] = tuple((by_name[t.persona_name], t) for t in decision.answers)
    return [TriggerPlan(message=m, answers=answers_of.get(m.id, ())) for m in pending]


def addressable(
    *, configuration: ChannelConfiguration, pending: list[HistoryMessage], bot_user_id: int | None
) -> list[HistoryMessage]:
    """Those of ``pending`` some trigger rule could address (`may_be_addressed`): the rest,
    chatter nobody answers whatever the database says, needs no facts and no query."""
    personas = tuple(trigger_persona(persona=p) for p in configuration.personas)
    is_dm = configuration.guild_id is None
    return [
        m
        for m in pending
        if may_be_addressed(m, personas=personas, is_dm=is_dm, bot_user_id=bot_user_id)
    ]
