""" "Why (not)?": for one message, each persona's answer to "did you reply, and why or why not".

Two steps. `why_gather` reads what the worker recorded — the message's stored event (event
queue or unread pool; else the message read from Discord), its turns, the channel's
configuration, the trigger decision's facts (`chat.selectors.trigger_inputs`, as the worker
gathers them) and the planner's steps since it arrived. `why_judge` is pure: it makes the one
trigger decision the worker makes (`chat.pipeline.triggers.trigger_decision`) and tells each
persona's story. Nothing here asks the model; Discord only through the ``fetch`` passed in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from pydantic import TypeAdapter, ValidationError

from chat import selectors as chat_selectors
from chat.models import PlannerStep, Turn
from chat.pipeline.triggers import (
    PersonaVerdict,
    Silence,
    TriggerDecision,
    TriggerInput,
    trigger_decision,
)
from chat.pipeline.types import BlockType, HistoryMessage
from chat.selectors.message_trace import MessageRecord, message_record, planner_loop_after
from personas.models import ChannelMode


@dataclass(frozen=True)
class PersonaAnswer:
    """One persona's answer: ``replied`` and a sentence saying why (or why not); ``rule`` the
    trigger rule that fired (empty: none), ``turns`` the turns it ran for the message, and
    ``verdict`` the trigger decision for it (None: the message could not be judged)."""

    persona: str
    replied: bool
    why: str
    rule: str = ""
    turns: tuple[Turn, ...] = ()
    verdict: PersonaVerdict | None = None


@dataclass(frozen=True)
class WhyAnswer:
    record: MessageRecord
    answers: tuple[PersonaAnswer, ...]
    summary: str
    message: HistoryMessage | None = None
    hidden: bool = False
    """The author has full privacy or is blacklisted: their words are never shown."""


@cache
def _message_adapter() -> TypeAdapter[HistoryMessage]:
    return TypeAdapter(HistoryMessage)


MessageFetch = Callable[[int, int], HistoryMessage | None]


@dataclass(frozen=True)
class WhyFacts:
    """What `why_gather` read for one message. ``configured`` False: the channel's guild is
    not configured; ``personas`` the channel's persona names (main first); ``facts`` the
    trigger decision's input (None: the message is neither stored nor readable);
    ``planner_steps`` the first planner loop since the message arrived (autonomous)."""

    record: MessageRecord
    configured: bool = False
    enabled: bool = True
    autonomous: bool = False
    personas: tuple[str, ...] = ()
    facts: TriggerInput | None = None
    planner_steps: tuple[PlannerStep, ...] = ()


def why_message(
    *,
    message_id: int,
    bot_user_id: int | None,
    now: dt.datetime,
    fetch: MessageFetch | None = None,
) -> WhyAnswer:
    """Each persona's answer for ``message_id``: `why_gather`, then `why_judge`."""
    return why_judge(
        why_gather(message_id=message_id, bot_user_id=bot_user_id, now=now, fetch=fetch)
    )


def why_gather(
    *,
    message_id: int,
    bot_user_id: int | None,
    now: dt.datetime,
    fetch: MessageFetch | None = None,
) -> WhyFacts:
    """Read everything `why_judge` needs about ``message_id`` (the I/O half).

    ``bot_user_id`` is the bot account's id (a mention of it triggers the main persona); None
    when unknown, then no mention is seen. ``fetch`` reads a message from Discord by (channel
    id, message id) when its stored event is gone (the queue keeps only the key of a consumed
    message); None: judge from the record alone.
    """
    record = message_record(message_id=message_id)
    if not record.stored and not record.turns:
        return WhyFacts(record=record)
    configuration = (
        chat_selectors.channel_configuration(
            channel_id=record.channel_id, guild_id=record.guild_id, now=now
        )
        if record.channel_id is not None
        else None
    )
    if configuration is None:
        return WhyFacts(record=record)
    facts = WhyFacts(
        record=record,
        configured=True,
        enabled=configuration.settings.enabled,
        autonomous=configuration.settings.mode == ChannelMode.AUTONOMOUS,
        personas=tuple(p.name for p in configuration.personas),
    )
    if not facts.enabled:
        return facts
    message = _message(record)
    if message is None and fetch is not None and record.channel_id is not None:
        message = fetch(record.channel_id, record.message_id)
    steps: tuple[PlannerStep, ...] = ()
    if facts.autonomous and record.channel_id is not None and record.received_at is not None:
        steps = planner_loop_after(channel_id=record.channel_id, since=record.received_at)
    trigger_facts = None
    if message is not None:
        [trigger_facts] = chat_selectors.trigger_inputs(
            configuration=configuration, messages=[message], bot_user_id=bot_user_id
        )
    return WhyFacts(
        record=record,
        configured=True,
        enabled=True,
        autonomous=facts.autonomous,
        personas=facts.personas,
        facts=trigger_facts,
        planner_steps=steps,
    )


