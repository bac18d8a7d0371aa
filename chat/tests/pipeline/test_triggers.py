from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.pipeline.triggers import (
    AuthorStanding,
    Silence,
    Trigger,
    TriggerInput,
    TriggerPersona,
    TurnReason,
    may_be_addressed,
    trigger_decision,
)
from chat.pipeline.types import Author, BlockType, HistoryMessage, MessageReference, ProxyIdentity
from chat.tests.factories import CHANNEL_ID, message

BOT = 999
TOMORI = TriggerPersona("Tomori", is_main=True, triggers=("tomori",))
ANON = TriggerPersona("Anon", triggers=("anon", "anon-chan"))
RANA = TriggerPersona("Rana", triggers=("rana",))
SOYO = TriggerPersona("Soyo", triggers=("soyo",))
ALL = (TOMORI, ANON, RANA, SOYO)
OTHER_BOTS_WEBHOOK = Author(id=4242, display_name="Relay", is_bot=True, webhook_id=77)


def decide(msg: HistoryMessage, *, personas=ALL, is_dm: bool = False, **facts) -> list[Trigger]:
    facts.setdefault("bot_user_id", BOT)
    decision = trigger_decision(
        TriggerInput(message=msg, personas=tuple(personas), is_dm=is_dm, **facts)
    )
    return list(decision.answers)


def silences(msg: HistoryMessage, **facts) -> dict[str, Silence | None]:
    facts.setdefault("bot_user_id", BOT)
    decision = trigger_decision(TriggerInput(message=msg, personas=ALL, is_dm=False, **facts))
    return {v.persona_name: v.silence for v in decision.verdicts}


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
    assert names(decide(message(content=content))) == expected


def test_at_most_three_personas_answer_one_message():
    msg = message(content="soyo rana anon tomori")
    assert names(decide(msg)) == ["Soyo", "Rana", "Anon"]
    assert silences(msg)["Tomori"] is Silence.OVER_LIMIT


def test_mention_of_the_bot_wakes_the_main_persona_at_its_position():
    msg = message(content=f"anon and <@{BOT}>", mention_ids=(BOT,))
    assert decide(msg) == [
        Trigger("Anon", TurnReason.TRIGGER_WORD, "anon"),
        Trigger("Tomori", TurnReason.MENTION),
    ]


def test_without_the_bots_id_no_mention_is_seen():
    msg = message(content=f"<@{BOT}> hi", mention_ids=(BOT,))
    assert decide(msg, bot_user_id=None) == []


def test_reply_to_a_persona_comes_first():
    msg = message(content="tomori what do you think", reference=MessageReference(123, CHANNEL_ID))
    found = decide(msg, replied_persona_name="Anon")
    assert found[0] == Trigger("Anon", TurnReason.REPLY, "123")
    assert names(found) == ["Anon", "Tomori"]


def test_a_direct_message_wakes_only_the_main_persona():
    found = decide(message(content="anon?"), is_dm=True)
    assert found == [Trigger("Tomori", TurnReason.DIRECT_MESSAGE)]


@pytest.mark.parametrize(
    ("kind", "silence"), [(BlockType.MUTE, Silence.MUTED), (BlockType.BLOCK, Silence.BLOCKED)]
)
def test_a_muted_or_blocked_user_cannot_trigger_that_persona(kind, silence):
    msg = message(content="tomori anon")
    author = AuthorStanding(blocks=(("Tomori", kind),))
    assert names(decide(msg, author=author)) == ["Anon"]
    assert silences(msg, author=author)["Tomori"] is silence


def test_a_block_wins_over_a_mute_of_the_same_persona():
    author = AuthorStanding(blocks=(("Tomori", BlockType.MUTE), ("Tomori", BlockType.BLOCK)))
    assert silences(message(content="tomori"), author=author)["Tomori"] is Silence.BLOCKED


def test_a_silenced_persona_still_shows_the_rule_that_addressed_it():
    msg = message(content="tomori")
    decision = trigger_decision(
        TriggerInput(
            message=msg,
            personas=ALL,
            is_dm=False,
            bot_user_id=BOT,
            author=AuthorStanding(blocks=(("Tomori", BlockType.MUTE),)),
        )
    )
    verdict = decision.verdict("tomori")
    assert verdict.addressed == Trigger("Tomori", TurnReason.TRIGGER_WORD, "tomori")
    assert (verdict.silence, verdict.block, verdict.answers) == (
        Silence.MUTED,
        BlockType.MUTE,
        False,
    )


@pytest.mark.parametrize(
    ("author", "silence"),
    [
        (AuthorStanding(blacklisted=True), Silence.AUTHOR_BLACKLISTED),
        (AuthorStanding(full_privacy=True), Silence.AUTHOR_FULL_PRIVACY),
        (AuthorStanding(blacklisted=True, full_privacy=True), Silence.AUTHOR_BLACKLISTED),
    ],
)
def test_blacklisted_and_full_privacy_authors_trigger_nothing(author, silence):
    msg = message(content="tomori anon")
    assert decide(msg, author=author) == []
    assert set(silences(msg, author=author).values()) == {silence}


