"""Autonomous channels: the planner of seed 003 decides the next action, step by step.

Each step asks the planner model for one JSON action (`chat.pipeline.planner`) and dispatches
it: let a persona speak (a persona turn through `turn_run`), mark the unread messages read,
react, sleep, or stop. At most `MAX_LOOP_ITERATIONS` steps per loop, ``step_delay`` seconds
(seed 003's continue delay) between them. A loop stopped by that cap with unread messages still
waiting is followed, after the continue delay, by a new loop — up to `MAX_CAPPED_LOOPS` loops
in a row, so a planner that never reads its messages cannot spend without end; then the
messages wait for the next arrival.

What the planner sees (kept per channel across loops, bounded):

- the channel's **rolling conversation**: seeded from the recent history window (read the way a
  persona turn reads it), then every message it was shown and every reply a persona gave, the
  newest `MAX_CONVERSATION_MESSAGES`; users with full privacy or blacklisted, and users every
  persona of the channel has blocked, are never shown;
- its **recent actions** with their results (the newest `MAX_REMEMBERED_ACTIONS`), rebuilt from
  the `PlannerStep` rows when a worker starts planning a channel (a restart, a takeover);
- closing the prompt, the **incoming events**: the unread messages;
- the channel **by name** (the Discord port's name directory), never by id.

Turn economy (DESIGN §5): a ``send_message`` is allowed as soon as the unread messages are in
the planner's prompt — they are marked read and the persona answers them — so a reply costs two
model calls (planner + persona turn). Messages that arrived after the prompt was built refuse
the send ("read them first": the next step shows them), and a reply whose generation saw new
messages arrive is dropped (the send safety check).

Every step is recorded as a `PlannerStep` (prompt, raw decision, action, result, the persona
turn it ran); the persona turn's ``reason_detail`` names its step.

The planner's calls count against the guild's budget (as ``planner``). When it is spent no
model is asked: the step is recorded as ``paused`` with the reason, the channel's first such
step sends the spent budget's notice (`chat.services.turn_refusal`), and the loop stops; its
unread messages wait, and the next arrival after the budget renews (or an admin raises it)
plans again with all of them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async

from botproject.live_updates import LoopStep, channel_group, publish_live_update
from chat import selectors
from chat.caches import BoundedCache
from chat.llm.metering import UNMETERED, Refusal
from chat.models import Turn
from chat.pipeline.planner import (
    ActionRecord,
    Continue,
    PlannerAction,
    PlannerChannel,
    PlannerOutputError,
    PlannerPersona,
    PlannerPromptInput,
    React,
    ReadUnreadMessages,
    SendMessage,
    Sleep,
    build_planner_prompt,
    parse_planner_action,
    planner_named_user_ids,
)
from chat.pipeline.spend import CallKind
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import Author, HistoryMessage
from chat.ports import DeliveryError
from chat.selectors import ChannelConfiguration
from chat.selectors.event_queue import unread_pool_count, unread_pool_messages
from chat.services import event_queue
from chat.services.planner_steps import (
    planner_actions_recent,
    planner_reactions_unsettled,
    planner_sends_settle,
    planner_step_finish,
    planner_step_record,
)
from chat.services.spend import spend_site
from chat.services.turn_refusal import budget_notice_due, budget_notice_send
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.services.turns import turn_run
from personas.models import Persona

logger = logging.getLogger(__name__)

MAX_LOOP_ITERATIONS = 5
MAX_CAPPED_LOOPS = 3
"""Loops in a row a channel runs while each one ends at the step cap with messages unread."""
MAX_CONVERSATION_MESSAGES = 40
"""Messages of a channel's rolling conversation the planner keeps (the newest)."""
MAX_REMEMBERED_ACTIONS = 10
"""The planner's recent actions it keeps per channel, across loops."""
MAX_CHANNELS = 256
"""Channels whose planner state is kept; the least recently planned is forgotten first."""


