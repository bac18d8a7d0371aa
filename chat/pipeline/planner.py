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
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.markup import render_markup, scrub_snowflakes
from chat.pipeline.message_id_map import MessageIdMap
from chat.pipeline.simplify import EntryPart, SimplifiedEntry
from chat.pipeline.types import NameDirectory

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


class PlannerOutputError(ValueError):
    """The planner's output is not one valid action; the message says what was wrong."""


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def parse_planner_action(text: str) -> PlannerAction:
    """The action in the planner's output.

    Accepts the JSON object alone, inside a Markdown code fence, or after reasoning in
    ``<think>`` tags; the first JSON object in the text is the answer. Raises
    PlannerOutputError naming the problem (no JSON object, bad JSON, unknown action, a field
    that is missing or out of range).
    """
    cleaned = _THINK.sub("", text)
    start = cleaned.find("{")
    if start < 0:
        raise PlannerOutputError('expected one JSON object such as {"action": "continue"}')
    try:
        data, _ = json.JSONDecoder().raw_decode(cleaned[start:])
    except json.JSONDecodeError as error:
        raise PlannerOutputError(f"the JSON object is malformed: {error.msg}") from None
    try:
        return _ACTION_ADAPTER.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'action'}: {item['msg']}"
            for item in error.errors()
        )
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
) -> list[dict]:
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
