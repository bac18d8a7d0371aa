"""Trigger rules for reactive channels: which personas answer a message, in what order.

Pure: the reactive loop passes in the message, the guild's personas and the author's standing.
A persona is addressed by a mention of the bot (the main persona), a reply to one of its
messages, one of its trigger words (whole word, any case), or any DM (the main persona). Several
addressed personas answer in order of first appearance in the message, at most
`MAX_PERSONAS_PER_MESSAGE`; a reply target counts as appearing first.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from chat.pipeline.types import HistoryMessage

MAX_PERSONAS_PER_MESSAGE = 3


class TurnReason(StrEnum):
    """Why a turn runs: a reactive trigger rule, the autonomous planner's decision, or the
    background short-term memory maintenance (a summarisation call that sends nothing)."""

    MENTION = "mention"
    REPLY = "reply"
    TRIGGER_WORD = "trigger_word"
    DIRECT_MESSAGE = "dm"
    PLANNER = "planner"
    MAINTENANCE = "maintenance"


@dataclass(frozen=True)
class TriggerPersona:
    name: str
    is_main: bool = False
    triggers: tuple[str, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class Trigger:
    """One persona to run for the message, and why (``detail``: the word, or the replied id)."""

    persona_name: str
    reason: TurnReason
    detail: str = ""


@cache
def _word_pattern(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)


def reactive_triggers(
    *,
    message: HistoryMessage,
    personas: Sequence[TriggerPersona],
    bot_user_id: int,
    is_dm: bool,
    replied_persona_name: str | None = None,
    silenced_for: Collection[str] = (),
    author_blacklisted: bool = False,
) -> list[Trigger]:
    """The personas that answer ``message``, in answer order (empty: nobody answers).

    ``replied_persona_name`` is the persona that wrote the message this one replies to, if any.
    ``silenced_for`` names the personas this author may not trigger (a mute or a block).
    Blacklisted authors and other bots trigger nothing; a proxied member (PluralKit-style) is a
    person, not a bot.
    """
    if author_blacklisted or (message.author.is_bot and message.proxy is None):
        return []
    enabled = [p for p in personas if p.enabled and p.name not in silenced_for]
    main = next((p for p in enabled if p.is_main), None)
    found: list[tuple[int, Trigger]] = []

    if is_dm:
        return [Trigger(main.name, TurnReason.DIRECT_MESSAGE)] if main else []
    if replied_persona_name is not None:
        target = next((p for p in enabled if p.name == replied_persona_name), None)
        if target is not None and message.reference is not None:
            found.append(
                (-1, Trigger(target.name, TurnReason.REPLY, str(message.reference.message_id)))
            )
    if main is not None and bot_user_id in message.mention_ids:
        position = message.content.find(f"<@{bot_user_id}>")
        found.append((max(position, 0), Trigger(main.name, TurnReason.MENTION)))
    for persona in enabled:
        for word in persona.triggers:
            match = _word_pattern(word).search(message.content)
            if match:
                found.append((match.start(), Trigger(persona.name, TurnReason.TRIGGER_WORD, word)))

    ordered: dict[str, Trigger] = {}
    for _, trigger in sorted(found, key=lambda item: item[0]):
        ordered.setdefault(trigger.persona_name, trigger)
    return list(ordered.values())[:MAX_PERSONAS_PER_MESSAGE]
