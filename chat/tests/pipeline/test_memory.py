"""Short-term memory rules: due at the cadence with tools on, expiry, the memory at its depth."""

from __future__ import annotations

import datetime as dt

import pytest

from chat.pipeline.context import build_turn_context
from chat.pipeline.items import ItemTag
from chat.pipeline.memory import (
    MAX_SUMMARY_CHARS,
    MemoryState,
    build_summary_messages,
    clip_summary,
    pending_raw_turns,
    short_term_memory_maintenance_due,
    summary_expired,
    visible_memory_text,
)
from chat.pipeline.tools import ToolName, admit_tools
from chat.pipeline.truncation import truncate_dialogue_history
from chat.pipeline.types import Role
from chat.tests.factories import ALICE, BOB, T0, message, turn_input

NOW = T0 + dt.timedelta(days=1)


def counted(turns: int, *, ago: dt.timedelta = dt.timedelta(minutes=10)) -> MemoryState:
    return MemoryState(turns_since_refresh=turns, last_turn_at=NOW - ago)


@pytest.mark.parametrize(
    ("turns", "tools_on", "due"),
    [
        (4, True, False),
        (5, True, True),
        (6, True, True),
        (5, False, False),
        (50, False, False),
        (0, True, False),
    ],
)
def test_maintenance_is_due_at_the_cadence_only_with_tools_on(turns, tools_on, due):
    assert (
        short_term_memory_maintenance_due(
            counted(turns), refresh_every=5, tools_on=tools_on, now=NOW
        )
        is due
    )


def test_a_custom_cadence_is_honoured_and_no_memory_is_never_due():
    assert short_term_memory_maintenance_due(counted(2), refresh_every=2, tools_on=True, now=NOW)
    assert not short_term_memory_maintenance_due(
        counted(2), refresh_every=3, tools_on=True, now=NOW
    )
    assert not short_term_memory_maintenance_due(None, refresh_every=1, tools_on=True, now=NOW)


@pytest.mark.parametrize(
    ("ago", "pending"),
    [
        (dt.timedelta(hours=11, minutes=59), 7),
        (dt.timedelta(hours=12), 0),
        (dt.timedelta(days=3), 0),
    ],
)
def test_raw_turns_expire_twelve_hours_after_the_newest(ago, pending):
    memory = counted(7, ago=ago)
    assert pending_raw_turns(memory, now=NOW) == pending
    assert short_term_memory_maintenance_due(
        memory, refresh_every=5, tools_on=True, now=NOW
    ) is bool(pending)


@pytest.mark.parametrize(
    ("age", "shown"),
    [(dt.timedelta(hours=23, minutes=59), True), (dt.timedelta(hours=24), False)],
)
def test_a_summary_is_shown_for_twenty_four_hours(age, shown):
    memory = MemoryState(summary="Bob is moving house.", refreshed_at=NOW - age)
    assert summary_expired(memory, now=NOW) is not shown
    assert visible_memory_text(memory, now=NOW) == ("Bob is moving house." if shown else None)


def test_categories_show_after_the_summary_by_name_at_most_five():
    categories = {f"topic {n}": f"note {n}" for n in (7, 3, 1, 6, 2, 5, 4)}
    memory = MemoryState(summary="Gig on Saturday.", categories=categories, refreshed_at=NOW)
    assert visible_memory_text(memory, now=NOW) == "\n".join(
        ["Gig on Saturday.", *(f"- topic {n}: note {n}" for n in range(1, 6))]
    )


def test_a_summary_is_clipped_to_fifteen_hundred_characters_between_words():
    clipped = clip_summary("word " * 1000)
    assert len(clipped) <= MAX_SUMMARY_CHARS
    assert clipped.endswith("word")
    assert clip_summary("  short  ") == "short"


def test_the_summary_prompt_carries_the_old_memory_and_the_visible_lines_only():
    messages = build_summary_messages(
        persona_name="Tomori",
        channel_name="#general",
        previous_summary="Bob is moving house.",
        conversation=["Alice: [ref_1] the van is booked"],
    )
    assert messages[0]["role"] == "system" and "#general" in messages[0]["content"]
    assert messages[1]["content"] == (
        "The memory so far:\nBob is moving house.\n\n"
        "The conversation now:\nAlice: [ref_1] the van is booked\n\nThe updated memory:"
    )


def test_due_maintenance_admits_the_memory_tool_without_keywords_unless_tools_are_off():
    on = admit_tools(
        deliberate_tool_mode=True,
        trigger=None,
        configured_tools=frozenset(),
        short_term_memory_maintenance_due=True,
        is_queued_turn=False,
    )
    off = admit_tools(
        tools_enabled=False,
        deliberate_tool_mode=False,
        trigger=None,
        configured_tools=frozenset(),
        short_term_memory_maintenance_due=True,
        is_queued_turn=False,
    )
    assert on.tools == (ToolName.UPDATE_SHORT_TERM_MEMORY,)
    assert on.reasons[ToolName.UPDATE_SHORT_TERM_MEMORY] == "short-term memory maintenance is due"
    assert off.tools == ()


def history(count: int) -> list:
    """Alternating authors, so every message is its own dialogue entry."""
    return [
        message(n, f"line {n}", author=BOB if n % 2 else ALICE, minutes=n)
        for n in range(1, count + 1)
    ]


def test_the_memory_sits_at_its_saved_depth_in_the_dialogue():
    context = build_turn_context(
        turn_input(
            history(6), short_term_memory_text="Bob is moving house.", short_term_memory_depth=2
        )
    )
    tags = [item.tag for item in context.items]
    assert ItemTag.SHORT_TERM_MEMORY in tags
    short_term_memory_index = tags.index(ItemTag.SHORT_TERM_MEMORY)
    short_term_memory = context.items[short_term_memory_index]
    assert (short_term_memory.role, short_term_memory.depth) == (Role.USER, 2)
    assert (
        short_term_memory.text
        == "[System: Short-term memory of this conversation:\nBob is moving house.]"
    )
    after = [t for t in tags[short_term_memory_index + 1 :] if t is ItemTag.DIALOGUE_HISTORY]
    assert len(after) == 2
    assert context.cacheable_prefix_end <= short_term_memory_index


def test_without_a_depth_the_memory_is_in_the_system_block():
    context = build_turn_context(
        turn_input(history(3), short_term_memory_text="Bob is moving house.")
    )
    [short_term_memory] = [item for item in context.items if item.tag is ItemTag.SHORT_TERM_MEMORY]
    assert (short_term_memory.role, short_term_memory.depth) == (Role.SYSTEM, None)
    assert context.items.index(short_term_memory) < context.cacheable_prefix_end


def test_truncation_keeps_the_memory_at_its_depth():
    context = build_turn_context(
        turn_input(
            history(40), short_term_memory_text="Bob is moving house.", short_term_memory_depth=3
        )
    )
    kept, report = truncate_dialogue_history(
        context.items, budget=context.total_tokens // 2, stride=6
    )
    assert report.removed_entries > 0
    tags = [item.tag for item in kept]
    short_term_memory_index = tags.index(ItemTag.SHORT_TERM_MEMORY)
    after = [t for t in tags[short_term_memory_index + 1 :] if t is ItemTag.DIALOGUE_HISTORY]
    assert len(after) == 3
