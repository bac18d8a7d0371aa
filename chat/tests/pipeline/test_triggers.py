from __future__ import annotations

import pytest

from chat.pipeline.triggers import Trigger, TriggerPersona, TurnReason, reactive_triggers
from chat.pipeline.types import Author, MessageReference, ProxyIdentity
from chat.tests.factories import CHANNEL_ID, message

BOT = 999
TOMORI = TriggerPersona("Tomori", is_main=True, triggers=("tomori",))
ANON = TriggerPersona("Anon", triggers=("anon", "anon-chan"))
RANA = TriggerPersona("Rana", triggers=("rana",))
SOYO = TriggerPersona("Soyo", triggers=("soyo",))
ALL = (TOMORI, ANON, RANA, SOYO)
OTHER_BOTS_WEBHOOK = Author(id=4242, display_name="Relay", is_bot=True, webhook_id=77)


def names(triggers: list[Trigger]) -> list[str]:
    return [t.persona_name for t in triggers]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("hey tomori", ["Tomori"]),
        ("TOMORI?", ["Tomori"]),
        ("tomorikun is not a trigger", []),
        ("anon-chan and tomori", ["Anon", "Tomori"]),
        ("rana, anon, tomori, soyo: all of you", ["Rana", "Anon", "Tomori"]),
        ("nothing here", []),
    ],
)
def test_trigger_words_match_whole_words_in_order_of_appearance(content, expected):
    found = reactive_triggers(
        message=message(content=content), personas=ALL, bot_user_id=BOT, is_dm=False
    )
    assert names(found) == expected


def test_at_most_three_personas_answer_one_message():
    found = reactive_triggers(
        message=message(content="soyo rana anon tomori"), personas=ALL, bot_user_id=BOT, is_dm=False
    )
    assert names(found) == ["Soyo", "Rana", "Anon"]


def test_mention_of_the_bot_wakes_the_main_persona_at_its_position():
    msg = message(content=f"anon and <@{BOT}>", mention_ids=(BOT,))
    found = reactive_triggers(message=msg, personas=ALL, bot_user_id=BOT, is_dm=False)
    assert found == [
        Trigger("Anon", TurnReason.TRIGGER_WORD, "anon"),
        Trigger("Tomori", TurnReason.MENTION),
    ]


def test_reply_to_a_persona_comes_first():
    msg = message(content="tomori what do you think", reference=MessageReference(123, CHANNEL_ID))
    found = reactive_triggers(
        message=msg, personas=ALL, bot_user_id=BOT, is_dm=False, replied_persona_name="Anon"
    )
    assert found[0] == Trigger("Anon", TurnReason.REPLY, "123")
    assert names(found) == ["Anon", "Tomori"]


def test_a_direct_message_wakes_only_the_main_persona():
    found = reactive_triggers(
        message=message(content="anon?"), personas=ALL, bot_user_id=BOT, is_dm=True
    )
    assert found == [Trigger("Tomori", TurnReason.DIRECT_MESSAGE)]


def test_a_muted_user_cannot_trigger_that_persona():
    found = reactive_triggers(
        message=message(content="tomori anon"),
        personas=ALL,
        bot_user_id=BOT,
        is_dm=False,
        silenced_for={"Tomori"},
    )
    assert names(found) == ["Anon"]


def test_blacklisted_authors_trigger_nothing():
    found = reactive_triggers(
        message=message(content="tomori"),
        personas=ALL,
        bot_user_id=BOT,
        is_dm=False,
        author_blacklisted=True,
    )
    assert found == []


def test_other_bots_trigger_nothing_but_proxied_members_do():
    bot_message = message(content="tomori", author=OTHER_BOTS_WEBHOOK)
    assert reactive_triggers(message=bot_message, personas=ALL, bot_user_id=BOT, is_dm=False) == []

    proxied = message(
        content="tomori", author=OTHER_BOTS_WEBHOOK, proxy=ProxyIdentity("abcde", "Mutsumi", 42)
    )
    found = reactive_triggers(message=proxied, personas=ALL, bot_user_id=BOT, is_dm=False)
    assert names(found) == ["Tomori"]


def test_disabled_personas_never_answer():
    personas = (TOMORI, TriggerPersona("Anon", triggers=("anon",), enabled=False))
    found = reactive_triggers(
        message=message(content="anon tomori"), personas=personas, bot_user_id=BOT, is_dm=False
    )
    assert names(found) == ["Tomori"]
