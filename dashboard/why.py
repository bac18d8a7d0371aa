""" "Why (not)?": for one message, each persona's answer to "did you reply, and why or why not".

Built only from what the worker recorded — the message's stored event (event queue or unread
pool), its turns, the channel's configuration, blocks and people's standing — with the same
trigger rules the reactive loop runs (`chat.pipeline.triggers.reactive_triggers`). Nothing
here asks Discord or the model.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from pydantic import TypeAdapter, ValidationError

from chat import selectors as chat_selectors
from chat.models import Turn
from chat.pipeline.triggers import reactive_triggers
from chat.pipeline.types import BlockType, HistoryMessage, PrivacyLevel
from dashboard.selectors import MessageRecord, message_record, planner_loop_after
from personas.models import ChannelMode


@dataclass(frozen=True)
class PersonaAnswer:
    """One persona's answer: ``replied`` and a sentence saying why (or why not); ``rule`` the
    trigger rule that fired (empty: none), ``turns`` the turns it ran for the message."""

    persona: str
    replied: bool
    why: str
    rule: str = ""
    turns: tuple[Turn, ...] = ()


@dataclass(frozen=True)
class WhyAnswer:
    record: MessageRecord
    answers: tuple[PersonaAnswer, ...]
    summary: str


@cache
def _message_adapter() -> TypeAdapter[HistoryMessage]:
    return TypeAdapter(HistoryMessage)


MessageFetch = Callable[[int, int], HistoryMessage | None]


def why_message(
    *,
    message_id: int,
    bot_user_id: int | None,
    now: dt.datetime,
    fetch: MessageFetch | None = None,
) -> WhyAnswer:
    """Each persona's answer for ``message_id`` (see the module docstring).

    ``bot_user_id`` is the bot account's id (a mention of it triggers the main persona); None
    when unknown, then mention triggers are judged from the recorded turns alone. ``fetch``
    reads a message from Discord by (channel id, message id) when its stored event is gone (the
    queue keeps only the key of a consumed message); None: judge from the record alone.
    """
    record = message_record(message_id=message_id)
    if not record.stored and not record.turns:
        summary = (
            "The bot delivered this message itself."
            if record.delivered_by
            else "Nothing is recorded for this message: the bot never received it (not a channel "
            "it can read, sent while it was offline and older than the queue's retention, or "
            "not a message id)."
        )
        return WhyAnswer(record=record, answers=(), summary=summary)
    configuration = (
        chat_selectors.channel_configuration(
            channel_id=record.channel_id, guild_id=record.guild_id, now=now
        )
        if record.channel_id is not None
        else None
    )
    if configuration is None:
        return WhyAnswer(
            record=record,
            answers=(),
            summary="The channel's guild is not configured: no persona answers there.",
        )
    if not configuration.settings.enabled:
        return WhyAnswer(record, (), "The channel is disabled: its messages are dropped.")
    message = _message(record)
    if message is None and fetch is not None and record.channel_id is not None:
        message = fetch(record.channel_id, record.message_id)
    by_persona: dict[str, list[Turn]] = {}
    for turn in record.turns:
        by_persona.setdefault(turn.persona_name, []).append(turn)
    if message is None:
        answers = tuple(
            _answer_from_turns(name, tuple(turns), "") for name, turns in by_persona.items()
        )
        return WhyAnswer(
            record, answers, "The message is no longer stored and Discord did not return it."
        )
    standing = chat_selectors.user_standing(user_ids=[message.accountable_user_id])
    user_id = message.accountable_user_id
    hidden = standing.privacy.get(user_id) is PrivacyLevel.FULL
    replied = chat_selectors.replied_persona_names(
        message_ids=[message.reference.message_id] if message.reference else []
    )
    autonomous = configuration.settings.mode == ChannelMode.AUTONOMOUS
    triggers = {
        t.persona_name: t
        for t in reactive_triggers(
            message=message,
            personas=[chat_selectors.trigger_persona(p) for p in configuration.personas],
            bot_user_id=bot_user_id or 0,
            is_dm=configuration.guild_id is None,
            replied_persona_name=replied.get(message.reference.message_id)
            if message.reference
            else None,
            author_blacklisted=user_id in standing.blacklisted,
        )
    }
    answers = []
    for persona in configuration.personas:
        turns = tuple(by_persona.get(persona.name, ()))
        trigger = triggers.get(persona.name)
        rule = ""
        if trigger is not None:
            rule = str(trigger.reason) + (f" ({trigger.detail})" if trigger.detail else "")
        if turns:
            answers.append(_answer_from_turns(persona.name, turns, rule))
            continue
        block = next(
            (
                b
                for b in configuration.blocks
                if b.user_id == user_id
                and b.persona_name == persona.name
                and b.type in (BlockType.BLOCK, BlockType.MUTE)
            ),
            None,
        )
        if user_id in standing.blacklisted:
            why = "The author is blacklisted: the bot ignores them."
        elif message.author.is_bot and message.proxy is None:
            why = "The author is a bot: bots never trigger a persona."
        elif block is not None:
            kind = "muted" if block.type == BlockType.MUTE else "blocked"
            why = f"The author is {kind} for {persona.name}."
        elif record.queued or record.unread:
            why = "Still queued: the message waits in the unread pool" + (
                f" and {rule} will answer it." if trigger else "."
            )
        elif autonomous:
            why = _planner_story(record, persona.name)
        elif trigger is None:
            why = (
                "No trigger rule fired: no mention of the bot, no reply to a persona, "
                "no trigger word."
            )
        else:
            why = (
                f"{rule} fired, but no turn is recorded (the message was dropped before its turn)."
            )
        if hidden:
            why += " The author has full privacy: their words never reach a prompt."
        answers.append(PersonaAnswer(persona=persona.name, replied=False, why=why, rule=rule))
    replied_count = sum(a.replied for a in answers)
    summary = f"{replied_count} of {len(answers)} personas replied."
    return WhyAnswer(record=record, answers=tuple(answers), summary=summary)


def _planner_story(record: MessageRecord, persona_name: str) -> str:
    """What the planner did after the message arrived, for a persona that did not reply in an
    autonomous channel: the first loop that ran since, step by step."""
    steps = ()
    if record.channel_id is not None and record.received_at is not None:
        steps = planner_loop_after(channel_id=record.channel_id, since=record.received_at)
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


__all__ = ["WhyAnswer", "why_message"]
