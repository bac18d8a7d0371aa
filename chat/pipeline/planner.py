"""The planner of seed 003: in an autonomous channel, a model call decides the next action.

The planner is not asked to reply to a message but to choose what to do given the state: the
channel's rolling conversation, the personas it can speak as, the results of its recent actions,
and — closing the prompt — how many unread messages there are and what they say. It answers
one JSON action, validated here against a schema; output that does not validate becomes a
`PlannerOutputError` whose message the next planner step reads, never a crash.

Pure: no Django, no network; the scheduler calls the model and the action handlers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.markup import HIDDEN_USER_NAME, render_markup, scrub_snowflakes
from chat.pipeline.message_id_map import MessageIdMap
from chat.pipeline.model_answers import problems_line
from chat.pipeline.simplify import (
    EntryPart,
    SimplifiedEntry,
    blocked_user_ids,
    build_simplified_history,
    hidden_user_ids,
)
from chat.pipeline.types import HistoryMessage, NameDirectory, PrivacyLevel, UserBlock

MAX_SLEEP_SECONDS = 60
ROSTER_DESCRIPTION_LIMIT = 200
"""Characters of a persona's rendered system prompt the planner's roster shows."""
_USER_MENTION = re.compile(r"<@!?(\d+)>")


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReadUnreadMessages(_Action):
    """Read the unread pool: its messages join the conversation and the pool empties."""

    action: Literal["read_unread_messages"]


class SendMessage(_Action):
    """Let ``persona`` take a turn; the text comes from that persona's own model call."""

    action: Literal["send_message"]
    persona: str = Field(min_length=1)
    reply_to: str | None = Field(default=None, pattern=r"^ref_[1-9]\d*$")


class React(_Action):
    action: Literal["react"]
    message: str = Field(pattern=r"^ref_[1-9]\d*$")
    emoji: str = Field(min_length=1, max_length=64)


class Sleep(_Action):
    action: Literal["sleep"]
    seconds: float = Field(gt=0, le=MAX_SLEEP_SECONDS)


class Continue(_Action):
    """End the loop: nothing more to do until new messages arrive."""

    action: Literal["continue"]


PlannerAction = Annotated[
    ReadUnreadMessages | SendMessage | React | Sleep | Continue, Field(discriminator="action")
]
_ACTION_ADAPTER: TypeAdapter[PlannerAction] = TypeAdapter(PlannerAction)
_ACTION_MODELS: Mapping[str, type[_Action]] = {
    "read_unread_messages": ReadUnreadMessages,
    "send_message": SendMessage,
    "react": React,
    "sleep": Sleep,
    "continue": Continue,
}
CHANNEL_KEYS = ("channelId", "channel_id")
"""Keys an answer may name its channel with (seed 003's ``{"action": "read_unread_messages",
"channelId": "…"}``): a loop plans for one channel, so the key must name that one."""


class PlannerOutputError(ValueError):
    """The planner's output is not one valid action; the message says what was wrong."""


@dataclass(frozen=True)
class PlannerChannel:
    """The channel a planner loop acts in, as an answer may name it: its id (digits) or its
    name, with or without ``#``, in any case."""

    channel_id: int
    name: str

    def named_by(self, value: object) -> bool:
        text = str(value).strip().removeprefix("#").strip()
        return text == str(self.channel_id) or text.casefold() == self.name.casefold()


@dataclass(frozen=True)
class PlannerDecision:
    """One valid answer: the ``action``, and the keys of the answer it does not use, left out
    rather than failing the step (``ignored``: name → value as written)."""

    action: PlannerAction
    ignored: Mapping[str, object] = field(default_factory=dict)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def parse_planner_action(text: str, *, channel: PlannerChannel) -> PlannerDecision:
    """The decision in the planner's output for a loop in ``channel``.

    Accepts the JSON object alone, inside a Markdown code fence, or after reasoning in
    ``<think>`` tags; the first JSON object in the text is the answer. Seed 003's own format
    is accepted: a ``channelId`` (`CHANNEL_KEYS`) naming ``channel`` says where to act, and
    it is where the loop acts anyway. Keys the action does not have are left out and named in
    `PlannerDecision.ignored`, so an extra key never costs a step.

    Raises PlannerOutputError naming the problem: no JSON object, bad JSON, unknown action, a
    field that is missing or out of range, a ``channelId`` naming another channel.
    """
    cleaned = _THINK.sub("", text)
    start = cleaned.find("{")
    if start < 0:
        raise PlannerOutputError('expected one JSON object such as {"action": "continue"}')
    try:
        data, _ = json.JSONDecoder().raw_decode(cleaned[start:])
    except json.JSONDecodeError as error:
        raise PlannerOutputError(f"the JSON object is malformed: {error.msg}") from None
    ignored: dict[str, object] = {}
    if isinstance(data, dict):
        for key in CHANNEL_KEYS:
            if key in data and not channel.named_by(data[key]):
                raise PlannerOutputError(
                    f"{key} {str(data[key])[:40]!r} is not this channel: you act only in "
                    f"#{channel.name}, so leave {key} out or name #{channel.name}"
                )
        name = data.get("action")
        model = _ACTION_MODELS.get(name) if isinstance(name, str) else None
        if model is not None:
            known = model.model_fields.keys()
            ignored = {k: v for k, v in data.items() if k not in known and k not in CHANNEL_KEYS}
            data = {k: v for k, v in data.items() if k in known}
    try:
        return PlannerDecision(_ACTION_ADAPTER.validate_python(data), ignored)
    except ValidationError as error:
        problems = problems_line(error, whole="action")
        raise PlannerOutputError(f"not a valid action ({problems})") from None


