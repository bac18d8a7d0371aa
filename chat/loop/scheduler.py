"""The scheduler (seed 003, phases 2–5): consumes the event queue and runs each channel's loop.

One consumer task moves ready events into unread pools and wakes the channels they touched.
Each channel runs one loop at a time under its own lock: a *busy stretch* lasts while the
channel has unread messages, and within it turns share the history window. When the pool is
empty the stretch ends and the channel's window is released.

- Reactive channels: each unread message, oldest first, goes through the trigger rules; every
  trigger gets its own turn in arrival order, and the message leaves the pool once its turns
  are done (so a worker killed mid-burst answers the rest after a restart, and a turn that
  already replied is not run again).
- Autonomous channels: the planner chooses actions, at most `MAX_LOOP_ITERATIONS` per loop,
  with `step_delay` seconds between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from chat import events, selectors
from chat.llm.config import persona_model_specs
from chat.loop import ingress
from chat.loop.ingress import OwnIdentity
from chat.loop.planner import (
    ActionRecord,
    Continue,
    PlannerAction,
    PlannerOutputError,
    PlannerRosterEntry,
    React,
    ReadUnreadMessages,
    SendMessage,
    Sleep,
    build_planner_messages,
    parse_planner_action,
    render_planner_lines,
)
from chat.loop.ports import DeliveryError
from chat.loop.triggers import Trigger, reactive_triggers
from chat.models import MessageIndex
from chat.pipeline.simplify import build_simplified_history, hidden_user_ids
from chat.pipeline.types import BlockType, HistoryMessage, PrivacyLevel
from chat.selectors import ChannelSettings
from chat.services import TurnRequest, TurnRuntime, turn_already_answered, turn_run
from personas.models import ChannelMode, Persona

logger = logging.getLogger(__name__)

MAX_LOOP_ITERATIONS = 5
POLL_SECONDS = 5.0


@dataclass
class _PlannerState:
    """One autonomous loop's memory: what it read and what its actions returned."""

    read: list[HistoryMessage] = field(default_factory=list)
    history: list[ActionRecord] = field(default_factory=list)
    refs: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ActionResult:
    success: bool
    should_continue: bool
    result: str


