"""Persona test checks, verdicts, diffs and rates: pure functions, table-driven, with
properties for the word diff and the JSON differences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.persona_checks import (
    CheckKind,
    CheckResult,
    DiffKind,
    check_rates,
    cosine,
    json_differences,
    judge_messages,
    judge_verdict,
    similarity_check,
    text_checks,
    word_diff,
)

REPLY = "Alice! Of course I remember you.\nYou brought the poems."


@pytest.mark.parametrize(
    ("expect", "passed"),
    [
        ({"contains": ["alice"]}, [True]),
        ({"contains": ["ALICE", "poems"]}, [True, True]),
        ({"contains": ["bob"]}, [False]),
        ({"not_contains": ["As an AI"]}, [True]),
        ({"not_contains": ["remember"]}, [False]),
        ({"matches": r"^Alice"}, [True]),
        ({"matches": r"^[^\n]{1,400}$"}, [False]),
        ({"matches": r"(?s)^.{1,400}$"}, [True]),
        ({"max_chars": len(REPLY)}, [True]),
        ({"max_chars": len(REPLY) - 1}, [False]),
        (
            {"contains": ["you"], "not_contains": ["sorry"], "matches": "poems", "max_chars": 5},
            [True, True, True, False],
        ),
    ],
)
def test_text_checks_hold_or_not_as_the_reply_says(expect, passed):
    assert [check.passed for check in text_checks(REPLY, **expect)] == passed


def test_a_failed_check_says_what_it_found():
    contains, absent, pattern, length = text_checks(
        REPLY, contains=["bob"], not_contains=["remember"], matches="sea", max_chars=10
    )
    assert contains.detail == "not in the reply"
    assert absent.detail.startswith("found at character 19: …")
    assert pattern.detail == "no match in the reply"
    assert length.detail == f"{len(REPLY)} characters"
    assert length.label == "max_chars 10" and contains.label == "contains 'bob'"


@pytest.mark.parametrize(
    ("answer", "passed", "reason"),
    [
        ("YES\nThe reply stays in character.", True, "The reply stays in character."),
        ("no. It breaks character.", False, "It breaks character."),
        ("**Yes** — gentle and brief", True, "gentle and brief"),
        ("Verdict: NO\nIt mentions being an AI.", False, "It mentions being an AI."),
        ("yes", True, ""),
        ("Yesterday it would have passed.", None, "the judge answered neither yes nor no: "),
        ("Maybe.", None, "the judge answered neither yes nor no: "),
        ("", None, "the judge answered neither yes nor no: "),
    ],
)
def test_the_judges_answer_is_read_as_a_verdict_and_a_reason(answer, passed, reason):
    verdict = judge_verdict(answer)
    assert verdict.passed is passed
    assert verdict.reason.startswith(reason)


def test_the_judge_is_shown_the_rubric_the_newest_lines_and_the_reply():
    conversation = [("alice", f"line {n}") for n in range(15)]
    system, user = judge_messages(
        rubric="Stays in character.", persona_name="Tomori", conversation=conversation, reply="hm."
    )
    assert system["role"] == "system" and "YES" in system["content"]
    assert user["content"].startswith("Rubric: Stays in character.\n")
    assert "alice: line 14" in user["content"] and "alice: line 4\n" not in user["content"]
    assert user["content"].endswith("The reply of Tomori:\nhm.")


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [([1.0, 0.0], [1.0, 0.0], 1.0), ([1.0, 0.0], [0.0, 1.0], 0.0), ([0.0, 0.0], [1.0, 1.0], 0.0)],
)
def test_cosine(first, second, expected):
    assert cosine(first, second) == pytest.approx(expected)


def test_similarity_holds_at_the_threshold():
    assert similarity_check(0.8, 0.8).passed is True
    assert similarity_check(0.8, 0.79).passed is False
    assert similarity_check(0.8, 0.912).detail == "cosine 0.912"


def test_rates_count_how_often_each_check_held_over_repeats():
    held = CheckResult(CheckKind.CONTAINS, "alice", True)
    missed = CheckResult(CheckKind.CONTAINS, "alice", False)
    unjudged = CheckResult(CheckKind.JUDGE, "kind", None)
    judged = CheckResult(CheckKind.JUDGE, "kind", True)
    rates = check_rates([[held, judged], [missed, unjudged], [held, judged]])
    assert [(r.label, r.held, r.total) for r in rates] == [
        ("contains 'alice'", 2, 3),
        ("judge kind", 2, 3),
    ]
    assert not rates[0].all_held


def test_the_word_diff_marks_what_changed():
    pieces = word_diff("I remember you, alice.", "I remember you well, Alice.")
    assert [(p.kind, p.text) for p in pieces] == [
        (DiffKind.SAME, "I remember "),
        (DiffKind.REMOVED, "you,"),
        (DiffKind.ADDED, "you"),
        (DiffKind.SAME, " "),
        (DiffKind.REMOVED, "alice."),
        (DiffKind.ADDED, "well, Alice."),
    ]


@given(st.text(max_size=80), st.text(max_size=80))
def test_the_word_diff_holds_both_texts(old, new):
    pieces = word_diff(old, new)
    assert "".join(p.text for p in pieces if p.kind is not DiffKind.ADDED) == old
    assert "".join(p.text for p in pieces if p.kind is not DiffKind.REMOVED) == new


def test_json_differences_name_each_path():
    first = {"model": "a", "messages": [{"role": "system", "content": "x"}, {"content": "y"}]}
    second = {"model": "a", "messages": [{"role": "system", "content": "z"}, {"content": "y"}]}
    assert json_differences(first, second) == ["messages[0].content"]
    assert json_differences(first, {**first, "tools": []}) == ["tools"]
    assert json_differences(first, {**first, "messages": first["messages"][:1]}) == ["messages"]
    assert json_differences(1, 1.0) == ["(the whole)"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values, json_values)
def test_json_values_differ_exactly_when_a_path_is_named(first, second):
    assert (json_differences(first, second) == []) == (
        first == second and repr(first) == repr(second)
    )
