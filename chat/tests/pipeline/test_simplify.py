"""Simplified history: merging, privacy, blocks, notices, replies, forwards, proxies, ids."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.simplify import (
    QUOTE_LIMIT,
    EntryKind,
    blocked_user_ids,
    build_simplified_history,
    hidden_user_ids,
)
from chat.pipeline.types import (
    Attachment,
    BlockType,
    CardKind,
    ComponentContainer,
    Embed,
    EmbedField,
    ForwardedSnapshot,
    MessageReference,
    NameDirectory,
    PrivacyLevel,
    ProxyIdentity,
    Reaction,
    ReferenceKind,
    Sticker,
    UserBlock,
)
from chat.tests.factories import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL_ID,
    KAITO,
    T0,
    TOMORI,
    document,
    histories,
    image,
    message,
    reply_to,
    sf,
    simplify,
)

TOKYO = ZoneInfo("Asia/Tokyo")
RAW_SNOWFLAKE = re.compile(r"\b\d{17,20}\b")
TOKYO_MIDNIGHT = datetime(2026, 7, 11, 15, 0, tzinfo=UTC)
"""00:00 on Sunday, July 12 in Tokyo; still Saturday in UTC."""


def entry_ids(history) -> list[list[int]]:
    return [[message_id - sf(0) for message_id in entry.message_ids] for entry in history.entries]


@pytest.mark.parametrize(
    ("case", "messages", "timezone", "expected"),
    [
        (
            "two texts, same author, same day",
            [message(1, "hi"), message(2, "there", minutes=1)],
            UTC,
            [[1, 2]],
        ),
        (
            "text then image",
            [message(1, "look"), message(2, "", minutes=1, attachments=(image(50),))],
            UTC,
            [[1], [2]],
        ),
        (
            "image then text",
            [message(1, "", attachments=(image(50),)), message(2, "cute", minutes=1)],
            UTC,
            [[1], [2]],
        ),
        (
            "text then file",
            [message(1, "read"), message(2, "", minutes=1, attachments=(document(50),))],
            UTC,
            [[1], [2]],
        ),
        (
            "across midnight in Tokyo",
            [
                message(1, "late", at=TOKYO_MIDNIGHT - timedelta(minutes=1)),
                message(2, "early", at=TOKYO_MIDNIGHT + timedelta(minutes=1)),
            ],
            TOKYO,
            [[1], [2]],
        ),
        (
            "the same two minutes in UTC",
            [
                message(1, "late", at=TOKYO_MIDNIGHT - timedelta(minutes=1)),
                message(2, "early", at=TOKYO_MIDNIGHT + timedelta(minutes=1)),
            ],
            UTC,
            [[1, 2]],
        ),
        (
            "different authors",
            [message(1, "a"), message(2, "b", author=BOB), message(3, "c", author=BOB)],
            UTC,
            [[1], [2, 3]],
        ),
        (
            "a reply stays its own entry",
            [message(1, "a"), message(2, "b", reference=reply_to(1))],
            UTC,
            [[1], [2]],
        ),
        (
            "a sticker stays its own entry",
            [message(1, "a"), message(2, "", stickers=(Sticker(sf(60), "wave"),))],
            UTC,
            [[1], [2]],
        ),
        (
            "reactions do not stop merging",
            [message(1, "a", reactions=(Reaction("👍", 2),)), message(2, "b")],
            UTC,
            [[1, 2]],
        ),
        (
            "three in a row, then someone else, then back",
            [message(1), message(2), message(3), message(4, author=BOB), message(5)],
            UTC,
            [[1, 2, 3], [4], [5]],
        ),
    ],
)
def test_same_author_merging(case, messages, timezone, expected):
    assert entry_ids(simplify(messages, timezone=timezone)) == expected


def test_same_account_under_two_shown_names_does_not_merge():
    first = message(1, "a", proxy=ProxyIdentity("abcde", "Ash", host_user_id=ALICE.id))
    second = message(2, "b", proxy=ProxyIdentity("fghij", "Birch", host_user_id=ALICE.id))

    history = simplify([first, second])

    assert [entry.author_name for entry in history.entries] == ["Ash", "Birch"]


def test_merged_entry_keeps_ids_and_timestamps_per_part():
    history = simplify([message(1, "hi"), message(2, "there", minutes=3)])

    (entry,) = history.entries
    assert [(part.message_id, part.created_at, part.head, part.body) for part in entry.parts] == [
        (sf(1), T0, "[ref_1]", "hi"),
        (sf(2), T0 + timedelta(minutes=3), "[ref_2]", "there"),
    ]
    assert entry.prose == "hi\nthere"


@pytest.mark.parametrize(
    ("privacy", "blacklisted", "expected_authors"),
    [
        ({}, set(), ["Alice", "Bob", "Carol"]),
        ({BOB.id: PrivacyLevel.FULL}, set(), ["Alice", "Carol"]),
        (
            {BOB.id: PrivacyLevel.PARTIAL, CAROL.id: PrivacyLevel.MINIMAL},
            set(),
            ["Alice", "Bob", "Carol"],
        ),
        ({}, {CAROL.id}, ["Alice", "Bob"]),
        ({ALICE.id: PrivacyLevel.FULL}, {CAROL.id}, ["Bob"]),
    ],
)
def test_full_privacy_and_blacklisted_authors_are_dropped(privacy, blacklisted, expected_authors):
    messages = [message(1), message(2, author=BOB), message(3, author=CAROL)]

    history = simplify(messages, hidden_user_ids=hidden_user_ids(privacy, blacklisted))

    assert [entry.author_name for entry in history.entries] == expected_authors
    assert len(history.id_map) == len(expected_authors)


def test_blocked_run_becomes_one_notice():
    messages = [
        message(1, "hello"),
        message(2, "spam", author=BOB),
        message(3, "more spam", author=BOB),
        message(4, "even more", author=BOB),
        message(5, "anyway"),
        message(6, "again", author=BOB),
    ]

    history = simplify(messages, blocked_user_ids=frozenset({BOB.id}))

    assert [(entry.kind, len(entry.parts)) for entry in history.entries] == [
        (EntryKind.MESSAGE, 1),
        (EntryKind.BLOCKED, 3),
        (EntryKind.MESSAGE, 1),
        (EntryKind.BLOCKED, 1),
    ]
    assert history.entries[1].message_ids == (sf(2), sf(3), sf(4))
    assert "spam" not in repr(history.entries)
    assert dict(history.id_map.as_mapping()) == {"ref_1": sf(1), "ref_2": sf(5)}


def test_runs_of_two_blocked_users_stay_apart():
    messages = [message(1, author=BOB), message(2, author=CAROL)]

    history = simplify(messages, blocked_user_ids=frozenset({BOB.id, CAROL.id}))

    assert [entry.message_ids for entry in history.entries] == [(sf(1),), (sf(2),)]


@pytest.mark.parametrize(
    ("block", "hides"),
    [
        (UserBlock("Tomori", BOB.id), True),
        (UserBlock("Tomori", BOB.id, expires_at=T0 + timedelta(seconds=1)), True),
        (UserBlock("Tomori", BOB.id, expires_at=T0), False),
        (UserBlock("Tomori", BOB.id, type=BlockType.MUTE), False),
        (UserBlock("Kaito", BOB.id), False),
    ],
)
def test_only_active_blocks_of_this_persona_hide_history(block, hides):
    assert (BOB.id in blocked_user_ids([block], "Tomori", now=T0)) is hides


def test_reply_to_a_blocked_user_loses_its_quote_and_target():
    messages = [message(1, "secret", author=BOB), message(2, "no way", reference=reply_to(1))]

    history = simplify(messages, blocked_user_ids=frozenset({BOB.id}))

    assert history.entries[1].parts[0].head == "[ref_1]"
    assert "secret" not in repr(history.entries)


def test_proxied_messages_show_the_member_and_answer_to_the_host():
    proxied = message(
        1, "hi", author=KAITO, proxy=ProxyIdentity("abcde", "Ash", host_user_id=BOB.id)
    )

    visible = simplify([proxied])
    hidden = simplify([proxied], hidden_user_ids=frozenset({BOB.id}))
    blocked = simplify([proxied], blocked_user_ids=frozenset({BOB.id}))

    assert (visible.entries[0].author_name, visible.entries[0].proxy_host_id) == ("Ash", BOB.id)
    assert visible.entries[0].persona_name == "Kaito"
    assert hidden.entries == ()
    assert blocked.entries[0].kind is EntryKind.BLOCKED


def test_reply_annotation_registers_the_reply_then_its_target_outside_the_window():
    outside = message(1, "the original question", author=BOB)
    messages = [message(5, "first"), message(6, "answer", author=CAROL, reference=reply_to(1))]

    history = simplify(messages, reply_targets={sf(1): outside})

    assert history.entries[1].parts[0].head == (
        '[ref_2, replying to ref_3 Bob: "the original question"]'
    )
    assert dict(history.id_map.as_mapping()) == {"ref_1": sf(5), "ref_2": sf(6), "ref_3": sf(1)}


def test_reply_to_an_unknown_target_has_no_annotation():
    history = simplify([message(2, "answer", reference=reply_to(1))])

    assert history.entries[0].parts[0].head == "[ref_1]"


def test_reply_quote_is_one_line_and_cut_at_the_limit():
    long_text = "word " * 40 + "\nsecond line"
    messages = [message(1, long_text, author=BOB), message(2, "ok", reference=reply_to(1))]

    head = simplify(messages).entries[1].parts[0].head

    quote = head.split(': "', 1)[1].removesuffix('"]')
    assert len(quote) == QUOTE_LIMIT
    assert quote.endswith("…") and "\n" not in quote


def test_reply_quote_of_a_notice_uses_the_notice_text():
    # A notice shows no ref of its own, so it gets its key when the reply names it.
    notice = message(
        1, "", author=TOMORI, embeds=(Embed(title="Memory saved", kind=CardKind.SYSTEM_NOTICE),)
    )
    messages = [notice, message(2, "thanks", reference=reply_to(1))]

    assert simplify(messages).entries[1].parts[0].head == (
        '[ref_1, replying to ref_2 Tomori: "Memory saved"]'
    )


def test_reply_carries_its_targets_images_and_files_under_the_targets_id():
    target = message(1, "see", author=BOB, attachments=(image(50), document(51)))

    history = simplify(
        [message(2, "what is it", reference=reply_to(1))], reply_targets={sf(1): target}
    )

    (entry,) = history.entries
    assert [(m.key, m.message_id) for m in entry.images] == [("media_1", sf(1))]
    assert [(m.key, m.filename, m.message_id) for m in entry.documents] == [
        ("media_2", "notes.txt", sf(1))
    ]


def test_thread_starter_media_uses_the_starters_id():
    starter = message(1, "new art", author=BOB, attachments=(image(50),))
    reference = MessageReference(sf(1), channel_id=sf(8001), kind=ReferenceKind.THREAD_STARTER)

    history = simplify([message(2, "", reference=reference)], reply_targets={sf(1): starter})

    (entry,) = history.entries
    assert entry.parts[0].head == '[ref_1, thread started from ref_2 Bob: "new art"]'
    assert entry.images[0].message_id == sf(1)


def test_forwarded_snapshot_shows_its_text_and_carries_its_media():
    snapshot = ForwardedSnapshot(content="big news", attachments=(image(50),))
    forward = message(
        2,
        "",
        reference=MessageReference(sf(1), CHANNEL_ID, kind=ReferenceKind.FORWARD),
        snapshots=(snapshot,),
    )

    (entry,) = simplify([forward]).entries

    assert (entry.parts[0].head, entry.parts[0].tail) == (
        "[ref_1, forwarded]",
        '[forwarded: "big news"]',
    )
    assert entry.images[0].message_id == sf(2)


@pytest.mark.parametrize(
    ("cards", "kind", "body", "tail"),
    [
        (
            (Embed(title="Memory saved", kind=CardKind.SYSTEM_NOTICE),),
            EntryKind.NOTICE,
            "Memory saved",
            "",
        ),
        (
            (ComponentContainer(("Persona switched", "to Kaito"), kind=CardKind.SYSTEM_NOTICE),),
            EntryKind.NOTICE,
            "Persona switched — to Kaito",
            "",
        ),
        (
            (ComponentContainer(("Daily quest:", "find a cat")),),
            EntryKind.MESSAGE,
            "Daily quest:\nfind a cat",
            "",
        ),
        (
            (Embed(title="Roll", description="d20 → 17", kind=CardKind.DICE_ROLL),),
            EntryKind.MESSAGE,
            "",
            "[Embed: Roll — d20 → 17]",
        ),
        (
            (Embed(title="Stats", fields=(EmbedField("HP", "12"),), footer="v2"),),
            EntryKind.MESSAGE,
            "",
            "[Embed: Stats — HP: 12 — v2]",
        ),
    ],
)
def test_cards_become_notices_previews_or_nothing(cards, kind, body, tail):
    embeds = tuple(card for card in cards if isinstance(card, Embed))
    containers = tuple(card for card in cards if isinstance(card, ComponentContainer))

    (entry,) = simplify(
        [message(1, "", author=TOMORI, embeds=embeds, containers=containers)]
    ).entries

    assert (entry.kind, entry.parts[0].body, entry.parts[0].tail) == (kind, body, tail)


@pytest.mark.parametrize(
    "card",
    [
        Embed(title="Roll", description="d20 → 17", kind=CardKind.UNSHARED_DICE_ROLL),
        Embed(title="latency 20ms", kind=CardKind.DIAGNOSTIC),
        ComponentContainer(("Debug", "tokens 812"), kind=CardKind.DIAGNOSTIC),
    ],
)
def test_a_message_of_nothing_but_excluded_cards_leaves_no_trace(card):
    embeds = (card,) if isinstance(card, Embed) else ()
    containers = (card,) if isinstance(card, ComponentContainer) else ()
    messages = [
        message(1, "", author=TOMORI, embeds=embeds, containers=containers),
        message(2, "what did it say?", reference=reply_to(1)),
    ]

    history = simplify(messages)

    [entry] = history.entries
    assert entry.parts[0].head == "[ref_1]"  # no quote of the excluded card either
    assert history.id_map.message_key(sf(1)) is None


def test_a_notice_with_words_stays_a_message_with_the_notice_inline():
    notice = Embed(title="Memory saved", kind=CardKind.SYSTEM_NOTICE)

    (entry,) = simplify([message(1, "done!", author=TOMORI, embeds=(notice,))]).entries

    assert (entry.kind, entry.parts[0].tail) == (EntryKind.MESSAGE, "[System: Memory saved]")


def test_tail_lists_stickers_files_and_reactions_without_snowflakes():
    archive = Attachment(id=sf(52), filename="backup.zip", url="https://cdn.example/52")
    (entry,) = simplify(
        [
            message(
                1,
                "",
                stickers=(Sticker(sf(60), "wave"),),
                attachments=(archive,),
                reactions=(Reaction("👍", 3), Reaction(f"<:blob:{sf(61)}>", 1)),
            )
        ]
    ).entries

    assert (
        entry.parts[0].tail
        == "[sticker: wave] [file media_1: backup.zip] [reactions: 👍 3, :blob: 1]"
    )


def test_mentions_become_names_and_hidden_mentions_become_someone():
    history = simplify(
        [message(1, f"<@{BOB.id}> and <@{CAROL.id}>", mention_ids=(BOB.id, CAROL.id))],
        hidden_user_ids=frozenset({CAROL.id}),
    )

    (entry,) = history.entries
    assert entry.parts[0].body == "@Bob and @someone"
    assert entry.mention_ids == (BOB.id,)


@given(histories(), st.data())
def test_resuming_from_a_prefix_equals_a_full_build(messages, data):
    split = data.draw(st.integers(min_value=0, max_value=len(messages)))
    settings = {"timezone": TOKYO, "reply_targets": {m.id: m for m in messages}}

    resumed = simplify(messages, resume_from=simplify(messages[:split], **settings), **settings)

    assert resumed == simplify(messages, **settings)


@pytest.mark.parametrize(
    "change",
    [
        lambda messages: [replace(messages[0], content="edited"), *messages[1:]],
        lambda messages: messages[1:],
    ],
    ids=["edited", "first message deleted"],
)
def test_a_changed_prefix_is_simplified_from_scratch(change):
    messages = [message(1, "one"), message(2, "two", author=BOB), message(3, "three")]
    previous = simplify(messages[:2])

    changed = change(messages)

    assert simplify(changed, resume_from=previous) == simplify(changed)


def test_different_settings_are_simplified_from_scratch():
    messages = [message(1, "one"), message(2, "two", author=BOB)]
    previous = simplify(messages[:1])

    resumed = simplify(messages, resume_from=previous, blocked_user_ids=frozenset({ALICE.id}))

    assert resumed.entries[0].kind is EntryKind.BLOCKED


@given(histories())
def test_same_input_gives_identical_output(messages):
    first, second = simplify(messages, timezone=TOKYO), simplify(messages, timezone=TOKYO)

    assert first.entries == second.entries
    assert list(first.id_map.as_mapping().items()) == list(second.id_map.as_mapping().items())


@given(histories())
def test_no_raw_snowflake_in_any_rendered_part(messages):
    history = simplify(messages, reply_targets={m.id: m for m in messages})

    for entry in history.entries:
        assert not RAW_SNOWFLAKE.search(entry.author_name)
        for part in entry.parts:
            assert not RAW_SNOWFLAKE.search(f"{part.head} {part.body} {part.tail}")
        for media in (*entry.images, *entry.documents):
            assert not RAW_SNOWFLAKE.search(f"{media.key} {media.filename}")


@given(histories())
def test_merging_never_crosses_media(messages):
    by_id = {m.id: m for m in messages}

    for entry in simplify(messages, timezone=TOKYO).entries:
        if len(entry.parts) > 1 and entry.kind is EntryKind.MESSAGE:
            merged = [by_id[message_id] for message_id in entry.message_ids]
            assert not any(m.attachments or m.stickers or m.reference for m in merged)
            assert not (entry.images or entry.documents)
            assert len({m.created_at.astimezone(TOKYO).date() for m in merged}) == 1


def test_a_notice_the_bot_posted_is_nobodys_line() -> None:
    history = simplify(
        [
            message(1, "anon, hi"),
            message(2, "Replying to Alice…", author=TOMORI, is_notice=True),
            message(3, "hi alice", author=TOMORI),
        ]
    )

    assert [entry.prose for entry in history.entries] == ["anon, hi", "hi alice"]
    assert history.id_map.message_key(sf(2)) is None


@pytest.mark.parametrize(
    ("bodies", "expected"),
    [
        ({303: "About Alice: likes tea"}, "Memory saved — About Alice: likes tea"),
        ({}, "Memory saved"),  # the memory was forgotten, or its subject keeps it out
    ],
)
def test_a_minimal_notice_gets_its_body_back(bodies, expected):
    card = Embed(
        title="Memory saved", footer="memory #303", kind=CardKind.MINIMAL_NOTICE, memory_id=303
    )
    messages = [message(1, "", author=TOMORI, embeds=(card,))]

    (entry,) = build_simplified_history(
        messages,
        reply_targets={},
        names=NameDirectory(),
        hidden_user_ids=frozenset(),
        blocked_user_ids=frozenset(),
        timezone=UTC,
        notice_bodies=bodies,
    ).entries

    assert (entry.kind, entry.parts[0].body) == (EntryKind.NOTICE, expected)