class Scheduler:
    """Runs the worker's queue consumer and channel loops on one event loop."""

    def __init__(
        self,
        *,
        runtime: TurnRuntime,
        own: Callable[[], OwnIdentity],
        step_delay: float = 2.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._runtime = runtime
        self._own = own
        self._step_delay = step_delay
        self._sleep = sleep
        self._wakeup = asyncio.Event()
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._dirty: set[int] = set()
        self._consumer: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start consuming; pools left by an earlier run are resumed at once."""
        self._consumer = asyncio.create_task(self._consume_forever(), name="queue-consumer")
        self.wake()

    async def stop(self) -> None:
        """Cancel the consumer and every channel loop, and wait for them to end."""
        tasks = [t for t in (self._consumer, *self._loops.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()

    def wake(self) -> None:
        """New events are in the queue."""
        self._wakeup.set()

    async def idle(self) -> None:
        """Wait until the queue is consumed and no channel loop runs (used by tests)."""
        while True:
            await asyncio.sleep(0.05)
            ready = await sync_to_async(ingress.event_queue_has_ready)()
            if not self._loops and not ready and not self._wakeup.is_set():
                return

    # -- consumption -------------------------------------------------------------------------

    async def _consume_forever(self) -> None:
        first = True
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=POLL_SECONDS)
            self._wakeup.clear()
            try:
                await sync_to_async(close_old_connections)()
                consumed = await sync_to_async(ingress.event_queue_consume)(own=self._own())
                channel_ids = consumed.channel_ids
                if first:
                    channel_ids += await sync_to_async(ingress.unread_channel_ids)()
                    first = False
            except Exception:
                logger.exception("consuming the event queue failed; retrying")
                continue
            for channel_id in dict.fromkeys(channel_ids):
                self._ensure_loop(channel_id)

    def _ensure_loop(self, channel_id: int) -> None:
        self._dirty.add(channel_id)
        if channel_id not in self._loops:
            task = asyncio.create_task(self._channel_loop(channel_id), name=f"channel-{channel_id}")
            self._loops[channel_id] = task
            task.add_done_callback(lambda _: self._loops.pop(channel_id, None))

    async def _channel_loop(self, channel_id: int) -> None:
        """One busy stretch: run until no new work arrived during the last pass."""
        group = events.channel_group(channel_id)
        await events.publish(group, "loop.state", state="busy")
        try:
            while channel_id in self._dirty:
                self._dirty.discard(channel_id)
                try:
                    await self._channel_pass(channel_id)
                except Exception:
                    logger.exception("channel %s loop failed; its messages stay unread", channel_id)
                    return
        finally:
            self._runtime.release_channel(channel_id)
            await events.publish(group, "loop.state", state="idle")

    async def _channel_pass(self, channel_id: int) -> None:
        guild_id = await sync_to_async(ingress.unread_pool_guild_id)(channel_id=channel_id)
        channel = await sync_to_async(selectors.channel_settings)(
            channel_id=channel_id, guild_id=guild_id
        )
        if channel is None or not channel.enabled:
            taken = await sync_to_async(ingress.unread_pool_take)(channel_id=channel_id)
            logger.info("channel %s is not served; %d messages dropped", channel_id, len(taken))
            return
        if channel.mode == ChannelMode.AUTONOMOUS:
            await self._planner_loop(channel)
        else:
            await self._reactive_pass(channel)

    # -- reactive ----------------------------------------------------------------------------

    async def _reactive_pass(self, channel: ChannelSettings) -> None:
        """Answer every unread message's triggers, oldest message first, until the pool is
        empty (messages that arrive meanwhile are answered in the same stretch)."""
        channel_id = channel.channel_id
        ran_a_turn = False
        while pending := await sync_to_async(ingress.unread_pool_messages)(channel_id=channel_id):
            plans = await sync_to_async(self._trigger_plans)(channel, pending)
            trigger_ids = [message.id for message, triggers in plans if triggers]
            await events.publish(
                events.channel_group(channel_id), "unread.count", count=len(pending)
            )
            for message, triggers in plans:
                later = frozenset(i for i in trigger_ids if i > message.id)
                for persona, trigger in triggers:
                    answered = await sync_to_async(turn_already_answered)(
                        trigger_id=message.id, persona_id=persona.id
                    )
                    if answered:
                        continue
                    await turn_run(
                        runtime=self._runtime,
                        request=TurnRequest(
                            channel=channel,
                            persona=persona,
                            trigger=message,
                            reason=str(trigger.reason),
                            reason_detail={"rule": str(trigger.reason), "detail": trigger.detail},
                            is_queued_turn=ran_a_turn,
                            later_queued_trigger_ids=later,
                        ),
                    )
                    ran_a_turn = True
                await sync_to_async(ingress.unread_pool_take)(
                    channel_id=channel_id, up_to_message_id=message.id
                )

    def _trigger_plans(
        self, channel: ChannelSettings, pending: list[HistoryMessage]
    ) -> list[tuple[HistoryMessage, list[tuple[Persona, Trigger]]]]:
        """Each pending message with the (persona, trigger) pairs that answer it."""
        personas = selectors.guild_personas(guild=channel.guild)
        by_name = {p.name: p for p in personas}
        blocks = selectors.active_blocks(guild=channel.guild, now=self._runtime.clock())
        standing = selectors.user_standing(user_ids=[m.accountable_user_id for m in pending])
        replied = {
            row.message_id: row.persona.name
            for row in MessageIndex.objects.filter(
                message_id__in=[m.reference.message_id for m in pending if m.reference],
                persona__isnull=False,
            ).select_related("persona")
        }
        bot_user_id = self._own().bot_user_id
        plans = []
        for message in pending:
            user_id = message.accountable_user_id
            triggers = reactive_triggers(
                message=message,
                personas=[selectors.trigger_persona(p) for p in personas],
                bot_user_id=bot_user_id,
                is_dm=channel.guild is None,
                replied_persona_name=replied.get(message.reference.message_id)
                if message.reference
                else None,
                silenced_for={
                    b.persona_name
                    for b in blocks
                    if b.user_id == user_id and b.type in (BlockType.MUTE, BlockType.BLOCK)
                },
                author_blacklisted=user_id in standing.blacklisted,
            )
            plans.append((message, [(by_name[t.persona_name], t) for t in triggers]))
        return plans

    # -- autonomous --------------------------------------------------------------------------

    async def _planner_loop(self, channel: ChannelSettings) -> None:
        """Seed 003's loop: plan, dispatch, continue while the action says so; at most
        `MAX_LOOP_ITERATIONS` steps."""
        state = _PlannerState()
        personas = await sync_to_async(selectors.guild_personas)(guild=channel.guild)
        if not personas:
            await sync_to_async(ingress.unread_pool_take)(channel_id=channel.channel_id)
            return
        group = events.channel_group(channel.channel_id)
        for iteration in range(1, MAX_LOOP_ITERATIONS + 1):
            action = await self._plan(channel, personas, state, iteration)
            if action is None:
                break
            result = await self._dispatch(channel, personas, state, action, iteration)
            name = action.action if not isinstance(action, PlannerOutputError) else "invalid"
            state.history.append(ActionRecord(name, result.success, result.result))
            await events.publish(
                group,
                "loop.step",
                iteration=iteration,
                action=name,
                success=result.success,
                result=result.result,
            )
            if not result.should_continue:
                break
            await self._sleep(self._step_delay)
        else:
            logger.info("planner loop in %s stopped at %d steps", channel.channel_id, iteration)

    async def _plan(
        self, channel: ChannelSettings, personas: list[Persona], state: _PlannerState, iteration
    ) -> PlannerAction | PlannerOutputError | None:
        """Ask the planner for one action; None when the model could not be reached."""
        unread = await sync_to_async(ingress.unread_pool_messages)(channel_id=channel.channel_id)
        hidden = await sync_to_async(_hidden_users)([*state.read, *unread])
        simplified = build_simplified_history(
            [*state.read, *unread],
            reply_targets={},
            names=self._runtime.port.names(
                channel.guild.guild_id if channel.guild else None,
                [m.author.id for m in (*state.read, *unread)],
            ),
            hidden_user_ids=hidden,
            blocked_user_ids=frozenset(),
            timezone=ZoneInfo(channel.timezone),
        )
        lines = render_planner_lines(simplified.entries, simplified.id_map)
        state.refs = dict(simplified.id_map.as_mapping())
        unread_ids = {m.id for m in unread}
        messages = build_planner_messages(
            channel_name=str(channel.channel_id),
            roster=[
                PlannerRosterEntry(p.name, (p.system_prompt or "a persona")[:200]) for p in personas
            ],
            recent=[line for i, line in lines.items() if i not in unread_ids],
            unread=[line for i, line in lines.items() if i in unread_ids],
            history=state.history,
            iteration=iteration,
            max_iterations=MAX_LOOP_ITERATIONS,
        )
        completion = await self._runtime.llm.complete_turn(
            models=persona_model_specs(personas[0]),
            render=lambda plan: messages,
            persona_name="planner",
        )
        if completion.error is not None:
            logger.warning("planner call failed in %s: %s", channel.channel_id, completion.error)
            return None
        try:
            return parse_planner_action(completion.reply_text)
        except PlannerOutputError as error:
            return error

    async def _dispatch(
        self,
        channel: ChannelSettings,
        personas: list[Persona],
        state: _PlannerState,
        action: PlannerAction | PlannerOutputError,
        iteration: int,
    ) -> ActionResult:
        """Run one action; every outcome is a result the next planner step can read."""
        channel_id = channel.channel_id
        if isinstance(action, PlannerOutputError):
            return ActionResult(False, True, f"your last answer was not a valid action: {action}")
        if isinstance(action, ReadUnreadMessages):
            taken = await sync_to_async(ingress.unread_pool_take)(channel_id=channel_id)
            state.read.extend(taken)
            return ActionResult(True, True, f"read {len(taken)} messages")
        if isinstance(action, SendMessage):
            return await self._send(channel, personas, state, action, iteration)
        if isinstance(action, React):
            message_id = state.refs.get(action.message)
            if message_id is None:
                return ActionResult(False, True, f"{action.message} is not a message you can see")
            try:
                await self._runtime.port.react(channel_id, message_id, action.emoji)
            except DeliveryError as error:
                return ActionResult(False, True, f"the reaction failed: {error}")
            return ActionResult(True, True, f"reacted {action.emoji} to {action.message}")
        if isinstance(action, Sleep):
            await self._sleep(action.seconds)
            return ActionResult(True, True, f"slept {action.seconds:g} s")
        assert isinstance(action, Continue)
        return ActionResult(True, False, "stopped")

    async def _send(
        self,
        channel: ChannelSettings,
        personas: list[Persona],
        state: _PlannerState,
        action: SendMessage,
        iteration: int,
    ) -> ActionResult:
        """Let a persona take a turn, unless new messages arrived: then read first."""
        persona = next(
            (p for p in personas if p.name.casefold() == action.persona.casefold()), None
        )
        if persona is None:
            names = ", ".join(p.name for p in personas)
            return ActionResult(False, True, f"no persona named {action.persona!r} ({names})")
        count = await sync_to_async(ingress.unread_pool_count)(channel_id=channel.channel_id)
        if count:
            return ActionResult(False, True, f"{count} new messages arrived; read them first")
        if not state.read:
            return ActionResult(False, True, "there is nothing to answer yet; read first")
        target_id = state.refs.get(action.reply_to or "", state.read[-1].id)
        trigger = next((m for m in state.read if m.id == target_id), state.read[-1])
        turn = await turn_run(
            runtime=self._runtime,
            request=TurnRequest(
                channel=channel,
                persona=persona,
                trigger=trigger,
                reason="planner",
                reason_detail={
                    "action": action.model_dump(),
                    "iteration": iteration,
                    "earlier_actions": [r.action for r in state.history],
                },
            ),
            abort_if=self._unread_arrived(channel.channel_id),
        )
        if turn.status == "aborted":
            return ActionResult(False, True, "new messages arrived while writing; read them first")
        return ActionResult(turn.status == "replied", False, f"{persona.name}: {turn.status}")

    def _unread_arrived(self, channel_id: int) -> Callable[[], Awaitable[str | None]]:
        async def check() -> str | None:
            count = await sync_to_async(ingress.unread_pool_count)(channel_id=channel_id)
            return f"{count} new messages arrived during generation" if count else None

        return check


def _hidden_users(messages: list[HistoryMessage]) -> frozenset[int]:
    standing = selectors.user_standing(user_ids=[m.accountable_user_id for m in messages])
    return hidden_user_ids(
        {user_id: PrivacyLevel.FULL for user_id in standing.full_privacy}, standing.blacklisted
    )