def test_other_bots_trigger_nothing_but_proxied_members_do():
    bot_message = message(content="tomori", author=OTHER_BOTS_WEBHOOK)
    assert decide(bot_message) == []
    assert silences(bot_message)["Tomori"] is Silence.AUTHOR_IS_BOT

    proxied = message(
        content="tomori", author=OTHER_BOTS_WEBHOOK, proxy=ProxyIdentity("abcde", "Mutsumi", 42)
    )
    assert names(decide(proxied)) == ["Tomori"]


def test_a_message_a_proxy_system_replaced_is_never_answered():
    msg = message(content="l: tomori")
    assert decide(msg, superseded=True) == []
    assert silences(msg, superseded=True)["Tomori"] is Silence.SUPERSEDED


def test_disabled_personas_never_answer():
    personas = (TOMORI, TriggerPersona("Anon", triggers=("anon",), enabled=False))
    msg = message(content="anon tomori")
    assert names(decide(msg, personas=personas)) == ["Tomori"]
    decision = trigger_decision(
        TriggerInput(message=msg, personas=personas, is_dm=False, bot_user_id=BOT)
    )
    assert decision.verdict("Anon").silence is Silence.DISABLED


def test_every_persona_gets_a_verdict_in_the_order_given():
    decision = trigger_decision(
        TriggerInput(message=message(content="anon"), personas=ALL, is_dm=False, bot_user_id=BOT)
    )
    assert [v.persona_name for v in decision.verdicts] == ["Tomori", "Anon", "Rana", "Soyo"]
    assert [v.silence for v in decision.verdicts] == [
        Silence.NOT_ADDRESSED,
        None,
        Silence.NOT_ADDRESSED,
        Silence.NOT_ADDRESSED,
    ]


# -- may_be_addressed: the worker skips the facts of messages nobody could answer ------------


@pytest.mark.parametrize(
    ("content", "fields", "is_dm", "expected"),
    [
        ("the build is green again", {}, False, False),
        ("tomorikun is not a trigger", {}, False, False),
        ("hey anon-chan", {}, False, True),
        (f"<@{BOT}> hi", {"mention_ids": (BOT,)}, False, True),
        ("someone else <@5>", {"mention_ids": (5,)}, False, False),
        (
            "just replying",
            {"reference": MessageReference(message_id=1, channel_id=CHANNEL_ID)},
            False,
            True,
        ),
        ("anything at all", {}, True, True),
    ],
)
def test_may_be_addressed_by_words_mentions_replies_and_dms(content, fields, is_dm, expected):
    msg = message(content=content, **fields)
    assert may_be_addressed(msg, personas=ALL, is_dm=is_dm, bot_user_id=BOT) is expected


def test_a_dm_may_be_addressed_only_where_a_main_persona_answers_it():
    msg = message(content="hello")
    assert may_be_addressed(msg, personas=(ANON, RANA), is_dm=True, bot_user_id=BOT) is False


_words = st.sampled_from(
    ["tomori", "Anon", "anon-chan", "rana", "soyo", "hello", "tomorikun", f"<@{BOT}>", "x"]
)
_standings = st.just(AuthorStanding()) | st.builds(
    AuthorStanding,
    blacklisted=st.booleans(),
    full_privacy=st.booleans(),
    blocks=st.lists(
        st.tuples(st.sampled_from([p.name for p in ALL]), st.sampled_from(list(BlockType))),
        max_size=3,
    ).map(tuple),
)


@settings(max_examples=500)
@given(
    words=st.lists(_words, max_size=6),
    mentions_bot=st.booleans(),
    replies=st.booleans(),
    is_dm=st.booleans(),
    personas=st.lists(st.sampled_from(ALL), unique=True).map(tuple),
    replied_persona=st.sampled_from([None, "Tomori", "Anon", "Nobody"]),
    author=_standings,
    superseded=st.booleans(),
    bot_user_id=st.sampled_from([BOT, None]),
)
def test_a_message_that_may_not_be_addressed_is_answered_by_nobody_whatever_its_facts(
    words, mentions_bot, replies, is_dm, personas, replied_persona, author, superseded, bot_user_id
):
    """The worker reads no facts for such a message; whatever they would have been (whose
    message it replies to, the author's standing, a proxy's replacement), nobody answers it."""
    msg = message(
        content=" ".join(words),
        mention_ids=(BOT,) if mentions_bot else (),
        reference=MessageReference(message_id=1, channel_id=CHANNEL_ID) if replies else None,
    )
    facts = TriggerInput(
        message=msg,
        personas=personas,
        is_dm=is_dm,
        bot_user_id=bot_user_id,
        replied_persona_name=replied_persona if replies else None,
        author=author,
        superseded=superseded,
    )
    possible = may_be_addressed(msg, personas=personas, is_dm=is_dm, bot_user_id=bot_user_id)
    answers = trigger_decision(facts).answers
    assert possible or answers == ()
    if answers:
        assert possible