@dataclass
class ChannelConversation:
    """What the planner remembers of one channel across loops (bounded)."""

    messages: dict[int, HistoryMessage] = field(default_factory=dict)
    actions: deque[ActionRecord] = field(
        default_factory=lambda: deque(maxlen=MAX_REMEMBERED_ACTIONS)
    )
    seeded: bool = False

    def add(self, messages: Sequence[HistoryMessage]) -> None:
        """Add messages (a repeated id is replaced) and keep the newest ones."""
        for message in messages:
            self.messages[message.id] = message
        for message_id in sorted(self.messages)[:-MAX_CONVERSATION_MESSAGES]:
            del self.messages[message_id]

    def ordered(self) -> list[HistoryMessage]:
        return [self.messages[i] for i in sorted(self.messages)]

    def forget_through(self, marker_id: int) -> None:
        """Forget the messages said at or before a ``/reset`` (``marker_id``)."""
        for message_id in [i for i in self.messages if i <= marker_id]:
            del self.messages[message_id]


@dataclass
class _Step:
    """One step's view: the unread ids the prompt showed, its refs, and its record's id."""

    shown_unread: list[HistoryMessage] = field(default_factory=list)
    refs: dict[str, int] = field(default_factory=dict)
    step_id: int | None = None
    decision: str = ""


@dataclass(frozen=True)
class ActionResult:
    success: bool
    should_continue: bool
    result: str
    turn_id: int | None = None


