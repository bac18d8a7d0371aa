"""The dialogue history contributor: roles, labels, macros, humanizer, media, spacers, notes,
and a warm turn's reuse of the previous turn's rendered entries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.dialogue import RenderedDialogue, humanize_stably, render_dialogue
from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.macros import MacroContext
from chat.pipeline.notes import context_note_items, place_notes
from chat.pipeline.types import Author, CardKind, ContextNote, Embed, PersonaProfile, Role
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


def render_entries(
    history,
    *,
    persona: PersonaProfile = TOMORI_PERSONA,
    tools: frozenset[str] = frozenset(),
    timezone=UTC,
    impersonated_user_id=None,
    media_window=80,
    previous: RenderedDialogue | None = None,
) -> RenderedDialogue:
    return render_dialogue(
        history.entries,
        persona=persona,
        impersonated_user_id=impersonated_user_id,
        macros=MacroContext(bot="Tomori", char=persona.name, user="Alice", tools=tools),
        timezone=timezone,
        media_window=media_window,
        fetch_limit=80,
        previous=previous,
    )


def render(
    messages,
    *,
    persona: PersonaProfile = TOMORI_PERSONA,
    tools: frozenset[str] = frozenset(),
    timezone=UTC,
    notes=(),
    impersonated_user_id=None,
    media_window=80,
    **simplify_overrides,
) -> tuple[ContextItem, ...]:
    """The dialogue with its notes placed, as a turn's prompt holds it."""
    dialogue = render_entries(
        simplify(messages, timezone=timezone, **simplify_overrides),
        persona=persona,
        tools=tools,
        timezone=timezone,
        impersonated_user_id=impersonated_user_id,
        media_window=media_window,
    )
    macros = MacroContext(bot="Tomori", char=persona.name, user="Alice", tools=tools)
    return place_notes(dialogue.items, context_note_items(notes, macros))


def texts(items) -> list[str]:
    return [item.text for item in items]


def completions(messages, *, timezone=UTC, **options) -> list[str]:
    """Each entry's completion projection, in order."""
    simplify_options = {
        k: options.pop(k) for k in ("blocked_user_ids", "reply_targets") if k in options
    }
    dialogue = render_entries(
        simplify(messages, timezone=timezone, **simplify_options), timezone=timezone, **options
    )
    by_source = dialogue.completion_texts()
    return [by_source[rendered.item.source_ids] for rendered in dialogue.entries]


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


def test_macros_typed_by_a_user_stay_literal():
    body = "draft: {user} meets {bot} as {char} {{if tool:read_file}}x{{/if}}"

    (item,) = render([message(1, body)], tools=frozenset({"read_file"}))

    assert item.text == f"Alice: [ref_1] {body}"


def test_author_labels_resolve_macros():
    fan = Author(id=sf(9300), display_name="{char}'s fan")

    (item,) = render([message(1, "hi", author=fan)])

    assert item.text == "Tomori's fan: [ref_1] hi"


def test_humanizer_touches_only_the_personas_own_words():
    persona = PersonaProfile(name="Tomori", force_lowercase=True, punctuation_splits=True)

    items = render(
        [message(1, "Is it OK; Tomori?"), message(2, "Sure; It Is", author=TOMORI)],
        persona=persona,
    )

    assert texts(items) == ["Alice: [ref_1] Is it OK; Tomori?", "Tomori: [ref_2] sure. it is"]
    assert completions(
        [message(1, "Is it OK; Tomori?"), message(2, "Sure; It Is", author=TOMORI)],
        persona=persona,
    ) == ["Alice: Is it OK; Tomori?", "Tomori: sure. it is"]


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

    assert [(item.role, item.text) for item in items] == [
        (Role.USER, "[System: 2 message(s) from a user you have blocked are hidden.]"),
        (Role.USER, "[System: Memory saved]"),
    ]
    assert completions(messages, blocked_user_ids=frozenset({BOB.id})) == ["", "Memory saved"]


