from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.gateway.delivery_text import (
    CUT_MARKER,
    MAX_REPLY_PIECES,
    sanitize_webhook_name,
    split_reply,
)


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
    pieces = split_reply(text, max_pieces=100)  # uncapped: 7,000 characters need at most 8
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


def test_a_reply_is_at_most_four_messages_by_default():
    pieces = split_reply("word " * 20_000)  # 100 KB: 50 messages uncapped

    assert MAX_REPLY_PIECES == 4 and len(pieces) == 4
    assert pieces[-1].endswith(" " + CUT_MARKER)
    assert all(len(piece) <= 2000 for piece in pieces)


def _content(text: str) -> str:
    """What a reader sees besides layout: no whitespace and no backticks (a cut adds fences,
    which can merge with backticks of the text into runs that are not fences)."""
    return "".join(text.split()).replace("`", "")


@pytest.mark.parametrize(
    ("text", "limit", "max_pieces", "expected"),
    [
        pytest.param("one two", 20, 1, ["one two"], id="fits-in-one"),
        pytest.param(
            "aaaa\n" * 6,
            20,
            2,
            ["aaaa\naaaa\naaaa"] * 2,
            id="exactly-the-cap",
        ),
        pytest.param(
            "aaaa\n" * 8, 20, 2, ["aaaa\naaaa\naaaa", "aaaa\naaaa […]"], id="one-over-the-cap"
        ),
        pytest.param("x" * 50, 20, 1, ["x" * 12 + " […]"], id="hard-cut-single-piece"),
        pytest.param(
            "```\n" + "ab\n" * 20 + "```",
            24,
            2,
            ["```\nab\nab\nab\nab\nab\n```", "```\nab\nab\nab\nab\n```\n[…]"],
            id="open-fence-closed-before-the-marker",
        ),
    ],
)
def test_a_capped_reply_ends_with_a_visible_marker(text, limit, max_pieces, expected):
    assert split_reply(text, limit=limit, max_pieces=max_pieces) == expected


@given(
    st.text(alphabet=st.sampled_from("ab .\n`"), max_size=400),
    st.integers(min_value=16, max_value=120),
    st.integers(min_value=1, max_value=5),
)
def test_capped_pieces_fit_and_keep_a_prefix_of_the_text(text, limit, max_pieces):
    uncapped = split_reply(text, limit=limit, max_pieces=10_000)
    pieces = split_reply(text, limit=limit, max_pieces=max_pieces)

    assert len(pieces) <= max_pieces
    assert all(0 < len(piece) <= limit for piece in pieces)
    if len(uncapped) <= max_pieces:
        assert pieces == uncapped
    else:
        assert pieces[:-1] == uncapped[: max_pieces - 1]
        assert pieces[-1].endswith(CUT_MARKER)
        kept = _content("".join(pieces)).removesuffix(CUT_MARKER)
        assert _content(text).startswith(kept)


@pytest.mark.parametrize(("limit", "max_pieces"), [(2000, 0), (15, 4)])
def test_impossible_bounds_are_refused(limit, max_pieces):
    with pytest.raises(ValueError, match=r"max_pieces|limit"):
        split_reply("text", limit=limit, max_pieces=max_pieces)
