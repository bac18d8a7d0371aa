"""build_turn_context end to end: the whole prompt, queued turns, budget, cache, prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.context import build_turn_context
from chat.pipeline.dialogue import date_label
from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.projections import completion_lines
from chat.pipeline.prompt_cache import cacheable_prefix_end
from chat.pipeline.tokens import O200kTokenCounter
from chat.pipeline.types import (
    ContextNote,
    ModelSettings,
    PersonaProfile,
    PrivacyLevel,
    Role,
    SampleMessage,
    UserBlock,
)
from chat.tests.factories import (
    ALICE,
    BOB,
    CAROL,
    KAITO,
    KAITO_PERSONA,
    T0,
    TOMORI,
    document,
    histories,
    image,
    message,
    sf,
    turn_input,
)

RAW_SNOWFLAKE = re.compile(r"\b\d{17,20}\b")
KEY = re.compile(r"\b(?:ref|media)_\d+\b")


@dataclass
class CountingCounter:
    """The real tokenizer, recording how many texts it counted."""

    name: str = "o200k_base"
    calls: list[str] = field(default_factory=list)

    def count(self, text: str) -> int:
        self.calls.append(text)
        return O200kTokenCounter().count(text)


def test_the_whole_prompt_in_order():
    persona = PersonaProfile(
        name="Tomori",
        is_main=True,
        system_prompt="You are {char}, talking with {user}.",
        sample_dialogue=(
            SampleMessage(Role.USER, "{user}: hi"),
            SampleMessage(Role.ASSISTANT, "{char}: hey!"),
        ),
        context_note=ContextNote("Keep it short.", 1),
        prefill="Well,",
    )
    history = [
        message(1, "morning all", author=BOB),
        message(2, "morning!", author=TOMORI, minutes=1),
        message(3, "Tomori, what's this?", minutes=2, attachments=(document(50),)),
    ]

    context = build_turn_context(
        turn_input(
            history,
            persona=persona,
            memories=("About Alice: likes tea",),
            short_term_memory_text="Morning greetings.",
        )
    )

    assert [(item.tag, item.role, item.text) for item in context.items] == [
        (ItemTag.SYSTEM_PROMPT, Role.SYSTEM, "You are Tomori, talking with Alice."),
        (
            ItemTag.SHORT_TERM_MEMORY,
            Role.SYSTEM,
            "Short-term memory of this conversation:\nMorning greetings.",
        ),
        (ItemTag.SAMPLE_DIALOGUE, Role.USER, "Alice: hi"),
        (ItemTag.SAMPLE_DIALOGUE, Role.ASSISTANT, "Tomori: hey!"),
        (ItemTag.DIALOGUE_HISTORY, Role.USER, "Bob: [ref_1] morning all"),
        (ItemTag.DIALOGUE_HISTORY, Role.ASSISTANT, "Tomori: [ref_2] morning!"),
        (
            ItemTag.MEMORY,
            Role.USER,
            "[System: Things you remember that may bear on this conversation:\n"
            "- About Alice: likes tea]",
        ),
        (ItemTag.CONTEXT_NOTE_INJECTION, Role.USER, "[System: Keep it short.]"),
        (
            ItemTag.DIALOGUE_HISTORY,
            Role.USER,
            "Alice: [ref_3] Tomori, what's this? "
            "[System: notes.txt is attached as media_1. Call read_file with media_1 to read it.]",
        ),
        (
            ItemTag.TAIL_DIRECTIVE,
            Role.USER,
            "[System: Write only Tomori's next message. Do not write lines for anyone else, do "
            "not start with a name label, and do not write ref_ or media_ tags.]",
        ),
    ]
    assert context.prefill == "Well,"
    assert context.tools == ("read_file",)
    assert context.cacheable_prefix_end == 0  # the system prompt names the turn's user
    assert dict(context.message_ids) == {
        "ref_1": sf(1),
        "ref_2": sf(2),
        "ref_3": sf(3),
        "media_1": sf(50),
    }
    assert [p.name for p in context.participants.participants] == ["Bob", "Tomori", "Alice"]
    assert context.participants.addressed_personas == ("Tomori",)
    assert all(item.tokens > 0 for item in context.items)
    assert context.total_tokens == context.truncation.tokens_after
    assert context.token_counter == "o200k_base"
    assert context.warnings == ()


def test_macros_name_the_main_persona_as_bot():
    persona = PersonaProfile(name="Kaito", system_prompt="{char} works with {bot}.")

    context = build_turn_context(turn_input([message(1)], persona=persona))

    assert context.items[0].text == "Kaito works with Tomori."


def test_a_queued_turn_ends_at_its_own_trigger_and_gets_guidance():
    history = [
        message(1, "Tomori, first question"),
        message(2, "Tomori, second question", author=BOB, minutes=1),
        message(3, "chatter", author=CAROL, minutes=2),
        message(4, "Tomori, third question", author=CAROL, minutes=3),
    ]

    context = build_turn_context(
        turn_input(
            history,
            trigger_id=sf(2),
            is_queued_turn=True,
            later_queued_trigger_ids=frozenset({sf(4)}),
            persona=PersonaProfile(name="Tomori", deliberate_tool_mode=False),
        )
    )

    dialogue = [item for item in context.items if item.tag is ItemTag.DIALOGUE_HISTORY]
    assert [item.source_ids for item in dialogue] == [(sf(1),), (sf(2),)]
    assert context.items[-2].text == (
        "[System: You are answering an earlier message: ref_2 from Bob. Answer that message "
        "specifically; 1 newer message(s) waiting will each be answered in their own turn.]"
    )
    assert "reply_to_message" not in context.tools
    assert "read_file" in context.tools


def test_an_invisible_trigger_is_recorded_as_a_warning():
    history = [message(1, "hi", author=BOB), message(2, "secret")]

    context = build_turn_context(
        turn_input(
            history,
            persona=PersonaProfile(name="Tomori", system_prompt="Talking to {user}."),
            privacy={ALICE.id: PrivacyLevel.FULL},
        )
    )

    assert context.items[0].text == "Talking to someone."
    assert context.warnings == ("the triggering message is not visible to this persona",)
    assert all("secret" not in item.text for item in context.items)


def test_blocks_and_impersonation_apply_to_this_persona_only():
    history = [message(1, "spam", author=BOB), message(2, "hi", author=CAROL), message(3, "hey")]
    blocks = (UserBlock("Kaito", BOB.id), UserBlock("Tomori", CAROL.id))

    as_tomori = build_turn_context(turn_input(history, blocks=blocks))
    as_kaito = build_turn_context(
        turn_input(history, blocks=blocks, persona=KAITO_PERSONA, impersonated_user_id=CAROL.id)
    )

    def dialogue(context):
        return [
            (item.role, item.text) for item in context.items if item.tag is ItemTag.DIALOGUE_HISTORY
        ]

    assert dialogue(as_tomori) == [
        (Role.USER, "Bob: [ref_1] spam"),
        (Role.USER, "[System: 1 message(s) from a user you have blocked are hidden.]"),
        (Role.USER, "Alice: [ref_2] hey"),
    ]
    assert dialogue(as_kaito) == [
        (Role.USER, "[System: 1 message(s) from a user you have blocked are hidden.]"),
        (Role.ASSISTANT, "Carol: [ref_1] hi"),
        (Role.USER, "Alice: [ref_2] hey"),
    ]


@pytest.mark.parametrize(
    ("fetch_limit", "shown_images"),
    [(20, ["media_2"]), ("not a number", ["media_1", "media_2"]), (500, ["media_1", "media_2"])],
)
def test_the_fetch_limit_is_normalized_and_caps_the_media_window(fetch_limit, shown_images):
    history = [
        message(1, "", attachments=(image(101, "old.png"),)),
        *[message(n, f"text {n}", author=BOB, minutes=n) for n in range(2, 25)],
        message(25, "", minutes=30, attachments=(image(125, "new.png"),)),
    ]

    context = build_turn_context(turn_input(history, fetch_limit=fetch_limit, media_window=80))

    assert [m.key for item in context.items for m in item.media] == shown_images


def test_the_budget_removes_the_oldest_stride_batches():
    history = [
        message(n, f"message number {n} " * 5, author=BOB if n % 2 else ALICE, minutes=n)
        for n in range(1, 41)
    ]
    persona = PersonaProfile(
        name="Tomori",
        context_note=ContextNote("Be brief.", 3),
        model=ModelSettings(context_window=1000, max_output_tokens=200),
    )

    context = build_turn_context(turn_input(history, persona=persona, fetch_limit=20))

    report = context.truncation
    assert report.budget == 720
    assert report.tokens_before > 720 >= report.tokens_after == context.total_tokens
    assert report.removed_entries % 6 == 0
    assert report.removed_message_ids == tuple(sf(n) for n in range(1, report.removed_entries + 1))
    assert [item.tag for item in context.items[-5:]] == [
        ItemTag.CONTEXT_NOTE_INJECTION,
        ItemTag.DIALOGUE_HISTORY,
        ItemTag.DIALOGUE_HISTORY,
        ItemTag.DIALOGUE_HISTORY,
        ItemTag.TAIL_DIRECTIVE,
    ]


def warmed(turn, previous):
    """``turn`` with the caches ``previous`` left for the channel's next turn."""
    return replace(turn, previous=previous)