class AutonomousLoop:
    """Runs planner loops; one instance serves every autonomous channel of a worker."""

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
        self._channels: BoundedCache[int, ChannelConversation] = BoundedCache(MAX_CHANNELS)

    def conversation(self, channel_id: int) -> ChannelConversation:
        """The channel's remembered conversation (created empty, most recent kept)."""
        return self._channels.get_or_put(channel_id, ChannelConversation)

    async def run(self, configuration: ChannelConfiguration) -> None:
        """Seed 003's loop (`_loop`); when it stopped at the step cap and messages are still
        unread, a new loop after the continue delay (at most `MAX_CAPPED_LOOPS` in a row)."""
        channel_id = configuration.channel_id
        if not configuration.personas:
            await sync_to_async(event_queue.unread_pool_take)(channel_id=channel_id)
            return
        for _ in range(MAX_CAPPED_LOOPS):
            if not await self._loop(configuration):
                return
            await self._sleep(self._step_delay)
            if not await sync_to_async(unread_pool_count)(channel_id=channel_id):
                return
            logger.info("a new planner loop in %s: messages are still unread", channel_id)

    async def _loop(self, configuration: ChannelConfiguration) -> bool:
        """Plan, dispatch, continue while the action says so; at most `MAX_LOOP_ITERATIONS`
        steps. The conversation and actions carry over to the next loop. Returns whether the
        loop stopped at the step cap."""
        channel_id = configuration.channel_id
        state = self.conversation(channel_id)
        if not state.seeded:
            await self._seed(configuration, state)
        reset = await sync_to_async(selectors.channel_reset_marker)(channel_id=channel_id)
        if reset is not None:  # the personas see only what was said after a /reset
            state.forget_through(reset.marker_id)
        loop_id = uuid.uuid4().hex
        group = channel_group(channel_id)
        for iteration in range(1, MAX_LOOP_ITERATIONS + 1):
            step = _Step()
            action = await self._plan(configuration, state, step, iteration, loop_id)
            if action is None:
                return False
            result = await self._dispatch(configuration, state, step, action, iteration)
            name = action.action if not isinstance(action, PlannerOutputError) else "invalid"
            state.actions.append(ActionRecord(name, result.success, result.result))
            if step.step_id is not None:
                await sync_to_async(planner_step_finish)(
                    step_id=step.step_id,
                    success=result.success,
                    result=result.result,
                    turn_id=result.turn_id,
                )
            await publish_live_update(
                group,
                LoopStep(
                    iteration=iteration, action=name, success=result.success, result=result.result
                ),
            )
            if not result.should_continue:
                return False
            if iteration < MAX_LOOP_ITERATIONS:
                await self._sleep(self._step_delay)
        logger.info("planner loop in %s stopped at %d steps", channel_id, MAX_LOOP_ITERATIONS)
        return True

    async def _seed(self, configuration: ChannelConfiguration, state: ChannelConversation) -> None:
        """Start the conversation from the channel's recent window, as a persona turn reads it
        (the unread messages are left to the incoming events). Once per channel while the worker
        runs; read without changing the window registry, so the persona turns' own window and
        anchoring are exactly as without the planner.

        The recent actions come back from the channel's `PlannerStep` rows, so a worker that
        takes the channel over (a restart, a shard moved to another worker) plans on from where
        the previous one stopped."""
        channel = configuration.settings
        if not state.actions:
            await sync_to_async(planner_sends_settle)(channel_id=channel.channel_id)
            await self._settle_reactions(channel.channel_id)
            recent = await sync_to_async(planner_actions_recent)(
                channel_id=channel.channel_id, limit=MAX_REMEMBERED_ACTIONS
            )
            state.actions.extend(ActionRecord(*record) for record in recent)
        try:
            read = await self._runtime.windows.read(
                channel.channel_id,
                limit=channel.fetch_limit,
                is_dm=channel.guild is None,
                dry_run=True,
            )
        except Exception:  # Discord failed: plan without the history, try again next loop
            logger.warning("could not read %s's history", channel.channel_id, exc_info=True)
            return
        unread = await sync_to_async(unread_pool_messages)(channel_id=channel.channel_id)
        unread_ids = {m.id for m in unread}
        state.add([m for m in read.messages if m.id not in unread_ids])
        state.seeded = True

    async def _settle_reactions(self, channel_id: int) -> None:
        """Finish the ``react`` steps a stopped worker left unfinished whose reaction Discord
        shows (this bot's, with that emoji): the planner sees them done and does not react
        again. One Discord does not show stays unfinished, left out of the recent actions."""
        steps = await sync_to_async(planner_reactions_unsettled)(channel_id=channel_id)
        for step_id, message_id, emoji, ref in steps:
            message = await self._runtime.port.fetch_message(channel_id, message_id)
            reactions = message.reactions if message is not None else ()
            if any(r.me and r.emoji == emoji for r in reactions):
                await sync_to_async(planner_step_finish)(
                    step_id=step_id, success=True, result=f"reacted {emoji} to {ref}"
                )

    async def _plan(
        self,
        configuration: ChannelConfiguration,
        state: ChannelConversation,
        step: _Step,
        iteration: int,
        loop_id: str,
    ) -> PlannerAction | PlannerOutputError | None:
        """Ask the planner for one action and record the step; None when the model could not
        be reached or a spent budget refused the call (the loop ends; the unread messages stay
        for the next loop)."""
        channel = configuration.settings
        unread = await event_queue.unread_pool_without_superseded(
            port=self._runtime.port, channel_id=channel.channel_id
        )
        unread_ids = {m.id for m in unread}
        seen = [m for m in state.ordered() if m.id not in unread_ids] + unread
        standing = await sync_to_async(selectors.user_standing)(
            user_ids=[m.accountable_user_id for m in seen], guild_id=configuration.guild_id
        )
        personas = configuration.personas
        planner_personas = [PlannerPersona(p.name, p.system_prompt, p.is_main) for p in personas]
        names = self._runtime.port.names(
            configuration.guild_id, planner_named_user_ids(seen, planner_personas)
        )
        channel_name = _channel_name(configuration, names.channels)
        prompt = build_planner_prompt(
            PlannerPromptInput(
                seen=seen,
                unread_ids=unread_ids,
                personas=planner_personas,
                blocks=configuration.blocks,
                now=configuration.read_at,
                privacy=standing.privacy,
                blacklisted_user_ids=standing.blacklisted,
                names=names,
                timezone=ZoneInfo(channel.timezone),
                channel_name=channel_name,
                actions=list(state.actions),
                iteration=iteration,
                max_iterations=MAX_LOOP_ITERATIONS,
            )
        )
        messages = prompt.messages
        step.refs = dict(prompt.refs)
        step.shown_unread = unread
        site = spend_site(configuration=configuration, persona=None)
        completion = await self._runtime.runner.complete_turn(
            models=selectors.planner_model_specs(configuration=configuration),
            render=lambda plan: messages,
            persona_name="planner",
            meter=self._runtime.spend.meter(site) if site is not None else UNMETERED,
            kind=CallKind.PLANNER,
        )
        if completion.refusal is not None:
            await self._paused(configuration, completion.refusal, loop_id, iteration, unread)
            return None
        if completion.error is not None:
            logger.warning("planner call failed in %s: %s", channel.channel_id, completion.error)
            await sync_to_async(planner_step_record)(
                channel_id=channel.channel_id,
                guild_id=configuration.guild_id,
                loop_id=loop_id,
                iteration=iteration,
                prompt=messages,
                decision=f"(the model failed: {completion.error})",
                action={},
                llm_ms=completion.llm_ms,
            )
            return None
        ignored: Mapping[str, object] = {}
        action: PlannerAction | PlannerOutputError
        try:
            decision = parse_planner_action(
                completion.reply_text,
                channel=PlannerChannel(channel_id=channel.channel_id, name=channel_name),
            )
            action, ignored = decision.action, decision.ignored
        except PlannerOutputError as error:
            action = error
        step.decision = completion.reply_text
        await self._runtime.fence.check(configuration.guild_id)
        step.step_id = await sync_to_async(planner_step_record)(
            channel_id=channel.channel_id,
            guild_id=configuration.guild_id,
            loop_id=loop_id,
            iteration=iteration,
            prompt=messages,
            decision=completion.reply_text,
            action=_recorded(action, step),
            ignored=ignored,
            llm_ms=completion.llm_ms,
        )
        return action

    async def _paused(
        self,
        configuration: ChannelConfiguration,
        refusal: Refusal,
        loop_id: str,
        iteration: int,
        unread: Sequence[HistoryMessage],
    ) -> None:
        """A spent budget refused the planner's call: record the step as ``paused`` with the
        reason, and send the channel's notice when it is due (replying to the newest unread
        message)."""
        channel_id = configuration.channel_id
        await self._runtime.fence.check(configuration.guild_id)
        notice = await sync_to_async(budget_notice_due)(
            channel_id=channel_id, now=self._runtime.clock()
        )
        reason = f"no model was asked: a limit said no: {refusal.reason}"
        step_id = await sync_to_async(planner_step_record)(
            channel_id=channel_id,
            guild_id=configuration.guild_id,
            loop_id=loop_id,
            iteration=iteration,
            prompt=[],
            decision=f"({reason})",
            action={"action": "paused", "refused": "budget", "notice": notice},
            llm_ms=None,
        )
        await sync_to_async(planner_step_finish)(step_id=step_id, success=False, result=reason)
        if notice:
            await budget_notice_send(
                runtime=self._runtime,
                configuration=configuration,
                refusal=refusal,
                reply_to=unread[-1].id if unread else None,
            )

    async def _dispatch(
        self,
        configuration: ChannelConfiguration,
        state: ChannelConversation,
        step: _Step,
        action: PlannerAction | PlannerOutputError,
        iteration: int,
    ) -> ActionResult:
        """Run one action; every outcome is a result the next planner step can read."""
        channel_id = configuration.channel_id
        if isinstance(action, PlannerOutputError):
            return ActionResult(False, True, f"your last answer was not a valid action: {action}")
        if isinstance(action, ReadUnreadMessages):
            taken = await self._take_shown(channel_id, step)
            state.add(taken)
            return ActionResult(True, True, f"read {len(taken)} messages")
        if isinstance(action, SendMessage):
            return await self._send(configuration, state, step, action, iteration)
        if isinstance(action, React):
            message_id = step.refs.get(action.message)
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

    async def _take_shown(self, channel_id: int, step: _Step) -> list[HistoryMessage]:
        """Mark read the unread messages this step's prompt showed (later arrivals stay)."""
        if not step.shown_unread:
            return []
        return await sync_to_async(event_queue.unread_pool_take)(
            channel_id=channel_id, message_ids=[m.id for m in step.shown_unread]
        )

    async def _send(
        self,
        configuration: ChannelConfiguration,
        state: ChannelConversation,
        step: _Step,
        action: SendMessage,
        iteration: int,
    ) -> ActionResult:
        """Let a persona answer what the prompt showed, unless messages arrived since."""
        persona: Persona | None = configuration.persona_named(action.persona)
        if persona is None:
            names = ", ".join(p.name for p in configuration.personas)
            return ActionResult(False, True, f"no persona named {action.persona!r} ({names})")
        channel_id = configuration.channel_id
        shown = {m.id for m in step.shown_unread}
        pool = await sync_to_async(unread_pool_messages)(channel_id=channel_id)
        arrived = [m for m in pool if m.id not in shown]
        if arrived:
            return ActionResult(
                False, True, f"{len(arrived)} new messages arrived; read them first"
            )
        # What the prompt showed joins the conversation now, but leaves the unread pool only
        # once the turn has run: a worker stopped or fenced off mid-turn leaves it unread for
        # the worker that runs the channel next.
        state.add(list(step.shown_unread))
        bot_user_id = self._runtime.port.bot_user_id
        others = [
            m
            for m in state.ordered()
            if m.author.persona_name is None and m.author.id != bot_user_id
        ]
        if not others:
            return ActionResult(False, True, "there is nothing to answer yet")
        target_id = step.refs.get(action.reply_to or "", others[-1].id)
        trigger = state.messages.get(target_id, others[-1])
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
                    "planner_step_id": step.step_id,
                    "planner_decision": step.decision,
                    "earlier_actions": [r.action for r in state.actions],
                },
            ),
            abort_if=_unread_arrived(channel_id, shown),
        )
        await self._take_shown(channel_id, step)
        if turn.status == Turn.Status.ABORTED:
            return ActionResult(
                False, True, "new messages arrived while writing; read them first", turn.id
            )
        if turn.status == Turn.Status.REPLIED:
            state.add(_own_reply(turn, persona, self._runtime.port.bot_user_id, trigger))
        return ActionResult(
            turn.status == Turn.Status.REPLIED, False, f"{persona.name}: {turn.status}", turn.id
        )


