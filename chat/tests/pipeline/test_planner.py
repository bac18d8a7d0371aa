from __future__ import annotations

import json
from datetime import UTC

import pytest

from chat.pipeline.planner import (
    ActionRecord,
    Continue,
    PlannerChannel,
    PlannerDecision,
    PlannerOutputError,
    PlannerPersona,
    PlannerPromptInput,
    PlannerRosterEntry,
    React,
    ReadUnreadMessages,
    SendMessage,
    Sleep,
    build_planner_messages,
    build_planner_prompt,
    parse_planner_action,
    render_planner_lines,
)
from chat.pipeline.types import NameDirectory, PrivacyLevel, UserBlock
from chat.tests.factories import ALICE, BOB, CAROL, T0, message, sf, simplify


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
    assert parse_planner_action(text, channel=CHANNEL) == PlannerDecision(expected)


CHANNEL = PlannerChannel(channel_id=1300000000000000001, name="autonomous")


@pytest.mark.parametrize(
    "named", ["1300000000000000001", "autonomous", "#autonomous", " #Autonomous "]
)
def test_seed_003s_own_format_names_the_channel_and_costs_nothing(named):
    text = json.dumps({"action": "read_unread_messages", "channelId": named})

    decision = parse_planner_action(text, channel=CHANNEL)

    assert decision == PlannerDecision(ReadUnreadMessages(action="read_unread_messages"))


@pytest.mark.parametrize("named", ["1300000000000000002", "general", "…", ""])
def test_a_channel_id_naming_another_channel_is_refused_with_the_reason(named):
    text = json.dumps({"action": "read_unread_messages", "channelId": named})

    with pytest.raises(
        PlannerOutputError, match="is not this channel: you act only in #autonomous"
    ):
        parse_planner_action(text, channel=CHANNEL)


def test_keys_the_action_does_not_have_are_left_out_and_named():
    text = '{"action": "send_message", "persona": "Anon", "mood": "curious", "why": ["a", 1]}'

    decision = parse_planner_action(text, channel=CHANNEL)

    assert decision.action == SendMessage(action="send_message", persona="Anon")
    assert decision.ignored == {"mood": "curious", "why": ["a", 1]}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I think we should reply.", "expected one JSON object"),
        ('{"action": "send_message", "persona": }', "malformed"),
        ('{"action": "dance"}', "not a valid action"),
        ('{"action": "sleep", "seconds": 600}', "seconds"),
        ('{"action": "send_message"}', "persona"),
        ('{"action": "react", "message": "1234567890123456789", "emoji": "x"}', "message"),
        ('{"act": "continue"}', "action"),
    ],
)
def test_malformed_planner_output_becomes_a_readable_error(text, problem):
    with pytest.raises(PlannerOutputError, match=problem):
        parse_planner_action(text, channel=CHANNEL)


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


def _prompt_input(seen, unread_ids, **overrides) -> PlannerPromptInput:
    fields = {
        "seen": seen,
        "unread_ids": unread_ids,
        "personas": [
            PlannerPersona("Tomori", "You are {char}; {user} spoke last.", is_main=True),
            PlannerPersona("Anon", "A guitarist."),
        ],
        "blocks": [],
        "now": T0,
        "privacy": {},
        "blacklisted_user_ids": frozenset(),
        "names": NameDirectory(),
        "timezone": UTC,
        "channel_name": "general",
        "actions": [],
        "iteration": 2,
        "max_iterations": 5,
    }
    return PlannerPromptInput(**(fields | overrides))


def test_the_planner_prompt_splits_read_and_unread_and_keys_them():
    read, unread = message(1, "we met yesterday"), message(2, "anon, play something", author=BOB)

    prompt = build_planner_prompt(_prompt_input([read, unread], {unread.id}))

    system, state, events = (m["content"] for m in prompt.messages)
    assert "#general" in system and "- Tomori: You are Tomori; Bob spoke last." in system
    assert "ref_1 Alice: we met yesterday" in state
    assert "You have 1 unread message." in events and "ref_2 Bob: anon, play something" in events
    assert "This is step 2 of at most 5." in events
    assert prompt.refs == {"ref_1": read.id, "ref_2": unread.id}


def test_the_planner_never_shows_a_user_every_persona_blocked_or_a_private_one():
    blocked, private = message(1, "blocked words", author=BOB), message(2, "private words")
    kept = message(3, "hello all", author=CAROL)
    blocks = [UserBlock("Tomori", BOB.id), UserBlock("Anon", BOB.id)]

    prompt = build_planner_prompt(
        _prompt_input(
            [blocked, private, kept],
            {kept.id},
            blocks=blocks,
            privacy={ALICE.id: PrivacyLevel.FULL},
        )
    )

    text = str(prompt.messages)
    assert "blocked words" not in text and "private words" not in text
    assert "hello all" in text


def test_a_user_blocked_by_one_persona_only_still_reaches_the_planner():
    said = message(1, "still here", author=BOB)

    prompt = build_planner_prompt(
        _prompt_input([said], {said.id}, blocks=[UserBlock("Anon", BOB.id)])
    )

    assert "still here" in str(prompt.messages)
