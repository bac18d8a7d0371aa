"""The planner of seed 003: in an autonomous channel, a model call decides the next action.

The planner is not asked to reply to a message but to choose what to do given the state: how
many unread messages there are and what they say, the recent conversation, the personas it can
speak as, and the results of its previous actions in this loop. It answers one JSON action,
validated here against a schema; output that does not validate becomes a `PlannerOutputError`
whose message the next planner step reads, never a crash.

Pure: no Django, no network; the scheduler calls the model and the action handlers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from chat.pipeline.message_id_map import MessageIdMap
from chat.pipeline.simplify import SimplifiedEntry

MAX_SLEEP_SECONDS = 60


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


_ACTIONS_HELP = """\
Answer with exactly one JSON object and nothing else. Actions:
- {"action": "read_unread_messages"}: read the unread messages (do this before replying to them).
- {"action": "send_message", "persona": "<name>", "reply_to": "ref_N" or null}:
  let one persona speak.
- {"action": "react", "message": "ref_N", "emoji": "<emoji>"}: react to a message.
- {"action": "sleep", "seconds": <1-60>}: wait for more messages.
- {"action": "continue"}: stop here; nothing needs doing now."""


def build_planner_messages(
    *,
    channel_name: str,
    roster: Sequence[PlannerRosterEntry],
    recent: Sequence[str],
    unread: Sequence[str],
    history: Sequence[ActionRecord],
    iteration: int,
    max_iterations: int,
) -> list[dict]:
    """The planner's Chat Completions messages.

    ``recent`` and ``unread`` are rendered lines (``ref_N Name: text``, never raw snowflakes).
    Order: the action definitions and the roster (system), the recent conversation, the unread
    count and contents, then the results of this loop's earlier actions.
    """
    roster_lines = "\n".join(f"- {entry.name}: {entry.description}" for entry in roster)
    system = (
        f"You decide what happens next in the Discord channel #{channel_name}. "
        f"You can speak as these personas:\n{roster_lines}\n\n{_ACTIONS_HELP}"
    )
    state = [
        "Recent conversation:",
        *(recent or ["(nothing yet)"]),
        "",
        f"You have {len(unread)} unread message{'s' if len(unread) != 1 else ''}.",
        *unread,
    ]
    if history:
        state += ["", "Your earlier actions in this loop:"]
        state += [
            f"{n}. {record.action}: {'ok' if record.success else 'failed'}: {record.result}"
            for n, record in enumerate(history, start=1)
        ]
    state += ["", f"This is step {iteration} of at most {max_iterations}. Your action:"]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(state)},
    ]


def render_planner_lines(
    entries: Sequence[SimplifiedEntry], id_map: MessageIdMap
) -> dict[int, str]:
    """One line per simplified entry, ``ref_N Name: text``, keyed by the entry's first message
    id (so the scheduler can split the lines into read and unread)."""
    lines = {}
    for entry in entries:
        first = entry.message_ids[0]
        key = id_map.message_key(first) or id_map.register_message(first)
        lines[first] = f"{key} {entry.author_name}: {entry.prose or '(no text)'}"
    return lines
