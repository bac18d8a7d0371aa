"""Trigger rules for reactive channels: who answers a message, in what order, and why (not).

Pure: one gathering step (`chat.selectors.trigger_inputs`) reads the message's facts — the
guild's personas, whose message it replies to, the accountable user's standing and blocks — into
a `TriggerInput`; `trigger_decision` judges it. The worker, the prompt preview and the "why
(not)?" page all call `trigger_decision`, so they cannot disagree.

A persona is addressed by a mention of the bot (the main persona), a reply to one of its
messages, one of its trigger words (whole word, any case), or any DM (the main persona). Several
addressed personas answer in order of first appearance in the message, at most
`MAX_PERSONAS_PER_MESSAGE`; a reply target counts as appearing first.

Nobody answers a message whose accountable user (the proxy's sender for a proxied member) is
blacklisted or chose full privacy (the model would answer a message it cannot see), a message of
another bot (a proxied member is a person, not a bot), or a message a proxy system replaced (its
proxied copy is answered instead). A persona does not answer a user it blocked or muted.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from chat.pipeline.types import BlockType, HistoryMessage

MAX_PERSONAS_PER_MESSAGE = 3


class TurnReason(StrEnum):
    """Why a turn runs: a reactive trigger rule, the autonomous planner's decision, or
    background work that sends nothing: short-term memory maintenance (a summarisation call)
    and long-term memory extraction (facts proposed from a quiet conversation)."""

    MENTION = "mention"
    REPLY = "reply"
    TRIGGER_WORD = "trigger_word"
    DIRECT_MESSAGE = "dm"
    PLANNER = "planner"
    MAINTENANCE = "maintenance"
    EXTRACTION = "extraction"
    GREETING = "greeting"
    """An admin had the persona greet a channel (its first message): no model, no trigger."""

    @property
    def answers_no_message(self) -> bool:
        """Background work (memory maintenance, memory extraction): the turn reads a window
        but answers none of its messages and sends nothing."""
        return self in (TurnReason.MAINTENANCE, TurnReason.EXTRACTION)


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


class Silence(StrEnum):
    """Why a persona does not answer a message (the first that applies, in this order)."""

    AUTHOR_BLACKLISTED = "author_blacklisted"
    AUTHOR_FULL_PRIVACY = "author_full_privacy"
    AUTHOR_IS_BOT = "author_is_bot"
    SUPERSEDED = "superseded"
    DISABLED = "disabled"
    BLOCKED = "blocked"
    MUTED = "muted"
    NOT_ADDRESSED = "not_addressed"
    OVER_LIMIT = "over_limit"


@dataclass(frozen=True)
class AuthorStanding:
    """The accountable user's standing: the admins' blacklist, their own privacy choice, and
    the personas that blocked or muted them (persona name → ``BlockType``)."""

    blacklisted: bool = False
    full_privacy: bool = False
    blocks: tuple[tuple[str, BlockType], ...] = ()

    def block_for(self, persona_name: str) -> BlockType | None:
        """The block (or mute) ``persona_name`` holds against the user; a block wins."""
        kinds = {kind for name, kind in self.blocks if name == persona_name}
        if BlockType.BLOCK in kinds:
            return BlockType.BLOCK
        return BlockType.MUTE if BlockType.MUTE in kinds else None


@dataclass(frozen=True)
class TriggerInput:
    """Everything the decision needs about one message.

    ``bot_user_id`` None: the bot account is unknown, so no mention of it is seen.
    ``replied_persona_name``: the persona that wrote the message this one replies to.
    ``superseded``: a proxy system replaced (and deleted) the message.
    """

    message: HistoryMessage
    personas: tuple[TriggerPersona, ...]
    is_dm: bool
    bot_user_id: int | None = None
    replied_persona_name: str | None = None
    author: AuthorStanding = AuthorStanding()
    superseded: bool = False


@dataclass(frozen=True)
class PersonaVerdict:
    """One persona's verdict: ``addressed`` the rule that addresses it (None: none does),
    ``silence`` why it does not answer (None: it answers)."""

    persona_name: str
    addressed: Trigger | None
    silence: Silence | None
    block: BlockType | None = None

    @property
    def answers(self) -> bool:
        return self.silence is None


@dataclass(frozen=True)
class TriggerDecision:
    """``answers``: the triggers to run, in answer order; ``verdicts``: every persona's verdict,
    in the order the personas were given."""

    answers: tuple[Trigger, ...]
    verdicts: tuple[PersonaVerdict, ...]

    def verdict(self, persona_name: str) -> PersonaVerdict | None:
        """``persona_name``'s verdict (ignoring case); None for a persona not given."""
        wanted = persona_name.casefold()
        return next((v for v in self.verdicts if v.persona_name.casefold() == wanted), None)