def test_a_warm_build_counts_nothing_and_matches_the_cold_one():
    history = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 30)]
    counter = CountingCounter()
    turn = turn_input(history, token_counter=counter)

    cold = build_turn_context(turn)
    cold_calls = len(counter.calls)
    warm = build_turn_context(warmed(turn, cold))

    assert cold_calls == len(cold.items)
    assert len(counter.calls) == cold_calls
    assert warm == cold


def test_the_next_turn_counts_only_what_changed_and_matches_a_cold_build():
    history = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 30)]
    counter = CountingCounter()
    first = build_turn_context(turn_input(history, token_counter=counter))
    counter.calls.clear()
    next_turn = turn_input([*history, message(30, "new", author=CAROL)], token_counter=counter)

    warm = build_turn_context(warmed(next_turn, first))

    assert counter.calls == ["Carol: [ref_30] new"]
    assert warm == build_turn_context(next_turn)


def test_counts_from_another_tokenizer_are_not_reused():
    history = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 10)]
    first = build_turn_context(turn_input(history, token_counter=CountingCounter()))
    other = CountingCounter(name="another tokenizer")

    warm = build_turn_context(warmed(turn_input(history, token_counter=other), first))

    assert len(other.calls) == len({item.text for item in warm.items})
    assert warm.token_counter == "another tokenizer"


