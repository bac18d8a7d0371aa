"""The dialogue history contributor: roles, labels, macros, humanizer, media, spacers, notes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given

from chat.pipeline.dialogue import append_dialogue_history, humanize_stably
from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.macros import MacroContext
from chat.pipeline.types import Author, CardKind, ContextNote, Embed, PersonaSpec, Role
from chat.tests.factories import (
    ALICE,
    BOB,
    KAITO,
    T0,
    TOMORI,
    TOMORI_PERSONA,
    document,
    gif,
    histories,
    image,
    message,
    sf,
    simplify,
)

TOKYO = ZoneInfo("Asia/Tokyo")
RAW_SNOWFLAKE = re.compile(r"\b\d{17,20}\b")
DAY = timedelta(days=1)


def render(
    messages,
    *,
    persona: PersonaSpec = TOMORI_PERSONA,
    tools: frozenset[str] = frozenset(),
    timezone=UTC,
    notes=(),
    impersonated_user_id=None,
    media_window=80,
    **simplify_overrides,
) -> tuple[ContextItem, ...]:
    history = simplify(messages, timezone=timezone, **simplify_overrides)
    return append_dialogue_history(
        (),
        history.entries,
        persona=persona,
        impersonated_user_id=impersonated_user_id,
        macros=MacroContext(bot="Tomori", char=persona.name, user="Alice", tools=tools),
        timezone=timezone,
        media_window=media_window,
        fetch_limit=80,
        notes=notes,
    )


def texts(items) -> list[str]:
    return [item.text for item in items]


def test_roles_and_name_labels():
    items = render(
        [
            message(1, "hi all"),
            message(2, "hello", author=TOMORI),
            message(3, "yo", author=KAITO),
            message(4, "me too", author=BOB),
        ],
        impersonated_user_id=BOB.id,
    )

    assert [(item.role, item.text) for item in items] == [
        (Role.USER, "Alice: [ref_1] hi all"),
        (Role.ASSISTANT, "Tomori: [ref_2] hello"),
        (Role.USER, "Kaito: [ref_3] yo"),
        (Role.ASSISTANT, "Bob: [ref_4] me too"),
    ]
    assert [item.source_ids for item in items] == [(sf(1),), (sf(2),), (sf(3),), (sf(4),)]
    assert {item.tag for item in items} == {ItemTag.DIALOGUE_HISTORY}


def test_dialogue_follows_the_items_it_is_given():
    first = ContextItem(ItemTag.SYSTEM_PROMPT, Role.SYSTEM, "You are Tomori.")

    items = append_dialogue_history(
        (first,),
        simplify([message(1)]).entries,
        persona=TOMORI_PERSONA,
        impersonated_user_id=None,
        macros=MacroContext(bot="Tomori", char="Tomori", user="Alice"),
        timezone=UTC,
        media_window=80,
        fetch_limit=80,
        notes=(),
    )

    assert texts(items) == ["You are Tomori.", "Alice: [ref_1] hello"]


def test_macros_typed_by_a_user_stay_literal():
    body = "draft: {user} meets {bot} as {char} {{if tool:read_file}}x{{/if}}"

    (item,) = render([message(1, body)], tools=frozenset({"read_file"}))

    assert item.text == f"Alice: [ref_1] {body}"


def test_author_labels_resolve_macros():
    fan = Author(id=sf(9300), display_name="{char}'s fan")

    (item,) = render([message(1, "hi", author=fan)])

    assert item.text == "Tomori's fan: [ref_1] hi"


def test_humanizer_touches_only_the_personas_own_words():
    persona = PersonaSpec(name="Tomori", force_lowercase=True, punctuation_splits=True)

    items = render(
        [message(1, "Is it OK; Tomori?"), message(2, "Sure; It Is", author=TOMORI)],
        persona=persona,
    )

    assert texts(items) == ["Alice: [ref_1] Is it OK; Tomori?", "Tomori: [ref_2] sure. it is"]
    assert items[1].completion_text == "Tomori: sure. it is"


@pytest.mark.parametrize(
    ("text", "lowercase", "splits", "expected"),
    [
        ("Hi; There", False, False, "Hi; There"),
        ("Hi; There", True, False, "hi; there"),
        ("Hi; There", False, True, "Hi. There"),
        ("a;b stays; c", False, True, "a;b stays. c"),
        ("Hi; There", True, True, "hi. there"),
    ],
)
def test_humanize_stably(text, lowercase, splits, expected):
    assert humanize_stably(text, force_lowercase=lowercase, punctuation_splits=splits) == expected


@pytest.mark.parametrize(
    ("tools", "filename", "expected_hint"),
    [
        (
            frozenset({"read_file"}),
            "notes.txt",
            "[System: notes.txt is attached as media_1. Call read_file with media_1 to read it.]",
        ),
        (
            frozenset(),
            "notes.txt",
            "[System: notes.txt is attached as media_1. "
            "Its contents are not available in this turn.]",
        ),
        (
            frozenset({"x"}),
            "{{if tool:x}}evil{{/if}}.txt",
            "[System: {{if tool:x}}evil{{/if}}.txt is attached as media_1. "
            "Its contents are not available in this turn.]",
        ),
        (
            frozenset(),
            "{media_id}{user}.txt",
            "[System: {media_id}{user}.txt is attached as media_1. "
            "Its contents are not available in this turn.]",
        ),
    ],
)
def test_document_hints_follow_the_tool_list_and_never_parse_filenames(
    tools, filename, expected_hint
):
    (item,) = render([message(1, "read", attachments=(document(50, filename),))], tools=tools)

    assert item.text == f"Alice: [ref_1] read {expected_hint}"


TOKYO_MIDNIGHT = datetime(2026, 7, 11, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("times", "timezone", "expected"),
    [
        ([T0, T0 + timedelta(hours=5)], UTC, ["a", "b"]),
        (
            [T0, T0 + DAY],
            UTC,
            ["a", "[System: New day: Sunday, July 12, 2026]", "b"],
        ),
        (
            [TOKYO_MIDNIGHT - timedelta(minutes=1), TOKYO_MIDNIGHT + timedelta(minutes=1)],
            TOKYO,
            ["a", "[System: New day: Sunday, July 12, 2026]", "b"],
        ),
        (
            [TOKYO_MIDNIGHT - timedelta(minutes=1), TOKYO_MIDNIGHT + timedelta(minutes=1)],
            UTC,
            ["a", "b"],
        ),
        (
            [T0 - DAY, T0, T0 + timedelta(minutes=1)],
            UTC,
            ["a", "[System: New day: Saturday, July 11, 2026]", "b", "c"],
        ),
        (
            [T0, T0 + 3 * DAY, T0 + 33 * DAY],
            UTC,
            [
                "a",
                "[System: New day: Tuesday, July 14, 2026]",
                "b",
                "[System: New day: Thursday, August 13, 2026]",
                "c",
            ],
        ),
    ],
)
def test_date_spacers_only_on_day_changes(times, timezone, expected):
    authors = (ALICE, BOB, ALICE)
    messages = [message(n, "", author=authors[n - 1], at=at) for n, at in enumerate(times, start=1)]

    items = render(messages, timezone=timezone)

    labels = iter("abc")
    assert [
        item.text if item.tag is ItemTag.DATE_SPACER else next(labels) for item in items
    ] == expected


def test_notes_at_depth_land_before_the_right_entry_after_its_spacer():
    messages = [
        message(1, "one"),
        message(2, "two", author=BOB),
        message(3, "three", at=T0 + DAY),
        message(4, "four", author=BOB, at=T0 + DAY),
    ]
    notes = (ContextNote("Stay calm, {char}.", 2), ContextNote("End.", 0))

    items = render(messages, notes=notes)

    assert texts(items) == [
        "Alice: [ref_1] one",
        "Bob: [ref_2] two",
        "[System: New day: Sunday, July 12, 2026]",
        "[System: Stay calm, Tomori.]",
        "Alice: [ref_3] three",
        "Bob: [ref_4] four",
        "[System: End.]",
    ]


def test_images_render_as_media_keys_with_limit_and_repeat_notices():
    messages = [
        message(1, "", attachments=(image(101, "a.png"),)),
        message(2, "", author=BOB, attachments=(image(102, "b.png"),)),
        message(3, "", attachments=(image(103, "c.png"), gif(104))),
        message(4, "", author=BOB, attachments=(image(105, "d.png"),)),
        message(5, "again", attachments=(image(106, "b.png", url=image(102, "b.png").url),)),
    ]

    items = render(messages)

    assert texts(items) == [
        "Alice: [ref_1] [System: 1 image(s) omitted due to rendered-image limit]",
        "Bob: [ref_2] [System: 1 image(s) omitted here; shown again later]",
        "Alice: [ref_3] [image media_3: c.png] [GIF media_4: dance.gif]",
        "Bob: [ref_4] [image media_5: d.png]",
        "Alice: [ref_5] again [image media_6: b.png]",
    ]
    assert [[m.key for m in item.media] for item in items] == [
        [],
        [],
        ["media_3", "media_4"],
        ["media_5"],
        ["media_6"],
    ]


def test_blocked_entries_and_notices_render_without_a_speaker():
    notice = Embed(title="Memory saved", kind=CardKind.SYSTEM_NOTICE)
    messages = [
        message(1, "a", author=BOB),
        message(2, "b", author=BOB),
        message(3, "", author=TOMORI, embeds=(notice,)),
    ]

    items = render(messages, blocked_user_ids=frozenset({BOB.id}))

    assert [(item.role, item.text, item.completion_text) for item in items] == [
        (Role.USER, "[System: 2 message(s) from a user you have blocked are hidden.]", ""),
        (Role.USER, "[System: Memory saved]", "Memory saved"),
    ]


@given(histories())
def test_no_raw_snowflake_reaches_rendered_dialogue(messages):
    items = render(messages, timezone=TOKYO, reply_targets={m.id: m for m in messages})

    for item in items:
        assert not RAW_SNOWFLAKE.search(item.text)
        assert not RAW_SNOWFLAKE.search(item.completion_text)


@given(histories())
def test_same_history_renders_byte_identically(messages):
    assert render(messages, timezone=TOKYO) == render(messages, timezone=TOKYO)