@dataclass(frozen=True)
class ActionRecord:
    """One step of the loop as the next planner call sees it."""

    action: str
    success: bool
    result: str


@dataclass(frozen=True)
class PlannerRosterEntry:
    name: str
    description: str


def mentioned_user_ids(text: str) -> list[int]:
    """The users ``text`` mentions (``<@id>``), for the name directory that renders it."""
    return [int(user_id) for user_id in _USER_MENTION.findall(text)]


def roster_description(
    system_prompt: str,
    *,
    macros: MacroContext,
    names: NameDirectory,
    hidden_user_ids: AbstractSet[int],
) -> str:
    """How the roster describes a persona: its system prompt as the persona's own prompt
    reads it (macros expanded, mentions as names, no raw snowflake), on one line, cut to
    `ROSTER_DESCRIPTION_LIMIT` characters; "a persona" when it is empty."""
    text = render_markup(expand_macros(system_prompt, macros), names, hidden_user_ids)
    text = " ".join(text.split())[:ROSTER_DESCRIPTION_LIMIT]
    return text or "a persona"


_ACTIONS_HELP = """\
Answer with exactly one JSON object and nothing else. Actions:
- {"action": "send_message", "persona": "<name>", "reply_to": "ref_N" or null}:
  let one persona speak now; it sees the conversation and the incoming messages.
- {"action": "read_unread_messages"}: mark the incoming messages read without answering.
- {"action": "react", "message": "ref_N", "emoji": "<emoji>"}: react to a message.
- {"action": "sleep", "seconds": <1-60>}: wait for more messages.
- {"action": "continue"}: stop here; nothing needs doing now."""


def build_planner_messages(
    *,
    channel_name: str,
    roster: Sequence[PlannerRosterEntry],
    conversation: Sequence[str],
    incoming: Sequence[str],
    actions: Sequence[ActionRecord],
    iteration: int,
    max_iterations: int,
) -> list[dict[str, str]]:
    """The planner's Chat Completions messages (seed 003, phase 3).

    ``conversation`` and ``incoming`` are rendered lines (``ref_N Name: text``, never raw
    snowflakes): the channel's rolling conversation (the recent window, what was read, the
    personas' own replies) and the unread messages. ``actions`` are the planner's recent
    actions with their results, earlier loops included; a result is shown with any raw
    snowflake scrubbed (an error text may name a channel by id). ``channel_name`` is the
    channel's name (never its id).

    Order: the instructions, the roster and the action definitions (system); the conversation
    and the recent actions; then, closing the prompt, the "Incoming events" block with the
    unread count and contents and the step counter.
    """
    roster_lines = "\n".join(f"- {entry.name}: {entry.description}" for entry in roster)
    system = (
        f"You decide what happens next in the Discord channel #{channel_name}. "
        f"You can speak as these personas:\n{roster_lines}\n\n{_ACTIONS_HELP}"
    )
    state = ["Conversation so far:", *(conversation or ["(nothing yet)"])]
    if actions:
        state += ["", "Your recent actions and their results:"]
        state += [
            f"{n}. {record.action}: {'ok' if record.success else 'failed'}: "
            f"{scrub_snowflakes(record.result)}"
            for n, record in enumerate(actions, start=1)
        ]
    count = len(incoming)
    events = [
        "Incoming events:",
        f"You have {count} unread message{'s' if count != 1 else ''}.",
        *incoming,
        "",
        f"This is step {iteration} of at most {max_iterations}. Your action:",
    ]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(state)},
        {"role": "user", "content": "\n".join(events)},
    ]