def why_judge(facts: WhyFacts) -> WhyAnswer:
    """Each persona's answer from what `why_gather` read (pure): its turns when it ran some,
    else the trigger decision's verdict, the unread pool, or the planner's steps."""
    record = facts.record
    if not record.stored and not record.turns:
        summary = (
            "The bot delivered this message itself."
            if record.delivered_by
            else "Nothing is recorded for this message: the bot never received it (not a channel "
            "it can read, sent while it was offline and older than the queue's retention, or "
            "not a message id)."
        )
        return WhyAnswer(record=record, answers=(), summary=summary)
    if not facts.configured:
        return WhyAnswer(
            record=record,
            answers=(),
            summary="The channel's guild is not configured: no persona answers there.",
        )
    if not facts.enabled:
        return WhyAnswer(record, (), "The channel is disabled: its messages are dropped.")
    by_persona: dict[str, list[Turn]] = {}
    for turn in record.turns:
        by_persona.setdefault(turn.persona_name, []).append(turn)
    if facts.facts is None:
        answers = tuple(
            _answer_from_turns(name, tuple(turns), "") for name, turns in by_persona.items()
        )
        return WhyAnswer(
            record, answers, "The message is no longer stored and Discord did not return it."
        )
    decision = trigger_decision(facts.facts)
    answers = tuple(
        _persona_answer(facts, decision, name, tuple(by_persona.get(name, ())))
        for name in facts.personas
    )
    replied_count = sum(a.replied for a in answers)
    summary = f"{replied_count} of {len(answers)} personas replied."
    return WhyAnswer(record=record, answers=answers, summary=summary, message=facts.facts.message)


AUTHOR_SILENCES = {
    Silence.AUTHOR_BLACKLISTED: "The author is blacklisted: the bot ignores them.",
    Silence.AUTHOR_FULL_PRIVACY: (
        "The author has full privacy: they never trigger a persona and their words never "
        "reach a prompt."
    ),
    Silence.AUTHOR_IS_BOT: "The author is a bot: bots never trigger a persona.",
    Silence.SUPERSEDED: (
        "A proxy system replaced this message with its member's copy: the copy is answered, "
        "never the original."
    ),
}


def verdict_sentence(verdict: PersonaVerdict, message: HistoryMessage) -> str:
    """One sentence for a persona's verdict (the why page and the preview say the same)."""
    rule = rule_label(verdict)
    if verdict.silence is None:
        return f"{rule} fires: {verdict.persona_name} answers."
    if verdict.silence in AUTHOR_SILENCES:
        return AUTHOR_SILENCES[verdict.silence]
    if verdict.silence is Silence.DISABLED:
        return f"{verdict.persona_name} is disabled."
    if verdict.silence in (Silence.BLOCKED, Silence.MUTED):
        kind = "muted" if verdict.block is BlockType.MUTE else "blocked"
        who = "The proxied member's sender" if message.proxy is not None else "The author"
        return f"{who} is {kind} for {verdict.persona_name}."
    if verdict.silence is Silence.OVER_LIMIT:
        return f"{rule} fired, but three personas answer before it (at most three per message)."
    return "No trigger rule fired: no mention of the bot, no reply to a persona, no trigger word."


