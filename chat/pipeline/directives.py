"""Tail directives and prefill (seed 000, "Tail directives", "Prefill resolution").

Tail directives close the prompt, after the dialogue, in priority order: an emoji usage penalty
(when the persona has leaned on emoji lately), reasoning formatting (when the persona's model
is asked to show reasoning in tags), queued-reply guidance (on queued turns), and the stop
directive (always last). The prefill is resolved here too but is not an item: each model
attempt decides whether it becomes a final assistant message or an instruction.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.macros import MacroContext, expand_macros
from chat.pipeline.types import Role

EMOJI_LOOKBACK = 5
"""How many of the persona's newest messages the emoji penalty looks at."""
EMOJI_HEAVY_MESSAGES = 3
"""How many of those must contain emoji for the penalty to apply."""
EMOJI = re.compile(
    "[\U0001f300-\U0001faff\U0001f000-\U0001f2ff\u2600-\u27bf\u2b50\u2b55]|(?<!\\w):\\w+:(?!\\w)"
)

EMOJI_PENALTY = (
    "Your recent messages used a lot of emoji. Use none in this reply unless it truly needs one."
)
REASONING_FORMAT = (
    "If you reason before answering, put all of it inside <think></think> first; after the "
    "closing tag, write only the reply."
)
QUEUED_REPLY_GUIDANCE = (
    "You are answering an earlier message: {trigger_key} from {author}. Answer that message "
    "specifically; {waiting} newer message(s) waiting will each be answered in their own turn."
)
STOP = (
    "Write only {char}'s next message. Do not write lines for anyone else, do not start with a "
    "name label, and do not write ref_ or media_ tags."
)


@dataclass(frozen=True, slots=True)
class QueuedReply:
    """The queued trigger a turn answers: its key, its author's shown name, and how many
    later queued triggers wait for their own turns."""

    trigger_key: str
    author_name: str
    waiting: int


def tail_directives(
    own_recent_prose: Sequence[str],
    *,
    macros: MacroContext,
    reasoning_in_think_tags: bool,
    queued: QueuedReply | None,
) -> tuple[ContextItem, ...]:
    """The turn's tail directives, in priority order, as ``[System: …]`` user items.

    Args:
        own_recent_prose: The words of the persona's own visible messages, oldest first; the
            newest `EMOJI_LOOKBACK` decide the emoji penalty.
        macros: Resolves ``{char}`` in the stop directive.
        reasoning_in_think_tags: The persona's model setting of that name.
        queued: The queued trigger being answered; None on an ordinary turn.
    """
    texts = []
    if _leans_on_emoji(own_recent_prose):
        texts.append(EMOJI_PENALTY)
    if reasoning_in_think_tags:
        texts.append(REASONING_FORMAT)
    if queued is not None:
        texts.append(
            QUEUED_REPLY_GUIDANCE.format(
                trigger_key=queued.trigger_key, author=queued.author_name, waiting=queued.waiting
            )
        )
    texts.append(expand_macros(STOP, macros))
    return tuple(
        ContextItem(tag=ItemTag.TAIL_DIRECTIVE, role=Role.USER, text=f"[System: {text}]")
        for text in texts
    )


def resolve_prefill(prefill: str, macros: MacroContext) -> str | None:
    """The persona's prefill with macros expanded; None when it has none (blank)."""
    expanded = expand_macros(prefill, macros).strip()
    return expanded or None


def _leans_on_emoji(own_recent_prose: Sequence[str]) -> bool:
    recent = own_recent_prose[-EMOJI_LOOKBACK:]
    return sum(1 for prose in recent if _has_emoji(prose)) >= EMOJI_HEAVY_MESSAGES


@functools.lru_cache(maxsize=4096)
def _has_emoji(prose: str) -> bool:
    """Whether ``prose`` holds an emoji (remembered: the same messages are read each turn)."""
    return EMOJI.search(prose) is not None
