"""Memory extraction on the real database with the fake Discord and the fake model over HTTP:
one call proposes facts from a quiet stretch, validated, deduplicated, bounded, recorded as a
turn; privacy keeps people out of it; the facts reach a later turn's prompt."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from chat.llm.embeddings import HashingEmbeddings
from chat.llm.fake_server import Reply
from chat.models import EventQueue, Memory, Turn
from chat.pipeline.recall import MEMORY_HEADER
from chat.pipeline.triggers import TurnReason
from chat.services.memory_extraction import memories_extract, memory_extraction_due
from chat.services.turns import turn_prepare
from chat.tests.conftest import CHANNEL, GUILD_ID, NOW, Bench
from chat.tests.factories import ALICE, BOB, CAROL, message
from personas.models import GuildConfig, UserPrivacy

pytestmark = pytest.mark.django_db(transaction=True)


def chat(n: int, content: str, **kw):
    return message(n, content, channel_id=CHANNEL, at=NOW - dt.timedelta(minutes=60 - n), **kw)


def answer(*facts: tuple[str, str]) -> Reply:
    return Reply(json.dumps({"facts": [{"about": a, "fact": f} for a, f in facts]}))


async def extract(bench: Bench):
    return await memories_extract(runtime=bench.runtime, channel_id=CHANNEL, guild_id=GUILD_ID)


@pytest.fixture
def hashing(bench: Bench) -> Bench:
    bench.runtime = dataclasses.replace(bench.runtime, embeddings=HashingEmbeddings())
    return bench


async def test_one_call_keeps_the_durable_facts_of_the_people_who_spoke(hashing: Bench):
    bench = hashing
    guild = await GuildConfig.objects.aget(guild_id=GUILD_ID)
    await UserPrivacy.objects.acreate(user_id=CAROL.id, level="partial", guild=guild)
    bench.discord.post(chat(1, "I just adopted a greyhound called Pixel", author=ALICE))
    bench.discord.post(chat(2, "nice! I'm moving to Lisbon in May", author=BOB))
    bench.discord.post(chat(3, "my password is hunter2", author=CAROL))
    bench.discord.post(chat(4, "also rehearsals are on Tuesdays now", author=BOB))
    bench.llm.enqueue(
        answer(
            ("Alice", "Alice adopted a greyhound called Pixel"),
            ("bob", "Bob is moving to Lisbon in May"),
            ("server", "Rehearsals are on Tuesdays"),
            ("Carol", "Carol's password is hunter2"),
            ("Dave", "Dave likes jazz"),
        )
    )

    result = await extract(bench)

    assert result.status == "extracted"
    [body] = bench.llm.chat_bodies
    prompt = json.dumps(body["messages"])
    assert "greyhound called Pixel" in prompt and "Lisbon" in prompt
    assert "hunter2" not in prompt and "Carol" not in prompt  # partial privacy: never kept
    kept = await sync_to_async(list)(Memory.objects.order_by("id").values_list("kind", "user_id"))
    assert kept == [("personal", ALICE.id), ("personal", BOB.id), ("guild", None)]
    turn = await Turn.objects.aget(id=result.turn_id)
    assert (turn.reason, turn.status, turn.trigger_message_id) == (
        TurnReason.EXTRACTION,
        Turn.Status.REPLIED,
        None,
    )
    assert [s["fact"] for s in turn.reason_detail["stored"]] == [
        "Alice adopted a greyhound called Pixel",
        "Bob is moving to Lisbon in May",
        "Rehearsals are on Tuesdays",
    ]
    assert {r["about"]: r["why"] for r in turn.reason_detail["refused"]} == {
        "Carol": "names nobody of this conversation",
        "Dave": "names nobody of this conversation",
    }
    assert await Memory.objects.filter(turn_id=turn.id, source="extraction").acount() == 3
    assert bench.discord.delivered == []

    # Nothing new since: the next run asks nothing.
    assert (await extract(bench)).status == "skipped"
    assert len(bench.llm.chat_bodies) == 1

    # A later turn with Alice in the window recalls her fact.
    trigger = bench.discord.post(chat(10, "tomori, how is my greyhound Pixel doing?", author=ALICE))
    prepared = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(trigger, bench.tomori), dry_run=True
    )
    [item] = [i for i in prepared.context.items if i.tag == "memory"]
    assert MEMORY_HEADER in item.text
    assert "About Alice: Alice adopted a greyhound called Pixel" in item.text


async def test_a_repeated_fact_updates_and_only_new_lines_are_read(hashing: Bench):
    bench = hashing
    bench.discord.post(chat(1, "I play the oboe", author=ALICE))
    bench.llm.enqueue(answer(("Alice", "Alice plays the oboe")))
    await extract(bench)
    bench.discord.post(chat(2, "cool", author=BOB))
    bench.discord.post(chat(3, "the oboe, yes, every day", author=ALICE))
    bench.llm.enqueue(answer(("Alice", "Alice plays the oboe.")))

    result = await extract(bench)

    second = json.dumps(bench.llm.chat_bodies[1]["messages"])
    assert "every day" in second and "I play the oboe" not in second
    assert "- Alice plays the oboe" in bench.llm.chat_bodies[1]["messages"][1]["content"]
    turn = await Turn.objects.aget(id=result.turn_id)
    assert turn.reason_detail["stored"][0]["outcome"] == "updated"
    assert await Memory.objects.acount() == 1


async def test_an_answer_that_is_not_the_json_asked_for_fails_and_keeps_nothing(hashing: Bench):
    bench = hashing
    bench.discord.post(chat(1, "I love hiking", author=ALICE))
    bench.llm.enqueue(Reply('{"facts": [{"about": "Alice"}]}'))

    result = await extract(bench)

    assert result.status == "failed" and not result.retry
    assert "facts.0.fact: Field required" in result.detail
    turn = await Turn.objects.aget(id=result.turn_id)
    assert turn.status == Turn.Status.FAILED and "facts.0.fact" in turn.error
    assert await Memory.objects.acount() == 0


@override_settings(MEMORY_EXTRACTION_QUIET_SECONDS=600, MEMORY_EXTRACTION_MIN_MESSAGES=2)
def test_a_channel_is_due_once_quiet_with_enough_new_messages(transactional_db):
    now = dt.datetime(2026, 7, 11, 12, 0, tzinfo=dt.UTC)

    def queue(channel: int, message_id: int, minutes_ago: int) -> None:
        row = EventQueue.objects.create(
            channel_id=channel, message_id=message_id, guild_id=GUILD_ID, event={}
        )
        EventQueue.objects.filter(id=row.id).update(
            created_at=now - dt.timedelta(minutes=minutes_ago)
        )

    queue(1, 10, 30)
    queue(1, 11, 20)  # quiet for 20 minutes, two new messages: due
    queue(2, 20, 30)
    queue(2, 21, 5)  # still talking
    queue(3, 30, 30)  # one message only

    assert memory_extraction_due(now=now) == [(1, GUILD_ID)]
