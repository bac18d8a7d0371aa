"""Reactive channels: trigger rules decide who answers each unread message.

Each unread message, oldest first, goes through the trigger rules (`chat.pipeline.triggers`);
every trigger gets its own turn in arrival order, and the message leaves the pool once its turns
are done, so a worker killed mid-burst answers the rest after a restart, and a turn that already
replied is not run again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from botproject.events import UnreadCount, channel_group, publish
from chat import selectors
from chat.pipeline.triggers import Trigger, reactive_triggers
from chat.pipeline.types import BlockType, HistoryMessage
from chat.selectors import ChannelConfiguration, turn_already_answered
from chat.services import event_queue
from chat.services.event_queue import OwnIdentity
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.services.turns import turn_run
from personas.models import Persona

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TriggerPlan:
    """One unread message and the (persona, trigger) pairs that answer it, in answer order."""

    message: HistoryMessage
    answers: tuple[tuple[Persona, Trigger], ...]


class ReactiveLoop:
    """Answers a reactive channel's unread messages; one instance serves every channel."""

    def __init__(self, *, runtime: TurnRuntime, own: Callable[[], OwnIdentity]) -> None:
        self._runtime = runtime
        self._own = own

    async def run(self, configuration: ChannelConfiguration) -> None:
        """Answer every unread message's triggers, oldest first, until the pool is empty
        (messages that arrive meanwhile are answered in the same stretch). The configuration
        is read anew for each batch of messages, so a change applies from the next batch."""
        channel_id = configuration.channel_id
        answered_earlier = False  # a turn for an earlier message ran in this busy stretch
        # A message a proxy system replaced (and deleted) is never answered: its proxied copy,
        # the member's message, is.
        port = self._runtime.port
        while pending := await event_queue.unread_pool_without_superseded(
            port=port, channel_id=channel_id
        ):
            plans = await sync_to_async(trigger_plans)(
                configuration=configuration,
                pending=pending,
                bot_user_id=self._own().bot_user_id,
            )
            await publish(channel_group(channel_id), UnreadCount(count=len(pending)))
            trigger_ids = [plan.message.id for plan in plans if plan.answers]
            for plan in plans:
                later = frozenset(i for i in trigger_ids if i > plan.message.id)
                ran_for_this_message = False
                for persona, trigger in plan.answers:
                    answered = await sync_to_async(turn_already_answered)(
                        trigger_id=plan.message.id, persona_id=persona.id
                    )
                    if answered:
                        continue
                    await turn_run(
                        runtime=self._runtime,
                        request=TurnRequest(
                            configuration=configuration,
                            persona=persona,
                            trigger=plan.message,
                            reason=trigger.reason,
                            reason_detail={"rule": str(trigger.reason), "detail": trigger.detail},
                            # Queued: the message waited behind another message's turns.
                            # Personas answering the same message are co-responders, not
                            # queued behind each other.
                            is_queued_turn=answered_earlier,
                            later_queued_trigger_ids=later,
                        ),
                    )
                    ran_for_this_message = True
                answered_earlier = answered_earlier or ran_for_this_message
                await sync_to_async(event_queue.unread_pool_take)(
                    channel_id=channel_id, up_to_message_id=plan.message.id
                )
            reread = await sync_to_async(selectors.channel_configuration)(
                channel_id=channel_id,
                guild_id=configuration.guild_id,
                now=self._runtime.clock(),
            )
            if reread is None or not reread.settings.enabled:
                taken = await sync_to_async(event_queue.unread_pool_take)(channel_id=channel_id)
                logger.info("channel %s is no longer served; %d dropped", channel_id, len(taken))
                return
            configuration = reread


def trigger_plans(
    *, configuration: ChannelConfiguration, pending: list[HistoryMessage], bot_user_id: int
) -> list[TriggerPlan]:
    """Each pending message with the personas that answer it (none: nobody answers).

    The personas and blocks come from ``configuration``; the authors' standing (blacklisted or
    full privacy: they trigger nothing) and which persona wrote each replied-to message are
    read here.
    """
    personas = configuration.personas
    by_name = {p.name: p for p in personas}
    standing = selectors.user_standing(user_ids=[m.accountable_user_id for m in pending])
    replied = selectors.replied_persona_names(
        message_ids=[m.reference.message_id for m in pending if m.reference]
    )
    trigger_personas = [selectors.trigger_persona(p) for p in personas]
    plans = []
    for message in pending:
        user_id = message.accountable_user_id
        triggers = reactive_triggers(
            message=message,
            personas=trigger_personas,
            bot_user_id=bot_user_id,
            is_dm=configuration.guild_id is None,
            replied_persona_name=replied.get(message.reference.message_id)
            if message.reference
            else None,
            silenced_for={
                block.persona_name
                for block in configuration.blocks
                if block.user_id == user_id and block.type in (BlockType.MUTE, BlockType.BLOCK)
            },
            # A user with full privacy never appears in a prompt, so never triggers one: the
            # model would answer a message it cannot see.
            author_blacklisted=user_id in standing.blacklisted or user_id in standing.full_privacy,
        )
        answers = tuple((by_name[t.persona_name], t) for t in triggers)
        plans.append(TriggerPlan(message=message, answers=answers))
    return plans