def render_planner_lines(
    entries: Sequence[SimplifiedEntry],
    id_map: MessageIdMap,
    *,
    line_starts: AbstractSet[int] = frozenset(),
) -> dict[int, str]:
    """One line per simplified entry, ``ref_N Name: text``, keyed by the line's first message
    id (so the caller can split the lines into conversation and incoming events).

    A merged entry is cut into several lines before each message in ``line_starts`` (the first
    unread message: what was read and what is incoming never share a line)."""
    lines = {}
    for entry in entries:
        segments: list[list[EntryPart]] = []
        for part in entry.parts:
            if not segments or part.message_id in line_starts:
                segments.append([])
            segments[-1].append(part)
        for parts in segments:
            first = parts[0].message_id
            key = id_map.message_key(first) or id_map.register_message(first)
            prose = "\n".join(part.body for part in parts if part.body)
            lines[first] = f"{key} {entry.author_name}: {prose or '(no text)'}"
    return lines


@dataclass(frozen=True)
class PlannerPersona:
    """A persona as the planner's roster knows it."""

    name: str
    system_prompt: str
    is_main: bool = False


@dataclass(frozen=True)
class PlannerPromptInput:
    """Everything one planner step's prompt is built from (the loop gathers it).

    ``seen`` is the rolling conversation followed by the unread messages (``unread_ids``);
    ``privacy`` and ``blacklisted_user_ids`` are the standing of the people in it; ``blocks``
    are the channel's blocks at ``now``; ``names`` the name directory of the people the prompt
    names; ``channel_name`` the channel's name (never its id)."""

    seen: Sequence[HistoryMessage]
    unread_ids: AbstractSet[int]
    personas: Sequence[PlannerPersona]
    blocks: Sequence[UserBlock]
    now: datetime
    privacy: Mapping[int, PrivacyLevel]
    blacklisted_user_ids: AbstractSet[int]
    names: NameDirectory
    timezone: tzinfo
    channel_name: str
    actions: Sequence[ActionRecord]
    iteration: int
    max_iterations: int


@dataclass(frozen=True)
class PlannerPrompt:
    """A planner step's messages, and the ``ref_N`` keys they use (key → message id)."""

    messages: list[dict[str, str]]
    refs: Mapping[str, int]


def planner_named_user_ids(
    seen: Sequence[HistoryMessage], personas: Sequence[PlannerPersona]
) -> list[int]:
    """Everyone the planner's prompt names: the authors, the people they mention (as persona
    prompts name them), and the people the personas' own prompts mention; each once."""
    named = [m.author.id for m in seen] + [i for m in seen for i in m.mention_ids]
    named += [i for p in personas for i in mentioned_user_ids(p.system_prompt)]
    return list(dict.fromkeys(named))


def build_planner_prompt(given: PlannerPromptInput) -> PlannerPrompt:
    """The planner step's prompt (seed 003, phase 3).

    Steps:
        1. Simplify the conversation as a persona turn does; users with full privacy or
           blacklisted, and users every persona has blocked, are left out entirely.
        2. One line per entry (`render_planner_lines`), the first unread message starting a
           line of its own; lines of unread messages become the incoming events.
        3. The roster: each persona's system prompt as its own prompt reads it (macros with
           the main persona as ``{bot}`` and the newest speaker as ``{user}``).
        4. `build_planner_messages`.
    """
    personas = given.personas
    hidden = hidden_user_ids(given.privacy, given.blacklisted_user_ids)
    blocked_for_all = frozenset.intersection(
        *(blocked_user_ids(given.blocks, p.name, given.now) for p in personas)
    )
    simplified = build_simplified_history(
        given.seen,
        reply_targets={},
        names=given.names,
        hidden_user_ids=hidden | blocked_for_all,
        blocked_user_ids=frozenset(),
        timezone=given.timezone,
    )
    unread_ids = given.unread_ids
    lines = render_planner_lines(
        simplified.entries,
        simplified.id_map,
        line_starts=frozenset({min(unread_ids)}) if unread_ids else frozenset(),
    )
    main = next((p.name for p in personas if p.is_main), personas[0].name)
    newest = simplified.entries[-1].author_name if simplified.entries else HIDDEN_USER_NAME
    roster = [
        PlannerRosterEntry(
            p.name,
            roster_description(
                p.system_prompt,
                macros=MacroContext(bot=main, char=p.name, user=newest),
                names=given.names,
                hidden_user_ids=hidden,
            ),
        )
        for p in personas
    ]
    messages = build_planner_messages(
        channel_name=given.channel_name,
        roster=roster,
        conversation=[line for i, line in lines.items() if i not in unread_ids],
        incoming=[line for i, line in lines.items() if i in unread_ids],
        actions=given.actions,
        iteration=given.iteration,
        max_iterations=given.max_iterations,
    )
    return PlannerPrompt(messages=messages, refs=dict(simplified.id_map.as_mapping()))
