"""`/privacy` per guild, and what switching to full deletes from turn records and channel
short-term memories."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.utils import timezone

from chat.models import ShortTermMemory, Turn, UsageDay, UserTurnWindow
from chat.models_spend import ANONYMOUS
from chat.pipeline.spend import CallCost, CallKind, TokenUsage
from chat.pipeline.types import PrivacyLevel
from chat.selectors import user_standing
from chat.services.slash_commands import privacy_set
from chat.services.spend import Counted, guild_site, spend_record
from chat.services.turn_record import REDACTED
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db

GUILD_A, GUILD_B, CHANNEL_A, CHANNEL_B, ALICE, BOB = 10, 11, 20, 21, 30, 31


def _turn(guild: int, channel: int, items: list[tuple[str, int | None]], **kw) -> Turn:
    """A recorded turn whose items are (text, author) and whose request quotes them."""
    turn = Turn(guild_id=guild, channel_id=channel, persona_name="Tomori", reason="mention", **kw)
    turn.context_items = [
        {
            "tag": "dialogue",
            "role": "user" if author else "system",
            "text": text,
            "tokens": 3,
            "source_ids": [],
            "author_ids": [str(author)] if author else [],
        }
        for text, author in items
    ]
    turn.request = {"messages": [{"role": "user", "content": "\n".join(t for t, _ in items)}]}
    turn.save()
    return turn


@pytest.fixture
def guilds() -> tuple[GuildConfig, GuildConfig]:
    a = GuildConfig.objects.create(guild_id=GUILD_A, name="A")
    b = GuildConfig.objects.create(guild_id=GUILD_B, name="B")
    return a, b


def test_full_in_one_guild_hides_the_user_there_and_not_in_the_other(guilds):
    privacy_set(guild_id=GUILD_A, user_id=ALICE, level="full")
    privacy_set(guild_id=GUILD_B, user_id=ALICE, level="minimal")

    assert user_standing(user_ids=[ALICE], guild_id=GUILD_A).full_privacy == {ALICE}
    assert user_standing(user_ids=[ALICE], guild_id=GUILD_B).full_privacy == frozenset()
    assert user_standing(user_ids=[ALICE], guild_id=None).privacy == {ALICE: PrivacyLevel.FULL}


def test_full_redacts_their_lines_in_turn_records_and_clears_summaries_drawn_on_them(guilds):
    a, _ = guilds
    tomori = Persona.objects.create(guild=a, name="Tomori")
    theirs = _turn(GUILD_A, CHANNEL_A, [("Alice: my cat is Miso", ALICE), ("Bob: nice", BOB)])
    untouched = _turn(GUILD_A, CHANNEL_B, [("Bob: hello", BOB)])
    elsewhere = _turn(GUILD_B, CHANNEL_A, [("Alice: my dog is Rex", ALICE)])
    drawn = ShortTermMemory.objects.create(
        guild_id=GUILD_A,
        channel_id=CHANNEL_A,
        persona=tomori,
        summary="Alice has a cat called Miso.",
        categories={"pets": "Miso the cat"},
        refreshed_at=timezone.now(),
        last_refreshed_turn=theirs,
    )
    kept = ShortTermMemory.objects.create(
        guild_id=GUILD_A,
        channel_id=CHANNEL_B,
        persona=tomori,
        summary="Bob says hello a lot.",
        refreshed_at=timezone.now(),
        last_refreshed_turn=untouched,
    )
    shown = _turn(GUILD_A, CHANNEL_A, [("Alice has a cat called Miso.", None), ("Bob: hi", BOB)])

    change = privacy_set(guild_id=GUILD_A, user_id=ALICE, level="full")

    theirs.refresh_from_db()
    assert [i["text"] for i in theirs.context_items] == [REDACTED, "Bob: nice"]
    assert theirs.request["messages"][0]["content"] == f"{REDACTED}\nBob: nice"
    shown.refresh_from_db()
    assert "Miso" not in json.dumps(shown.prompt_record)
    assert [i["text"] for i in shown.context_items] == [REDACTED, "Bob: hi"]
    drawn.refresh_from_db()
    assert (drawn.summary, drawn.categories, drawn.refreshed_at) == ("", {}, None)
    kept.refresh_from_db()
    assert kept.summary == "Bob says hello a lot."
    untouched.refresh_from_db()
    assert [i["text"] for i in untouched.context_items] == ["Bob: hello"]
    elsewhere.refresh_from_db()  # another guild, where she did not choose full privacy
    assert [i["text"] for i in elsewhere.context_items] == ["Alice: my dog is Rex"]
    assert (change.scrubbed_turns, change.cleared_summaries) == (2, 1)
    assert "your words in 2 turn record(s), and 1 channel summary(ies)" in change.sentence()


def test_an_older_record_without_authors_loses_the_trigger_they_wrote(guilds):
    turn = Turn(
        guild_id=GUILD_A,
        channel_id=CHANNEL_A,
        persona_name="Tomori",
        reason="mention",
        trigger_message_id=500,
        trigger_author_id=ALICE,
    )
    turn.context_items = [
        {"tag": "dialogue", "role": "user", "text": "Bob: hey", "source_ids": ["499"]},
        {"tag": "dialogue", "role": "user", "text": "Alice: tomori?", "source_ids": ["500"]},
    ]
    turn.request = {"messages": [{"role": "user", "content": "Bob: hey\nAlice: tomori?"}]}
    turn.save()

    privacy_set(guild_id=GUILD_A, user_id=ALICE, level="full")

    turn.refresh_from_db()
    assert [i["text"] for i in turn.context_items] == ["Bob: hey", REDACTED]
    assert turn.request["messages"][0]["content"] == f"Bob: hey\n{REDACTED}"


def test_full_folds_their_usage_into_the_anonymous_row_and_keeps_the_totals(guilds):
    a, b = guilds
    now = timezone.now()

    def call(guild: GuildConfig, user_id: int) -> None:
        spend_record(
            site=guild_site(guild=guild, channel_id=CHANNEL_A, user_id=user_id),
            now=now,
            counted=Counted(CallKind.REPLY, "m", TokenUsage(100, 0, 10), CallCost(Decimal("0.01"))),
        )

    for guild, user_id in ((a, ALICE), (a, ALICE), (a, BOB), (b, ALICE)):
        call(guild, user_id)
    UserTurnWindow.objects.create(guild_id=GUILD_A, user_id=ALICE, slots=[[1, 1.0]])

    privacy_set(guild_id=GUILD_A, user_id=ALICE, level="full")

    rows = UsageDay.objects.filter(guild_id=GUILD_A)
    assert sorted(rows.values_list("user_id", "calls")) == [(ANONYMOUS, 2), (BOB, 1)]
    assert rows.get(user_id=ANONYMOUS).usd_pico == 2 * 10**10
    assert UsageDay.objects.get(guild_id=GUILD_B).user_id == ALICE  # another guild's stays
    assert not UserTurnWindow.objects.filter(user_id=ALICE).exists()