def rule_label(verdict: PersonaVerdict) -> str:
    """The addressing rule as the turn records it (``trigger_word (tomori)``); empty: none."""
    trigger = verdict.addressed
    if trigger is None:
        return ""
    return str(trigger.reason) + (f" ({trigger.detail})" if trigger.detail else "")


def _persona_answer(
    facts: WhyFacts, decision: TriggerDecision, name: str, turns: tuple[Turn, ...]
) -> PersonaAnswer:
    verdict = decision.verdict(name)
    assert verdict is not None  # the decision judged every persona of the configuration
    message = facts.facts.message
    rule = rule_label(verdict)
    if turns:
        answer = _answer_from_turns(name, turns, rule)
        return PersonaAnswer(
            answer.persona, answer.replied, answer.why, answer.rule, turns, verdict
        )
    record = facts.record
    silence = verdict.silence
    if silence is not None and silence not in (Silence.NOT_ADDRESSED, Silence.OVER_LIMIT):
        why = verdict_sentence(verdict, message)
    elif record.queued or record.unread:
        why = "Still queued: the message waits in the unread pool" + (
            f" and {rule} will answer it." if verdict.answers else "."
        )
    elif facts.autonomous:
        why = _planner_story(facts.planner_steps, name)
    elif silence is not None:
        why = verdict_sentence(verdict, message)
    else:
        why = f"{rule} fired, but no turn is recorded (the message was dropped before its turn)."
    return PersonaAnswer(persona=name, replied=False, why=why, rule=rule, verdict=verdict)


def _planner_story(steps: tuple[PlannerStep, ...], persona_name: str) -> str:
    """What the planner did after the message arrived, for a persona that did not reply in an
    autonomous channel: the first loop that ran since, step by step."""
    if not steps:
        return "Autonomous channel: the planner has not run since this message arrived."
    actions = "; ".join(
        f"{s.iteration}. {s.action.get('action', 'invalid answer')}"
        + (f" as {s.action['persona']}" if s.action.get("persona") else "")
        + f" ({s.result})"
        for s in steps
    )
    chose = [s for s in steps if s.action.get("persona", "").casefold() == persona_name.casefold()]
    if chose:
        return (
            f"The planner chose {persona_name} (step {chose[0].iteration}), but it did not "
            f"reply: {chose[0].result}. Steps: {actions}."
        )
    return f"The planner did not choose {persona_name}. Steps: {actions}."


def _answer_from_turns(name: str, turns: tuple[Turn, ...], rule: str) -> PersonaAnswer:
    last = turns[-1]
    why_ran = _why_ran(last) or rule
    if last.status == Turn.Status.REPLIED:
        return PersonaAnswer(name, True, f"Replied ({why_ran}).", why_ran, turns)
    if last.status in (Turn.Status.RUNNING, Turn.Status.DELIVERING):
        return PersonaAnswer(
            name, False, f"A turn is {last.status} now ({why_ran}).", why_ran, turns
        )
    if last.status == Turn.Status.ABORTED:
        why = f"The turn was aborted: {last.error or 'no reason recorded'}."
        return PersonaAnswer(name, False, why, why_ran, turns)
    if last.status == Turn.Status.WITHHELD:
        why = f"The reply was withheld before Discord showed it: {last.error}."
        return PersonaAnswer(name, False, why, why_ran, turns)
    if last.status == Turn.Status.REFUSED:
        why = f"No model was asked: {last.error}."
        return PersonaAnswer(name, False, why, why_ran, turns)
    failure = last.error or "no reply text"
    return PersonaAnswer(name, False, f"The turn failed: {failure}.", why_ran, turns)


def _why_ran(turn: Turn) -> str:
    detail = turn.reason_detail or {}
    if turn.reason == "planner":
        action = detail.get("action", {})
        return f"planner step {detail.get('iteration', '?')}: {action.get('action', '?')}"
    rule = detail.get("rule", turn.reason)
    return f"{rule} ({detail['detail']})" if detail.get("detail") else str(rule)


def _message(record: MessageRecord) -> HistoryMessage | None:
    try:
        return _message_adapter().validate_python(record.event) if record.event else None
    except ValidationError:
        return None


__all__ = ["WhyAnswer", "WhyFacts", "why_gather", "why_judge", "why_message"]
