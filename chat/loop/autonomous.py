"""Autonomous channels: the planner of seed 003 decides the next action, step by step.

Each step asks the planner model for one JSON action (`chat.pipeline.planner`) and dispatches
it: read the unread pool, let a persona speak (a persona turn through `turn_run`), react, sleep,
or stop. At most `MAX_LOOP_ITERATIONS` steps per loop, ``step_delay`` seconds between them. A
send is dropped when new messages arrived while it was written, so the next step reads first.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async

from botproject.events import LoopStep, channel_group, publish
from chat import selectors
from chat.loop import ingress
from chat.models import Turn
from chat.pipeline.planner import (
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
from chat.pipeline.simplify import build_simplified_history, hidden_user_ids
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import HistoryMessage
from chat.ports import DeliveryError
from chat.selectors import ChannelConfiguration
from chat.services import TurnRequest, TurnRuntime, planner_step_record, turn_run
from personas.models import Persona

logger = logging.getLogger(__name__)

MAX_LOOP_ITERATIONS = 5


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


class AutonomousLoop:
    """Runs planner loops; one instance serves every autonomous channel."""

    def __init__(
        self,
        *,
        runtime: TurnRuntime,
        step_delay: float = 2.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._runtime = runtime
        self._step_delay = step_delay
        self._sleep = sleep

    async def run(self, configuration: ChannelConfiguration) -> None:
        """Seed 003's loop: plan, dispatch, continue while the action says so; at most
        `MAX_LOOP_ITERATIONS` steps."""
        state = _PlannerState()
        channel_id = configuration.channel_id
        if not configuration.personas:
            await sync_to_async(ingress.unread_pool_take)(channel_id=channel_id)
            return
        group = channel_group(channel_id)
        loop_id = uuid.uuid4().hex
        for iteration in range(1, MAX_LOOP_ITERATIONS + 1):
            action = await self._plan(configuration, state, iteration)
            if action is None:
                break
            result = await self._dispatch(configuration, state, action, iteration)
            name = action.action if not isinstance(action, PlannerOutputError) else "invalid"
            state.history.append(ActionRecord(name, result.success, result.result))
            step = LoopStep(
                iteration=iteration, action=name, success=result.success, result=result.result
            )
            await publish(group, step)
            await self._record_step(configuration, state, action, step, loop_id)
            if not result.should_continue:
                break
            await self._sleep(self._step_delay)
        else:
            logger.info("planner loop in %s stopped at %d steps", channel_id, iteration)

    async def _record_step(
        self,
        configuration: ChannelConfiguration,
        state: _PlannerState,
        action: PlannerAction | PlannerOutputError,
        step: LoopStep,
        loop_id: str,
    ) -> None:
        """Keep the step for "why (not)?"; a failed write is logged, the loop goes on."""
        data = {} if isinstance(action, PlannerOutputError) else action.model_dump()
        try:
            await sync_to_async(planner_step_record)(
                channel_id=configuration.channel_id,
                guild_id=configuration.guild_id,
                loop_id=loop_id,
                iteration=step.iteration,
                action=data,
                success=step.success,
                result=step.result,
            )
        except Exception:
            logger.warning("could not record planner step %s", step.iteration, exc_info=True)

    async def _plan(
        self, configuration: ChannelConfiguration, state: _PlannerState, iteration: int
    ) -> PlannerAction | PlannerOutputError | None:
        """Ask the planner for one action; None when the model could not be reached."""
        channel = configuration.settings
        unread = await sync_to_async(ingress.unread_pool_messages)(channel_id=channel.channel_id)
        seen = [*state.read, *unread]
        standing = await sync_to_async(selectors.user_standing)(
            user_ids=[m.accountable_user_id for m in seen]
        )
        simplified = build_simplified_history(
            seen,
            reply_targets={},
            names=self._runtime.port.names(configuration.guild_id, [m.author.id for m in seen]),
            hidden_user_ids=hidden_user_ids(standing.privacy, standing.blacklisted),
            blocked_user_ids=frozenset(),
            timezone=ZoneInfo(channel.timezone),
        )
        lines = render_planner_lines(simplified.entries, simplified.id_map)
        state.refs = dict(simplified.id_map.as_mapping())
        unread_ids = {m.id for m in unread}
        personas = configuration.personas
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
            models=selectors.persona_model_specs(personas[0]),
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
        configuration: ChannelConfiguration,
        state: _PlannerState,
        action: PlannerAction | PlannerOutputError,
        iteration: int,
    ) -> ActionResult:
        """Run one action; every outcome is a result the next planner step can read."""
        channel_id = configuration.channel_id
        if isinstance(action, PlannerOutputError):
            return ActionResult(False, True, f"your last answer was not a valid action: {action}")
        if isinstance(action, ReadUnreadMessages):
            taken = await sync_to_async(ingress.unread_pool_take)(channel_id=channel_id)
            state.read.extend(taken)
            return ActionResult(True, True, f"read {len(taken)} messages")
        if isinstance(action, SendMessage):
            return await self._send(configuration, state, action, iteration)
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
        configuration: ChannelConfiguration,
        state: _PlannerState,
        action: SendMessage,
        iteration: int,
    ) -> ActionResult:
        """Let a persona take a turn, unless new messages arrived: then read first."""
        persona: Persona | None = configuration.persona_named(action.persona)
        if persona is None:
            names = ", ".join(p.name for p in configuration.personas)
            return ActionResult(False, True, f"no persona named {action.persona!r} ({names})")
        channel_id = configuration.channel_id
        count = await sync_to_async(ingress.unread_pool_count)(channel_id=channel_id)
        if count:
            return ActionResult(False, True, f"{count} new messages arrived; read them first")
        if not state.read:
            return ActionResult(False, True, "there is nothing to answer yet; read first")
        target_id = state.refs.get(action.reply_to or "", state.read[-1].id)
        trigger = next((m for m in state.read if m.id == target_id), state.read[-1])
        turn = await turn_run(
            runtime=self._runtime,
            request=TurnRequest(
                configuration=configuration,
                persona=persona,
                trigger=trigger,
                reason=TurnReason.PLANNER,
                reason_detail={
                    "action": action.model_dump(),
                    "iteration": iteration,
                    "earlier_actions": [r.action for r in state.history],
                },
            ),
            abort_if=_unread_arrived(channel_id),
        )
        if turn.status == Turn.Status.ABORTED:
            return ActionResult(False, True, "new messages arrived while writing; read them first")
        return ActionResult(
            turn.status == Turn.Status.REPLIED, False, f"{persona.name}: {turn.status}"
        )


def _unread_arrived(channel_id: int) -> Callable[[], Awaitable[str | None]]:
    async def check() -> str | None:
        count = await sync_to_async(ingress.unread_pool_count)(channel_id=channel_id)
        return f"{count} new messages arrived during generation" if count else None

    return check