def _recorded(action: PlannerAction | PlannerOutputError, step: _Step) -> dict[str, object]:
    """The action as its step records it; a reaction with the id of its message, a reply with
    the unread messages it was shown, which a worker taking the channel over reads back
    (`_settle_reactions`, `planner_sends_settle`)."""
    if isinstance(action, PlannerOutputError):
        return {}
    recorded = action.model_dump()
    if isinstance(action, React) and action.message in step.refs:
        recorded["message_id"] = step.refs[action.message]
    if isinstance(action, SendMessage):
        recorded["shown_ids"] = [m.id for m in step.shown_unread]
    return recorded


def _channel_name(configuration: ChannelConfiguration, channels: Mapping[int, str]) -> str:
    """The channel's name from the name directory; a neutral phrase when it is unknown (a DM,
    or a name the gateway has not cached) — never the raw id."""
    known = channels.get(configuration.channel_id)
    if known:
        return known
    return "direct-message" if configuration.guild_id is None else "this-channel"


def _own_reply(
    turn: Turn, persona: Persona, bot_user_id: int, trigger: HistoryMessage
) -> list[HistoryMessage]:
    """The persona's delivered reply as the conversation remembers it (one entry, under the
    first delivered message's id)."""
    if not turn.delivered_message_ids:
        return []
    return [
        HistoryMessage(
            id=int(turn.delivered_message_ids[0]),
            channel_id=trigger.channel_id,
            author=Author(
                id=bot_user_id, display_name=persona.name, is_bot=True, persona_name=persona.name
            ),
            content=turn.reply_text,
            created_at=turn.finished_at or trigger.created_at,
        )
    ]


def _unread_arrived(
    channel_id: int, shown: Collection[int] = ()
) -> Callable[[], Awaitable[str | None]]:
    """Whether messages other than ``shown`` (still pooled while the turn runs) are unread."""

    async def check() -> str | None:
        pool = await sync_to_async(unread_pool_messages)(channel_id=channel_id)
        count = sum(1 for m in pool if m.id not in shown)
        return f"{count} new messages arrived during generation" if count else None

    return check