def test_the_next_turn_keeps_the_previous_turns_items_for_unchanged_entries():
    history = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 30)]
    first = build_turn_context(turn_input(history))
    next_turn = turn_input([*history, message(30, "new", author=CAROL)])

    warm = build_turn_context(warmed(next_turn, first))

    def dialogue(context):
        return [item for item in context.items if item.tag is ItemTag.DIALOGUE_HISTORY]

    assert all(a is b for a, b in zip(dialogue(first), dialogue(warm)[:-1], strict=True))
    assert warm == build_turn_context(next_turn)


def item(tag: ItemTag) -> ContextItem:
    return ContextItem(tag, Role.USER, tag.value)


S, H, N, D, T = (
    ItemTag.SYSTEM_PROMPT,
    ItemTag.DIALOGUE_HISTORY,
    ItemTag.CONTEXT_NOTE_INJECTION,
    ItemTag.DATE_SPACER,
    ItemTag.TAIL_DIRECTIVE,
)


@pytest.mark.parametrize(
    ("tags", "end"),
    [
        ([S, H, H, H, T], 3),
        ([S, H, N, H, H, T], 2),
        ([S, H, H, D, H, T], 4),
        ([S, H, H, H, N, T], 3),
        ([S, T], 1),
        ([S], 1),
        ([], 0),
    ],
)
def test_cacheable_prefix_ends_at_the_first_note_or_the_newest_entry(tags, end):
    assert cacheable_prefix_end([item(tag) for tag in tags]) == end