@given(histories())
def test_no_raw_snowflake_reaches_rendered_dialogue(messages):
    items = render(messages, timezone=TOKYO, reply_targets={m.id: m for m in messages})

    for text in [
        *texts(items),
        *completions(messages, timezone=TOKYO, reply_targets={m.id: m for m in messages}),
    ]:
        assert not RAW_SNOWFLAKE.search(text)


@given(histories())
def test_same_history_renders_byte_identically(messages):
    assert render(messages, timezone=TOKYO) == render(messages, timezone=TOKYO)


def test_a_warm_render_reuses_every_unchanged_entry_and_renders_only_the_new_one():
    earlier = [message(n, f"line {n}", author=BOB if n % 2 else ALICE) for n in range(1, 9)]
    first_history = simplify(earlier)
    first = render_entries(first_history)
    later = [*earlier, message(9, "a new day", minutes=2 * 24 * 60)]

    warm = render_entries(simplify(later, resume_from=first_history), previous=first)

    assert warm == render_entries(simplify(later))
    assert [w.item is f.item for w, f in zip(warm.entries, first.entries, strict=False)] == [
        True
    ] * len(first.entries)
    assert warm.entries[-1].spacer is not None  # the new entry, rendered with its spacer


def test_an_entry_whose_media_changed_is_rendered_again():
    images = [message(n, "", attachments=(image(100 + n, f"{n}.png"),)) for n in range(1, 4)]
    first_history = simplify(images)
    first = render_entries(first_history)
    later = [*images, message(4, "", author=BOB, attachments=(image(104, "4.png"),))]

    warm = render_entries(simplify(later, resume_from=first_history), previous=first)

    assert warm == render_entries(simplify(later))
    assert warm.entries[0].item is not first.entries[0].item  # left the rendered-image limit
    assert "omitted due to rendered-image limit" in warm.entries[0].item.text
    assert warm.entries[1].item is first.entries[1].item


@pytest.mark.parametrize(
    "change",
    [
        {"persona": PersonaProfile(name="Kaito")},
        {"tools": frozenset({"read_file"})},
        {"timezone": TOKYO},
        {"impersonated_user_id": BOB.id},
    ],
    ids=["persona", "tools", "timezone", "impersonation"],
)
def test_a_turn_wide_change_renders_every_entry_again(change):
    messages = [
        message(n, f"line {n}", author=BOB, minutes=600 * n, attachments=(document(200 + n),))
        for n in range(1, 5)
    ]
    history = simplify(messages, timezone=change.get("timezone", UTC))
    first = render_entries(history)

    warm = render_entries(history, previous=first, **change)

    assert warm == render_entries(history, **change)
    assert not any(w.item is f.item for w, f in zip(warm.entries, first.entries, strict=True))


@given(histories(), st.data())
def test_a_warm_render_equals_a_cold_one(messages, data):
    split = data.draw(st.integers(min_value=0, max_value=len(messages)))
    first_history = simplify(messages[:split], timezone=TOKYO)
    first = render_entries(first_history, timezone=TOKYO)
    history = simplify(messages, timezone=TOKYO, resume_from=first_history)

    warm = render_entries(history, timezone=TOKYO, previous=first)

    assert warm == render_entries(history, timezone=TOKYO)


@pytest.mark.parametrize(
    ("tools", "spacer"),
    [
        (frozenset(), "[System: New day: Sunday, July 12, 2026]"),
        (
            frozenset({"reveal_message_metadata"}),
            "[System: New day: Sunday, July 12, 2026. Call reveal_message_metadata with a ref_N "
            "for a message's exact time.]",
        ),
    ],
)
def test_the_date_spacer_points_at_reveal_message_metadata_only_when_offered(tools, spacer):
    messages = [message(1, "one"), message(2, "two", author=BOB, at=T0 + DAY)]

    items = render(messages, tools=tools)

    assert [item.text for item in items if item.tag is ItemTag.DATE_SPACER] == [spacer]
