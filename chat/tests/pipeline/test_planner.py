from __future__ import annotations

import pytest

from chat.pipeline.planner import (
    ActionRecord,
    Continue,
    PlannerOutputError,
    PlannerRosterEntry,
    React,
    ReadUnreadMessages,
    SendMessage,
    Sleep,
    build_planner_messages,
    parse_planner_action,
    render_planner_lines,
)
from chat.tests.factories import ALICE, message, sf, simplify


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "read_unread_messages"}', ReadUnreadMessages(action="read_unread_messages")),
        (
            '```json\n{"action": "send_message", "persona": "Anon", "reply_to": "ref_3"}\n```',
            SendMessage(action="send_message", persona="Anon", reply_to="ref_3"),
        ),
        (
            '<think>they asked a question {maybe}</think>{"action": "continue"}',
            Continue(action="continue"),
        ),
        ('Sure! {"action": "sleep", "seconds": 5} done', Sleep(action="sleep", seconds=5)),
        (
            '{"action": "react", "message": "ref_1", "emoji": "👍"}',
            React(action="react", message="ref_1", emoji="👍"),
        ),
    ],
)
def test_planner_output_parses_to_one_action(text, expected):
    assert parse_planner_action(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I think we should reply.", "expected one JSON object"),
        ('{"action": "send_message", "persona": }', "malformed"),
        ('{"action": "dance"}', "not a valid action"),
        ('{"action": "sleep", "seconds": 600}', "seconds"),
        ('{"action": "send_message"}', "persona"),
        ('{"action": "react", "message": "1234567890123456789", "emoji": "x"}', "message"),
        ('{"action": "continue", "why": "bored"}', "why"),
    ],
)
def test_malformed_planner_output_becomes_a_readable_error(text, problem):
    with pytest.raises(PlannerOutputError, match=problem):
        parse_planner_action(text)


def test_planner_prompt_states_unread_count_contents_and_past_results():
    messages = build_planner_messages(
        channel_name="autonomous",
        roster=[PlannerRosterEntry("Tomori", "a quiet poet"), PlannerRosterEntry("Anon", "loud")],
        conversation=["ref_1 alice: morning"],
        incoming=["ref_2 bob: anyone here?", "ref_3 carol: hello?"],
        actions=[ActionRecord("read_unread_messages", True, "read 2 messages")],
        iteration=2,
        max_iterations=5,
    )
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert "#autonomous" in messages[0]["content"]
    assert "- Tomori: a quiet poet" in messages[0]["content"]
    state, incoming = messages[1]["content"], messages[2]["content"]
    assert state.startswith("Conversation so far:\nref_1 alice: morning")
    assert "1. read_unread_messages: ok: read 2 messages" in state
    assert incoming.startswith("Incoming events:\nYou have 2 unread messages.")
    assert incoming.index("ref_2 bob: anyone here?") < incoming.index("ref_3 carol: hello?")
    assert incoming.endswith("This is step 2 of at most 5. Your action:")


def test_planner_prompt_without_unread_messages_says_so_at_the_end():
    messages = build_planner_messages(
        channel_name="general",
        roster=[PlannerRosterEntry("Tomori", "a quiet poet")],
        conversation=[],
        incoming=[],
        actions=[],
        iteration=1,
        max_iterations=5,
    )
    assert messages[1]["content"] == "Conversation so far:\n(nothing yet)"
    assert "You have 0 unread messages." in messages[2]["content"]


def test_read_and_unread_words_of_one_author_never_share_a_line():
    history = simplify(
        [
            message(1, "morning", author=ALICE),
            message(2, "anyone up?", author=ALICE, minutes=1),
            message(3, "hello??", author=ALICE, minutes=2),
        ]
    )
    assert len(history.entries) == 1  # merged: one author, pure text, same day

    merged = render_planner_lines(history.entries, history.id_map)
    split = render_planner_lines(history.entries, history.id_map, line_starts={sf(2)})

    assert merged == {sf(1): "ref_1 Alice: morning\nanyone up?\nhello??"}
    assert split == {sf(1): "ref_1 Alice: morning", sf(2): "ref_2 Alice: anyone up?\nhello??"}


def test_an_action_result_reaches_the_planner_without_raw_snowflakes() -> None:
    failed = ActionRecord("react", False, "the reaction failed: channel 1191168914227200010: gone")

    messages = build_planner_messages(
        channel_name="general",
        roster=[PlannerRosterEntry("Tomori", "a poet")],
        conversation=[],
        incoming=[],
        actions=[failed],
        iteration=2,
        max_iterations=5,
    )

    state = messages[1]["content"]
    assert "1. react: failed: the reaction failed: channel [id]: gone" in state
    assert "1191168914227200010" not in state
