from __future__ import annotations

import pytest

from chat.loop.triggers import Trigger, TriggerPersona, TriggerReason, reactive_triggers
from chat.pipeline.types import ProxyIdentity
from chat.tests.loop.factories import message

BOT = 999
TOMORI = TriggerPersona("Tomori", is_main=True, triggers=("tomori",))
ANON = TriggerPersona("Anon", triggers=("anon", "anon-chan"))
RANA = TriggerPersona("Rana", triggers=("rana",))
SOYO = TriggerPersona("Soyo", triggers=("soyo",))
ALL = (TOMORI, ANON, RANA, SOYO)


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
    found = reactive_triggers(message=message(content), personas=ALL, bot_user_id=BOT, is_dm=False)
    assert names(found) == expected


def test_at_most_three_personas_answer_one_message():
    found = reactive_triggers(
        message=message("soyo rana anon tomori"), personas=ALL, bot_user_id=BOT, is_dm=False
    )
    assert names(found) == ["Soyo", "Rana", "Anon"]


def test_mention_of_the_bot_wakes_the_main_persona_at_its_position():
    msg = message(f"anon and <@{BOT}>", mention_ids=(BOT,))
    found = reactive_triggers(message=msg, personas=ALL, bot_user_id=BOT, is_dm=False)
    assert found == [
        Trigger("Anon", TriggerReason.TRIGGER_WORD, "anon"),
        Trigger("Tomori", TriggerReason.MENTION),
    ]


def test_reply_to_a_persona_comes_first():
    msg = message("tomori what do you think", reply_to=123)
    found = reactive_triggers(
        message=msg, personas=ALL, bot_user_id=BOT, is_dm=False, replied_persona_name="Anon"
    )
    assert found[0] == Trigger("Anon", TriggerReason.REPLY, "123")
    assert names(found) == ["Anon", "Tomori"]


def test_a_direct_message_wakes_only_the_main_persona():
    found = reactive_triggers(message=message("anon?"), personas=ALL, bot_user_id=BOT, is_dm=True)
    assert found == [Trigger("Tomori", TriggerReason.DIRECT_MESSAGE)]


def test_a_muted_user_cannot_trigger_that_persona():
    found = reactive_triggers(
        message=message("tomori anon"),
        personas=ALL,
        bot_user_id=BOT,
        is_dm=False,
        silenced_for={"Tomori"},
    )
    assert names(found) == ["Anon"]


def test_blacklisted_authors_trigger_nothing():
    found = reactive_triggers(
        message=message("tomori"),
        personas=ALL,
        bot_user_id=BOT,
        is_dm=False,
        author_blacklisted=True,
    )
    assert found == []


def test_other_bots_trigger_nothing_but_proxied_members_do():
    bot_message = message("tomori", is_bot=True, webhook_id=77)
    assert reactive_triggers(message=bot_message, personas=ALL, bot_user_id=BOT, is_dm=False) == []

    proxied = message(
        "tomori", is_bot=True, webhook_id=77, proxy=ProxyIdentity("abcde", "Mutsumi", 42)
    )
    found = reactive_triggers(message=proxied, personas=ALL, bot_user_id=BOT, is_dm=False)
    assert names(found) == ["Tomori"]


def test_disabled_personas_never_answer():
    personas = (TOMORI, TriggerPersona("Anon", triggers=("anon",), enabled=False))
    found = reactive_triggers(
        message=message("anon tomori"), personas=personas, bot_user_id=BOT, is_dm=False
    )
    assert names(found) == ["Tomori"]