@st.composite
def turns(draw: st.DrawFn):
    history = draw(histories())
    return turn_input(
        history,
        timezone=draw(st.sampled_from(["UTC", "Asia/Tokyo", "America/Los_Angeles"])),
        reply_targets={m.id: m for m in history},
        privacy={CAROL.id: PrivacyLevel.FULL},
        blocks=(UserBlock("Tomori", KAITO.id),),
        channel_note=ContextNote(f"note for <@{BOB.id}>", draw(st.integers(0, 5))),
        now=T0 + timedelta(days=3),
    )


@given(turns())
def test_same_turn_builds_byte_identical_prompts(turn):
    assert build_turn_context(turn) == build_turn_context(turn)


@given(turns())
def test_no_raw_snowflake_and_every_key_resolves(turn):
    context = build_turn_context(turn)

    assert not RAW_SNOWFLAKE.search("\n".join(line for _item, line in completion_lines(context)))
    for built in context.items:
        assert not RAW_SNOWFLAKE.search(built.text)
        for key in KEY.findall(built.text):
            assert key in context.message_ids


@pytest.mark.parametrize(("days_away", "noted"), [(None, False), (1, False), (3, True), (30, True)])
def test_a_reunion_note_after_days_away_names_the_absolute_day(days_away, noted):
    now = T0 + timedelta(days=40)
    last_seen = None if days_away is None else now - timedelta(days=days_away)
    turn = turn_input([message(1, "tomori, hi", at=now)], now=now, reunion_last_seen=last_seen)

    notes = [
        item.text
        for item in build_turn_context(turn).items
        if item.tag is ItemTag.CONTEXT_NOTE_INJECTION and "is back" in item.text
    ]

    if noted:
        day = date_label(last_seen.date())
        assert notes == [f"[System: Alice is back; the last time they talked with you was {day}.]"]
    else:
        assert notes == []


@pytest.mark.parametrize(
    ("system_prompt", "sample", "end"),
    [
        ("You are {char}.", "Hi!", None),
        ("You are {char}; {user} is talking to you.", "Hi!", 0),
        ("You are {char}.", "Hi {user}!", 1),
        ("You are {char}. {{if tool:read_file}}Ask {user}.{{/if}}", "Hi!", 0),
    ],
)
def test_configuration_naming_the_user_ends_the_cacheable_prefix(system_prompt, sample, end):
    persona = PersonaProfile(
        name="Tomori",
        is_main=True,
        system_prompt=system_prompt,
        sample_dialogue=(SampleMessage(Role.ASSISTANT, sample),),
    )
    history = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 9)]

    context = build_turn_context(turn_input(history, persona=persona))

    newest_entry = max(
        n for n, item in enumerate(context.items) if item.tag is ItemTag.DIALOGUE_HISTORY
    )
    assert context.cacheable_prefix_end == (newest_entry if end is None else end)


def test_the_offered_tools_definitions_come_out_of_the_budget():
    history = [message(1, "tomori, what is in this file?", attachments=(document(2),))]
    persona = PersonaProfile(
        name="Tomori", model=ModelSettings(context_window=1000, max_output_tokens=200)
    )
    schemas = {"read_file": 120, "analyze_image": 500}

    context = build_turn_context(turn_input(history, persona=persona, tool_schema_tokens=schemas))

    assert context.tools == ("read_file",)
    assert context.truncation.budget == 720 - 120  # analyze_image is not offered: free


@given(turns(), st.data())
def test_each_warm_build_of_a_moving_window_equals_a_cold_one(turn, data):
    """A channel's turns, each warmed from the one before, as its window grows by new
    messages and its start moves on: every warm build is the cold build of the same turn
    (simplification, participants, rendering, counting and notes all resume correctly)."""
    history = turn.history
    start, end = 0, data.draw(st.integers(1, len(history)))
    previous = None
    while end <= len(history):
        window = history[start:end]
        current = replace(turn, history=window, trigger_id=window[-1].id, previous=previous)
        warm = build_turn_context(current)
        assert warm == build_turn_context(replace(current, previous=None))
        previous = warm
        end += data.draw(st.integers(1, 3))
        if data.draw(st.booleans()):
            start = min(end - 1, start + data.draw(st.integers(0, 3)))
