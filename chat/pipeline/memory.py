"""Short-term memory rules: when maintenance is due, what has expired, and the one
summarisation prompt the background maintenance sends.

A persona keeps one short-term memory per channel (per user in DMs). Two parts age separately:

- **Raw turns**: the persona's cycles in the channel since the memory was last refreshed, counted
  in ``turns_since_refresh`` (one per delivered reply). They are what a refresh summarises from
  the channel's window. They expire `RAW_TURNS_TTL` after the newest of them: a stale count no
  longer makes maintenance due, and maintenance resets it.
- **The summary** (or up to `MAX_CATEGORIES` categories): written by a refresh, shown in the
  persona's prompt, hidden `SUMMARY_TTL` after it was written and then cleared by maintenance.

Maintenance is due when the raw turns reach the persona's refresh cadence and the persona has
tools on; then a turn's allowlist admits ``update_short_term_memory`` without keywords (seed 000,
intent wrapper), and the Celery beat task refreshes memories of idle channels itself.

Pure: the caller passes ``now`` and the stored values in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RAW_TURNS_TTL = dt.timedelta(hours=12)
SUMMARY_TTL = dt.timedelta(hours=24)
MAX_SUMMARY_CHARS = 1500
MAX_CATEGORIES = 5
SHORT_TERM_MEMORY_HEADER = "Short-term memory of this conversation:"


@dataclass(frozen=True, slots=True)
class MemoryState:
    """A stored memory as the rules see it.

    Attributes:
        summary: The summary text ('' when none).
        categories: Named notes (at most `MAX_CATEGORIES` are ever shown).
        turns_since_refresh: Raw turns counted since the last refresh.
        last_turn_at: When the newest raw turn was counted; None when none was.
        refreshed_at: When the summary or categories were written; None when never.
    """

    summary: str = ""
    categories: Mapping[str, str] | None = None
    turns_since_refresh: int = 0
    last_turn_at: dt.datetime | None = None
    refreshed_at: dt.datetime | None = None


def pending_raw_turns(memory: MemoryState, *, now: dt.datetime) -> int:
    """The raw turns that still count at ``now``: 0 once `RAW_TURNS_TTL` has passed since the
    newest was counted (or when none has a time)."""
    if memory.last_turn_at is None or now - memory.last_turn_at >= RAW_TURNS_TTL:
        return 0
    return memory.turns_since_refresh


def short_term_memory_maintenance_due(
    memory: MemoryState | None, *, refresh_every: int, tools_on: bool, now: dt.datetime
) -> bool:
    """True when the memory should be refreshed: tools are on for the persona and the
    unexpired raw turns reached ``refresh_every`` (due at 5 with the default, not at 4).
    None (no memory yet) is never due."""
    if memory is None or not tools_on:
        return False
    return pending_raw_turns(memory, now=now) >= max(1, refresh_every)


def summary_expired(memory: MemoryState, *, now: dt.datetime) -> bool:
    """True when the summary (and categories) are older than `SUMMARY_TTL`, or were never
    given a time."""
    return memory.refreshed_at is None or now - memory.refreshed_at >= SUMMARY_TTL


def visible_memory_text(memory: MemoryState | None, *, now: dt.datetime) -> str | None:
    """What the persona's prompt shows of the memory: the summary, then the categories (at most
    `MAX_CATEGORIES`, by name: stored JSON keeps no order) as ``- name: text`` lines; None when
    there is nothing or it expired."""
    if memory is None or summary_expired(memory, now=now):
        return None
    lines = [memory.summary.strip()] if memory.summary.strip() else []
    categories = sorted((memory.categories or {}).items())[:MAX_CATEGORIES]
    lines += [f"- {name}: {text}".strip() for name, text in categories if str(text).strip()]
    return "\n".join(lines) or None


def clip_summary(text: str) -> str:
    """The summary as stored: stripped, at most `MAX_SUMMARY_CHARS` characters (cut at the last
    whitespace before the limit when there is one, so no word is split)."""
    text = text.strip()
    if len(text) <= MAX_SUMMARY_CHARS:
        return text
    cut = text[:MAX_SUMMARY_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > MAX_SUMMARY_CHARS // 2 else cut).rstrip()


def build_summary_messages(
    *,
    persona_name: str,
    channel_name: str,
    previous_summary: str | None,
    conversation: Sequence[str],
) -> list[dict[str, str]]:
    """The Chat Completions messages of one memory refresh.

    ``conversation`` is the channel's window as the persona's turn sees it, one rendered
    ``Name: text`` line per entry, already filtered: users with full privacy, blacklisted users
    and authors who blocked from the persona are not in it, so nothing of theirs can enter the
    memory. ``previous_summary`` (None: none, or expired) is carried forward so the memory rolls.
    """
    system = (
        f"You keep {persona_name}'s short-term memory of the conversation in {channel_name}. "
        f"Write what {persona_name} should remember to keep talking naturally: who is here, "
        "what is being discussed, what was promised or asked, the mood. Plain prose, at most "
        f"{MAX_SUMMARY_CHARS} characters. Answer with the memory only."
    )
    parts = []
    if previous_summary:
        parts += ["The memory so far:", previous_summary.strip(), ""]
    parts += ["The conversation now:", *(conversation or ["(no visible messages)"])]
    parts += ["", "The updated memory:"]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(parts)},
    ]
