"""Reasoning and the persona's own name label never reach Discord."""

from __future__ import annotations

import pytest

from chat.llm.reply import strip_name_label, strip_reasoning


@pytest.mark.parametrize(
    ("raw", "left"),
    [
        ("Hello!", "Hello!"),
        ("<think>plan</think>Hello!", "Hello!"),
        ("<THINK>a\nb</THINK> Hello <think>more</think>there", " Hello there"),
        ("<think>ran out of tokens while", ""),
        ("  <think>only reasoning</think>  ", "    "),
        ("Hello <think>unclosed later", "Hello <think>unclosed later"),
        (" continues a prefill", " continues a prefill"),
    ],
)
def test_strip_reasoning_removes_think_blocks_and_an_unclosed_leading_one(
    raw: str, left: str
) -> None:
    assert strip_reasoning(raw) == left


@pytest.mark.parametrize(
    ("raw", "left"),
    [
        ("Tomori: Hello!", "Hello!"),
        ("  tomori :Hello!", "Hello!"),
        ("**Tomori:** Hello!", "Hello!"),
        ("**Tomori**: Hello!", "Hello!"),
        ("Tomori: Tomori: twice", "Tomori: twice"),
        ("Ann: Hello!", "Ann: Hello!"),
        ("Tomorin: Hello!", "Tomorin: Hello!"),
        ("Hello, Tomori: here", "Hello, Tomori: here"),
        ("Tomori:", ""),
    ],
)
def test_strip_name_label_removes_only_the_personas_own_leading_label(raw: str, left: str) -> None:
    assert strip_name_label(raw, name="Tomori") == left


def test_a_name_with_regex_characters_is_matched_literally() -> None:
    assert strip_name_label("Dr. K (bot): hi", name="Dr. K (bot)") == "hi"
    assert strip_name_label("Drx K (bot): hi", name="Dr. K (bot)") == "Drx K (bot): hi"
