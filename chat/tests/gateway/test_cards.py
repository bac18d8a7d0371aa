"""What a card is, as the gateway recognises it (`chat.gateway.cards.card_kind`)."""

from __future__ import annotations

import pytest

from chat.gateway.cards import card_kind, minimal_notice_memory
from chat.pipeline.types import CardKind


@pytest.mark.parametrize(
    ("own", "preview", "labels", "body", "expected"),
    [
        (False, False, ("🎲 Roll",), ("1d20 → 17",), CardKind.DICE_ROLL),
        (False, False, ("Alice rolled 2d6+3",), ("11",), CardKind.DICE_ROLL),
        (True, False, ("Rolling d%",), ("42",), CardKind.DICE_ROLL),
        (False, False, ("Hidden roll",), ("1d20 → 3",), CardKind.UNSHARED_DICE_ROLL),
        (False, False, ("🎲 Roll", "GM only"), ("3d6 → 9",), CardKind.UNSHARED_DICE_ROLL),
        (False, False, ("Debug", "tokens"), ("812",), CardKind.DIAGNOSTIC),
        (True, False, ("Status", "latency"), ("20 ms",), CardKind.DIAGNOSTIC),
        (False, False, ("Bot diagnostics",), ("all good",), CardKind.DIAGNOSTIC),
        # Words alone are not a roll: it needs dice notation, and the word in a label.
        (False, False, ("Rock and roll",), ("a song",), CardKind.ORDINARY),
        (False, False, ("Stats",), ("I rolled a d20",), CardKind.ORDINARY),
        (True, False, ("Memory saved",), ("Alice likes tea",), CardKind.SYSTEM_NOTICE),
        (False, False, ("Daily quest",), ("find a cat",), CardKind.ORDINARY),
        # A link preview is a preview, whatever it says.
        (True, True, ("Debug your code",), ("a blog post",), CardKind.ORDINARY),
        (False, True, ("🎲 Roll 1d20",), ("",), CardKind.ORDINARY),
    ],
)
def test_cards_are_recognised_by_what_they_say(own, preview, labels, body, expected):
    assert card_kind(own=own, preview=preview, labels=labels, body=body) is expected


@pytest.mark.parametrize(
    ("title", "description", "field_count", "footer", "expected"),
    [
        ("Memory saved", "", 0, "memory #303", 303),
        ("Memory saved", "", 0, " Memory #7 ", 7),
        ("Memory saved", "Alice likes tea", 0, "memory #303", None),  # full verbosity
        ("Memory saved", "", 1, "memory #303", None),
        ("", "", 0, "memory #303", None),
        ("Memory saved", "", 0, "saved by Tomori", None),
    ],
)
def test_a_minimal_notice_names_the_memory_it_confirms(
    title, description, field_count, footer, expected
):
    assert (
        minimal_notice_memory(
            title=title, description=description, field_count=field_count, footer=footer
        )
        == expected
    )
