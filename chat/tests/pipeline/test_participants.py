"""Participants of the visible conversation, resolved to names."""

from __future__ import annotations

from chat.pipeline.participants import (
    ParticipantRole,
    participant_note,
    prepare_participant_context,
)
from chat.pipeline.types import Author, PersonaProfile, ProxyIdentity
from chat.tests.factories import (
    ALICE,
    BOB,
    CAROL,
    KAITO_PERSONA,
    NAMES,
    TOMORI,
    TOMORI_PERSONA,
    message,
    sf,
    simplify,
)

MOMO = PersonaProfile(name="Momo", triggers=("momo-chan",))


def participants_of(messages, *, hidden=frozenset(), blocked=frozenset()):
    history = simplify(messages, hidden_user_ids=hidden, blocked_user_ids=blocked)
    return prepare_participant_context(
        history.entries,
        personas=(TOMORI_PERSONA, KAITO_PERSONA, MOMO),
        member_names=NAMES.users,
        hidden_user_ids=hidden,
    )


def test_authors_in_order_of_first_appearance_then_mentioned_users():
    context = participants_of(
        [
            message(1, "hi", author=BOB),
            message(2, "yo", author=TOMORI),
            message(3, f"<@{CAROL.id}> <@{sf(5555)}>", mention_ids=(CAROL.id, sf(5555))),
            message(4, "again", author=BOB),
        ]
    )

    assert [(p.name, p.role, p.persona_name) for p in context.participants] == [
        ("Bob", ParticipantRole.AUTHOR, None),
        ("Tomori", ParticipantRole.AUTHOR, "Tomori"),
        ("Alice", ParticipantRole.AUTHOR, None),
        ("Carol", ParticipantRole.MENTIONED, None),
    ]


def test_hidden_and_blocked_users_are_not_listed():
    context = participants_of(
        [
            message(1, f"hey <@{CAROL.id}>", mention_ids=(CAROL.id,)),
            message(2, "hidden", author=CAROL),
            message(3, "blocked", author=BOB),
        ],
        hidden=frozenset({CAROL.id}),
        blocked=frozenset({BOB.id}),
    )

    assert [p.name for p in context.participants] == ["Alice"]


def test_personas_are_addressed_by_name_alias_or_trigger_as_whole_words():
    context = participants_of(
        [
            message(1, "tomorrow, KAI, you and momo-chan"),
            message(2, "kaito's", author=ALICE),
        ]
    )

    assert context.addressed_personas == ("Kaito", "Momo")


def test_a_mention_of_a_user_who_also_wrote_lists_them_once():
    context = participants_of(
        [message(1, "hi", author=BOB), message(2, f"<@{BOB.id}>", mention_ids=(BOB.id,))]
    )

    assert [p.name for p in context.participants] == ["Bob", "Alice"]


def test_the_note_names_proxied_members_hosts_and_people_mentioned_without_speaking():
    lilya_hook = Author(id=sf(7777), display_name="Lilya", is_bot=True, webhook_id=sf(7777))
    context = participants_of(
        [
            message(1, "hi", author=BOB),
            message(2, "it's me", author=lilya_hook, proxy=ProxyIdentity("l1", "Lilya", ALICE.id)),
            message(3, f"ask <@{CAROL.id}>", author=BOB, mention_ids=(CAROL.id,)),
        ]
    )

    assert participant_note(context) == (
        "Lilya is a proxied member: Alice's account speaks for them. "
        "Mentioned here but not speaking: Carol."
    )


def test_no_note_when_everyone_simply_speaks():
    assert (
        participant_note(participants_of([message(1, "hi"), message(2, "yo", author=BOB)])) is None
    )