def trigger_decision(facts: TriggerInput) -> TriggerDecision:
    """Who answers ``facts.message`` and why; for every other persona, why not (see the module
    docstring for the rules and their order)."""
    message = facts.message
    author = facts.author
    everyone: Silence | None = None
    if author.blacklisted:
        everyone = Silence.AUTHOR_BLACKLISTED
    elif author.full_privacy:
        everyone = Silence.AUTHOR_FULL_PRIVACY
    elif message.author.is_bot and message.proxy is None:
        everyone = Silence.AUTHOR_IS_BOT
    elif facts.superseded:
        everyone = Silence.SUPERSEDED
    addressed = _addressed(facts)
    order = [t.persona_name for t in addressed]
    addressed_by = {t.persona_name: t for t in addressed}
    verdicts: list[PersonaVerdict] = []
    answering: list[Trigger] = []
    for persona in facts.personas:
        trigger = addressed_by.get(persona.name)
        block = author.block_for(persona.name)
        silence = everyone
        if silence is None and not persona.enabled:
            silence = Silence.DISABLED
        if silence is None and block is not None:
            silence = Silence.BLOCKED if block is BlockType.BLOCK else Silence.MUTED
        if silence is None and trigger is None:
            silence = Silence.NOT_ADDRESSED
        if silence is None and trigger is not None:
            answering.append(trigger)
        verdicts.append(PersonaVerdict(persona.name, trigger, silence, block))
    answering.sort(key=lambda t: order.index(t.persona_name))
    kept = {t.persona_name for t in answering[:MAX_PERSONAS_PER_MESSAGE]}
    verdicts = [
        dataclasses.replace(v, silence=Silence.OVER_LIMIT)
        if v.silence is None and v.persona_name not in kept
        else v
        for v in verdicts
    ]
    return TriggerDecision(
        answers=tuple(answering[:MAX_PERSONAS_PER_MESSAGE]), verdicts=tuple(verdicts)
    )


def may_be_addressed(
    message: HistoryMessage,
    *,
    personas: tuple[TriggerPersona, ...],
    is_dm: bool,
    bot_user_id: int | None,
) -> bool:
    """Whether some rule could address ``message`` whatever the facts read from the database
    (whose message it replies to, the accountable user's standing, a proxy's replacement):
    a DM to a guild with a main persona, a reply, a mention of the bot, a trigger word. False
    means `trigger_decision` answers it with nobody, so the worker need not read its facts."""
    if is_dm:
        return any(p.is_main for p in personas)
    if message.reference is not None:
        return True
    bare = TriggerInput(message=message, personas=personas, is_dm=False, bot_user_id=bot_user_id)
    return bool(_addressed(bare))


def _addressed(facts: TriggerInput) -> list[Trigger]:
    """Every persona the message addresses, in order of first appearance (a reply target
    first), whoever the author is and whatever their blocks say."""
    message = facts.message
    personas = facts.personas
    main = next((p for p in personas if p.is_main), None)
    if facts.is_dm:
        return [Trigger(main.name, TurnReason.DIRECT_MESSAGE)] if main else []
    found: list[tuple[int, Trigger]] = []
    if facts.replied_persona_name is not None and message.reference is not None:
        target = next((p for p in personas if p.name == facts.replied_persona_name), None)
        if target is not None:
            detail = str(message.reference.message_id)
            found.append((-1, Trigger(target.name, TurnReason.REPLY, detail)))
    bot = facts.bot_user_id
    if main is not None and bot is not None and bot in message.mention_ids:
        position = message.content.find(f"<@{bot}>")
        found.append((max(position, 0), Trigger(main.name, TurnReason.MENTION)))
    for persona in personas:
        for word in persona.triggers:
            match = _word_pattern(word).search(message.content)
            if match:
                found.append((match.start(), Trigger(persona.name, TurnReason.TRIGGER_WORD, word)))
    ordered: dict[str, Trigger] = {}
    for _, trigger in sorted(found, key=lambda item: item[0]):
        ordered.setdefault(trigger.persona_name, trigger)
    return list(ordered.values())
