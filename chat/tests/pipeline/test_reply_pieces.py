from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.reply_pieces import (
    CUT_MARKER,
    ReplyPieces,
    edit_pieces,
    paragraph_pieces,
    split_reply,
)


@pytest.mark.parametrize(
    ("text", "final", "expected"),
    [
        pytest.param("Hello there", False, ReplyPieces(()), id="a-paragraph-being-written"),
        pytest.param("Hello there", True, ReplyPieces(("Hello there",)), id="the-end-completes"),
        pytest.param("One.\n\nTwo", False, ReplyPieces(("One.",)), id="a-blank-line-completes"),
        pytest.param("One.\n  \t\nTwo", False, ReplyPieces(("One.",)), id="spaces-on-blank-line"),
        pytest.param("One.\nstill one", False, ReplyPieces(()), id="a-line-break-is-not-enough"),
        pytest.param("\n\n  One.\n\n\n\nTwo.\n\n", True, ReplyPieces(("One.", "Two.")), id="gaps"),
        pytest.param(
            "Code:\n\n```\na = 1\n\nb = 2\n```\n\nAfter",
            False,
            ReplyPieces(("Code:", "```\na = 1\n\nb = 2\n```")),
            id="blank-lines-inside-code-stay",
        ),
        pytest.param("", True, ReplyPieces(()), id="nothing"),
    ],
)
def test_complete_paragraphs_become_messages(text, final, expected):
    assert paragraph_pieces(text, final=final) == expected


def test_a_paragraph_over_the_limit_is_split_where_a_whole_reply_is():
    paragraph = "a" * 1500 + "\n" + "b" * 1000
    assert paragraph_pieces(paragraph + "\n\nnext", final=False).pieces == tuple(
        split_reply(paragraph)
    )


def test_the_finished_parts_of_a_long_paragraph_go_out_before_it_ends():
    writing = "a" * 1500 + "\n" + "b" * 1000  # the paragraph is still being written
    assert paragraph_pieces(writing, final=False).pieces == ("a" * 1500,)


def test_the_last_allowed_message_gathers_the_rest_of_the_reply():
    text = "\n\n".join(f"Paragraph {n}." for n in range(1, 7))
    writing = paragraph_pieces(text + "\n\n", final=False)
    assert writing == ReplyPieces(("Paragraph 1.", "Paragraph 2.", "Paragraph 3."))
    ended = paragraph_pieces(text, final=True)
    assert ended == ReplyPieces(
        (
            "Paragraph 1.",
            "Paragraph 2.",
            "Paragraph 3.",
            "Paragraph 4.\n\nParagraph 5.\n\nParagraph 6.",
        )
    )


def test_the_stream_is_cut_at_the_cap_as_soon_as_the_rest_outgrows_the_last_message():
    text = "One.\n\nTwo.\n\nThree.\n\n" + ("word " * 500)  # 2,500 characters still coming
    result = paragraph_pieces(text, final=False, max_pieces=4)
    assert result.capped
    assert result.pieces[:3] == ("One.", "Two.", "Three.")
    assert result.pieces[3].endswith(" " + CUT_MARKER) and len(result.pieces[3]) <= 2000


def test_edit_mode_shows_the_message_being_written_and_continues_in_a_new_one_when_full():
    assert edit_pieces("Hel", final=False) == (ReplyPieces(()), "Hel")
    long = "a" * 1500 + "\n" + "b" * 1000
    assert edit_pieces(long, final=False) == (ReplyPieces(("a" * 1500,)), "b" * 1000)
    assert edit_pieces(long, final=True) == (ReplyPieces(("a" * 1500, "b" * 1000)), "")
    capped, writing = edit_pieces("x " * 5000, final=False)
    assert capped.capped and len(capped.pieces) == 4 and writing == ""
    assert capped.pieces[-1].endswith(CUT_MARKER)


_words = st.sampled_from(["word", "Sentence.", "```", "\n", "\n\n", " ", "x" * 300, "\n \n"])
_texts = st.lists(_words, max_size=80).map("".join)


@given(text=_texts, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6))
def test_a_longer_text_never_takes_back_a_piece(text, cuts):
    """Whatever the model writes next, what was already sent stays right: pieces of a prefix
    are a prefix of the pieces of any longer text, the final reply's included."""
    for cutter in (paragraph_pieces, lambda t, final: edit_pieces(t, final=final)[0]):
        sent: tuple[str, ...] = ()
        for cut in sorted(cuts):
            pieces = cutter(text[:cut], final=False).pieces
            assert pieces[: len(sent)] == sent
            sent = pieces
        final = cutter(text, final=True)
        assert final.pieces[: len(sent)] == sent
        assert len(final.pieces) <= 4 and all(len(p) <= 2000 for p in final.pieces)


@given(text=_texts)
def test_an_uncapped_reply_loses_no_words(text):
    result = paragraph_pieces(text, final=True)
    if not result.capped:
        assert " ".join(result.pieces).split() == text.split() or "```" in text
