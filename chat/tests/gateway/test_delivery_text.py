from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.gateway.delivery_text import sanitize_webhook_name, split_reply


def test_short_reply_is_one_message():
    assert split_reply("  hello there  ") == ["hello there"]


def test_empty_reply_sends_nothing():
    assert split_reply(" \n ") == []


def test_long_reply_splits_at_a_line_break():
    text = "a" * 1500 + "\n" + "b" * 1000
    assert split_reply(text) == ["a" * 1500, "b" * 1000]


def test_without_line_breaks_it_splits_after_a_sentence():
    first = ("This is a sentence. " * 60).strip()  # 1199 characters
    text = first + " " + "word " * 200
    pieces = split_reply(text)
    assert pieces[0].endswith(".")
    assert all(len(piece) <= 2000 for piece in pieces)


def test_an_open_code_fence_is_closed_and_reopened():
    text = "```python\n" + "x = 1\n" * 500 + "```"
    pieces = split_reply(text)
    assert len(pieces) == 2
    assert pieces[0].endswith("```") and pieces[1].startswith("```")
    assert all(piece.count("```") % 2 == 0 for piece in pieces)


@given(st.text(min_size=0, max_size=7000))
def test_pieces_fit_and_keep_every_non_space_character(text):
    pieces = split_reply(text)
    assert all(0 < len(piece) <= 2000 for piece in pieces)
    joined = "".join("".join(pieces).split()).replace("```", "")
    assert joined == "".join(text.split()).replace("```", "")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Tomori", "Tomori"),
        ("Discord Helper", "Di\u200bscord Helper"),
        ("clyde-bot", "cl\u200byde-bot"),
        ("  spaced   name ", "spaced name"),
        ("", "Persona"),
        ("x" * 100, "x" * 80),
    ],
)
def test_webhook_names_are_made_acceptable_to_discord(name, expected):
    assert sanitize_webhook_name(name) == expected
