"""Tail directives in priority order, and prefill resolution."""

from __future__ import annotations

import pytest

from chat.pipeline.directives import QueuedReply, resolve_prefill, tail_directives
from chat.pipeline.items import ItemTag
from chat.pipeline.macros import MacroContext
from chat.pipeline.types import Role

MACROS = MacroContext(bot="Tomori", char="Kaito", user="Alice")
STOP = (
    "[System: Write only Kaito's next message. Do not write lines for anyone else, do not start "
    "with a name label, and do not write ref_ or media_ tags.]"
)
EMOJI_PENALTY = (
    "[System: Your recent messages used a lot of emoji. Use none in this reply unless it truly "
    "needs one.]"
)
REASONING = (
    "[System: If you reason before answering, put all of it inside <think></think> first; after "
    "the closing tag, write only the reply.]"
)
QUEUED = (
    "[System: You are answering an earlier message: ref_4 from Alice. Answer that message "
    "specifically; 2 newer message(s) waiting will each be answered in their own turn.]"
)


def directive_texts(own_prose=(), *, reasoning=False, queued=None) -> list[str]:
    items = tail_directives(
        own_prose, macros=MACROS, reasoning_in_think_tags=reasoning, queued=queued
    )
    assert {(item.tag, item.role) for item in items} == {(ItemTag.TAIL_DIRECTIVE, Role.USER)}
    return [item.text for item in items]


def test_an_ordinary_turn_ends_with_the_stop_directive_only():
    assert directive_texts(["hi", "ok 😀"]) == [STOP]


def test_all_directives_in_priority_order():
    own = ["old 😀", "a 😀", "b", "c :sparkles:", "d 🎉"]

    texts = directive_texts(own, reasoning=True, queued=QueuedReply("ref_4", "Alice", 2))

    assert texts == [EMOJI_PENALTY, REASONING, QUEUED, STOP]


@pytest.mark.parametrize(
    ("own_prose", "penalised"),
    [
        (["😀", "😀", "😀"], True),
        (["😀", "😀", "plain"], False),
        (["😀", "😀", "😀", "a", "b", "c"], False),
        (["at 12:30:45", "ratio 1:2:3", "ok"], False),
        ([":wave:", "→ no", "hi ❤"], False),
        ([":wave:", "⭐", "hi ❤"], True),
    ],
)
def test_emoji_penalty_looks_at_the_newest_five_own_messages(own_prose, penalised):
    assert (EMOJI_PENALTY in directive_texts(own_prose)) is penalised


@pytest.mark.parametrize(
    ("prefill", "expected"),
    [("", None), ("   ", None), ("*{char} smiles*", "*Kaito smiles*"), (" Well, ", "Well,")],
)
def test_resolve_prefill(prefill, expected):
    assert resolve_prefill(prefill, MACROS) == expected
