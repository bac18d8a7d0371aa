"""Which notes a turn injects, and where they land."""

from __future__ import annotations

import pytest

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.macros import MacroContext
from chat.pipeline.notes import (
    TIME_AWARENESS_NOTE_DEPTH,
    VERBATIM_TOOL_CALLING_NUDGE,
    active_context_notes,
    context_note_items,
    place_notes,
)
from chat.pipeline.types import ContextNote, Role

MACROS = MacroContext(bot="Tomori", char="Tomori", user="Alice")


def entry(label: str) -> ContextItem:
    return ContextItem(ItemTag.DIALOGUE_HISTORY, Role.USER, label)


def spacer(label: str) -> ContextItem:
    return ContextItem(ItemTag.DATE_SPACER, Role.USER, label)


def note(label: str, depth: int) -> ContextItem:
    return ContextItem(ItemTag.CONTEXT_NOTE_INJECTION, Role.USER, label, depth=depth)


FIVE_ENTRIES = [entry("e1"), entry("e2"), spacer("day"), entry("e3"), entry("e4"), entry("e5")]


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ([note("N", 0)], ["e1", "e2", "day", "e3", "e4", "e5", "N"]),
        ([note("N", 1)], ["e1", "e2", "day", "e3", "e4", "N", "e5"]),
        ([note("N", 3)], ["e1", "e2", "day", "N", "e3", "e4", "e5"]),
        ([note("N", 5)], ["N", "e1", "e2", "day", "e3", "e4", "e5"]),
        ([note("N", 50)], ["N", "e1", "e2", "day", "e3", "e4", "e5"]),
        (
            [note("persona", 2), note("channel", 2), note("nudge", 3)],
            ["e1", "e2", "day", "nudge", "e3", "persona", "channel", "e4", "e5"],
        ),
    ],
)
def test_notes_land_before_the_entry_at_n_minus_depth_after_its_spacer(notes, expected):
    placed = place_notes(FIVE_ENTRIES, notes)

    assert [item.text for item in placed] == expected


def test_notes_on_an_empty_dialogue_come_out_in_order():
    assert [i.text for i in place_notes([], [note("a", 4), note("b", 0)])] == ["a", "b"]


PERSONA_NOTE = ContextNote("persona note", 4)
CHANNEL_NOTE = ContextNote("channel note", 2)
GLOBAL_NOTE = ContextNote("global note", 6)


@pytest.mark.parametrize(
    ("persona", "channel", "global_", "nudge", "reunion", "expected"),
    [
        (
            PERSONA_NOTE,
            CHANNEL_NOTE,
            GLOBAL_NOTE,
            False,
            None,
            [("persona note", 4), ("channel note", 2)],
        ),
        (None, CHANNEL_NOTE, GLOBAL_NOTE, False, None, [("channel note", 2)]),
        (None, None, GLOBAL_NOTE, False, None, [("global note", 6)]),
        (ContextNote("  ", 1), None, GLOBAL_NOTE, False, None, [("global note", 6)]),
        (None, None, None, False, None, []),
        (
            PERSONA_NOTE,
            None,
            None,
            True,
            "Alice is back after 3 weeks.",
            [
                ("persona note", 4),
                (VERBATIM_TOOL_CALLING_NUDGE, TIME_AWARENESS_NOTE_DEPTH),
                ("Alice is back after 3 weeks.", TIME_AWARENESS_NOTE_DEPTH),
            ],
        ),
    ],
)
def test_active_notes_and_their_order(persona, channel, global_, nudge, reunion, expected):
    notes = active_context_notes(
        persona_note=persona,
        channel_note=channel,
        global_note=global_,
        verbatim_tool_nudge=nudge,
        reunion_note=reunion,
    )

    assert [(n.text, n.depth) for n in notes] == expected


def test_note_items_resolve_macros_and_keep_their_depth():
    (item,) = context_note_items([ContextNote("{char} is tired of {user}", 3)], MACROS)

    assert (item.tag, item.role, item.text, item.depth) == (
        ItemTag.CONTEXT_NOTE_INJECTION,
        Role.USER,
        "[System: Tomori is tired of Alice]",
        3,
    )
