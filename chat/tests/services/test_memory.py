"""Short-term memory through the services: counting, due admission, scoping, expiry, privacy,
the refresh the background maintenance runs, and clearing — on the real database with the fake
Discord and the fake model over HTTP."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat import selectors
from chat.llm.fake_server import Fault, FaultKind, Reply
from chat.models import ShortTermMemory, Turn
from chat.pipeline.triggers import TurnReason
from chat.ports import ChannelPlace
from chat.selectors import turn_already_answered
from chat.selectors.short_term_memory import short_term_memories, short_term_memory
from chat.services.memory_refresh import short_term_memory_refresh
from chat.services.short_term_memory import (
    REFRESH_CLAIM_TTL,
    REFRESH_RUN_TTL,
    short_term_memory_claim,
    short_term_memory_clear,
    short_term_memory_expire,
    short_term_memory_refresh_begin,
)
from chat.services.turn_request import TurnRequest
from chat.services.turns import turn_prepare, turn_run
from chat.tests.conftest import CHANNEL, GUILD_ID, NOW, Bench
from chat.tests.factories import ALICE, BOB, CAROL, message, sf
from personas.models import Block, GuildConfig, UserPrivacy

pytestmark = pytest.mark.django_db(transaction=True)

OTHER_CHANNEL = sf(3)
MEMORY_TOOL = "update_short_term_memory"


def chat(n: int, content: str, *, channel_id: int = CHANNEL, **kw):
    return message(n, content, channel_id=channel_id, at=NOW - dt.timedelta(minutes=90 - n), **kw)


def offered_tools(body: dict) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def system_text(body: dict) -> str:
    return json.dumps(body["messages"])


async def memory_of(bench: Bench, channel_id: int = CHANNEL) -> ShortTermMemory | None:
    return await sync_to_async(short_term_memory)(persona=bench.tomori, channel_id=channel_id)


async def test_each_delivered_reply_counts_and_the_fifth_makes_the_memory_tool_offered(
    bench: Bench,
):
    bodies = []
    for n in range(1, 7):
        trigger = bench.discord.post(chat(n * 2, f"tomori, point {n}", author=ALICE))
        prepared = await turn_prepare(
            runtime=bench.runtime, request=await bench.request(trigger, bench.tomori), dry_run=True
        )
        bodies.append(prepared.body)
        turn = await turn_run(
            runtime=bench.runtime, request=await bench.request(trigger, bench.tomori)
        )
        assert turn.status == Turn.Status.REPLIED

    # Turns 1–5 ran with 0–4 counted replies: not due. The sixth ran with five: due.
    assert [MEMORY_TOOL in offered_tools(body) for body in bodies] == [False] * 5 + [True]
    memory = await memory_of(bench)
    assert memory is not None
    assert (memory.turns_since_refresh, memory.last_turn_at) == (6, NOW)


async def test_the_memory_tool_is_never_offered_when_the_persona_has_tools_off(bench: Bench):
    bench.tomori.tools_enabled = False
    await sync_to_async(bench.tomori.save)()
    await ShortTermMemory.objects.acreate(
        persona=bench.tomori, channel_id=CHANNEL, turns_since_refresh=9, last_turn_at=NOW
    )
    trigger = bench.discord.post(chat(1, "tomori, remember this"))

    prepared = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(trigger, bench.tomori), dry_run=True
    )

    assert offered_tools(prepared.body) == []
    assert prepared.context.tools == ()


async def test_a_channels_memory_never_shows_in_another_channel(bench: Bench):
    bench.discord.places[OTHER_CHANNEL] = ChannelPlace(GUILD_ID)
    await ShortTermMemory.objects.acreate(
        persona=bench.tomori,
        channel_id=CHANNEL,
        guild_id=GUILD_ID,
        summary="Alice's cat is called Miso.",
        refreshed_at=NOW - dt.timedelta(hours=1),
    )
    here = bench.discord.post(chat(1, "tomori, hi"))
    there = bench.discord.post(chat(2, "tomori, hi", channel_id=OTHER_CHANNEL))
    request_here = await bench.request(here, bench.tomori)
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=OTHER_CHANNEL, guild_id=GUILD_ID, now=NOW
    )
    request_there = TurnRequest(
        configuration=configuration,
        persona=bench.tomori,
        trigger=there,
        reason=TurnReason.TRIGGER_WORD,
    )

    shown_here = await turn_prepare(runtime=bench.runtime, request=request_here, dry_run=True)
    shown_there = await turn_prepare(runtime=bench.runtime, request=request_there, dry_run=True)

    assert "Miso" in system_text(shown_here.body)
    assert "Miso" not in system_text(shown_there.body)


async def test_an_expired_summary_is_hidden_and_cleared_by_maintenance(bench: Bench):
    memory = await ShortTermMemory.objects.acreate(
        persona=bench.tomori,
        channel_id=CHANNEL,
        summary="Alice's cat is called Miso.",
        refreshed_at=NOW - dt.timedelta(hours=24),
        turns_since_refresh=3,
        last_turn_at=NOW - dt.timedelta(hours=12),
    )
    trigger = bench.discord.post(chat(1, "tomori, hi"))

    prepared = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(trigger, bench.tomori), dry_run=True
    )
    changed = await sync_to_async(short_term_memory_expire)(now=NOW)

    assert "Miso" not in system_text(prepared.body)
    assert changed == 2
    await memory.arefresh_from_db()
    assert (memory.summary, memory.categories, memory.turns_since_refresh) == ("", {}, 0)


async def test_expiry_keeps_fresh_memories(bench: Bench):
    memory = await ShortTermMemory.objects.acreate(
        persona=bench.tomori,
        channel_id=CHANNEL,
        summary="Fresh.",
        refreshed_at=NOW - dt.timedelta(hours=23),
        turns_since_refresh=3,
        last_turn_at=NOW - dt.timedelta(hours=11),
    )

    assert await sync_to_async(short_term_memory_expire)(now=NOW) == 0
    await memory.arefresh_from_db()
    assert (memory.summary, memory.turns_since_refresh) == ("Fresh.", 3)


async def due_memory(bench: Bench) -> ShortTermMemory:
    return await ShortTermMemory.objects.acreate(
        persona=bench.tomori,
        channel_id=CHANNEL,
        guild_id=GUILD_ID,
        summary="Bob is moving house.",
        refreshed_at=NOW - dt.timedelta(hours=2),
        turns_since_refresh=5,
        last_turn_at=NOW - dt.timedelta(minutes=30),
    )


async def test_a_refresh_summarises_the_visible_window_in_one_model_call(bench: Bench):
    guild = await GuildConfig.objects.aget(guild_id=GUILD_ID)
    await UserPrivacy.objects.acreate(user_id=CAROL.id, level="full", guild=guild)
    await Block.objects.acreate(guild=guild, persona=bench.tomori, user_id=BOB.id, type="block")
    bench.discord.post(chat(1, "the van is booked for nine", author=ALICE))
    bench.discord.post(chat(2, "my secret diary entry", author=CAROL))
    bench.discord.post(chat(3, "blocked words here", author=BOB))
    bench.discord.post(chat(4, "bring boxes please", author=ALICE))
    memory = await due_memory(bench)
    bench.llm.enqueue(Reply("Alice booked the van for nine and wants boxes."))

    result = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)

    assert result.status == "refreshed"
    [body] = bench.llm.chat_bodies
    prompt = system_text(body)
    assert "the van is booked for nine" in prompt and "bring boxes please" in prompt
    assert "Bob is moving house." in prompt  # the unexpired memory rolls forward
    assert "secret diary" not in prompt and "Carol" not in prompt
    assert "blocked words" not in prompt
    await memory.arefresh_from_db()
    assert memory.summary == "Alice booked the van for nine and wants boxes."
    assert (memory.turns_since_refresh, memory.refreshed_at) == (0, NOW)
    turn = await Turn.objects.aget(id=result.turn_id)
    assert memory.last_refreshed_turn_id == turn.id
    assert (turn.reason, turn.status, turn.delivered_message_ids) == (
        TurnReason.MAINTENANCE,
        Turn.Status.REPLIED,
        [],
    )
    assert turn.reply_text == memory.summary
    assert turn.request == body
    # It answered no message: the newest one stays free for the persona's real answer.
    assert turn.trigger_message_id is None
    assert turn.reason_detail["window_newest_message_id"] == str(chat(4, "").id)
    assert not await sync_to_async(turn_already_answered)(
        trigger_id=chat(4, "").id, persona_id=bench.tomori.id
    )
    assert bench.discord.delivered == []


async def test_two_concurrent_refresh_requests_make_one_model_call(bench: Bench):
    bench.discord.post(chat(1, "the van is booked for nine", author=ALICE))
    memory = await due_memory(bench)
    # A slow model: the second request arrives while the first one's call is in flight.
    bench.llm.enqueue(Fault(FaultKind.TIMEOUT, delay=0.5))

    results = await asyncio.gather(
        short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id),
        short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id),
    )

    assert sorted((r.status, r.detail) for r in results) == [
        ("refreshed", ""),
        ("skipped", "another refresh of this memory is running"),
    ]
    assert len(bench.llm.chat_bodies) == 1
    assert await Turn.objects.acount() == 1
    await memory.arefresh_from_db()
    assert (memory.refresh_run, memory.refresh_run_at) == ("", None)
    # The stretch is summarised: a request that comes later finds nothing due.
    later = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)
    assert (later.status, later.detail) == ("skipped", "no longer due")
    assert len(bench.llm.chat_bodies) == 1


async def test_a_refresh_run_taken_over_as_dead_keeps_nothing(bench: Bench):
    bench.discord.post(chat(1, "the van is booked for nine", author=ALICE))
    memory = await due_memory(bench)
    stale = await sync_to_async(short_term_memory_refresh_begin)(memory_id=memory.id)
    assert stale is not None
    assert await sync_to_async(short_term_memory_refresh_begin)(memory_id=memory.id) is None
    # The first run's process died: past REFRESH_RUN_TTL its claim lapses.
    await ShortTermMemory.objects.filter(id=memory.id).aupdate(
        refresh_run_at=timezone.now() - REFRESH_RUN_TTL - dt.timedelta(seconds=1)
    )
    bench.llm.enqueue(Reply("Alice booked the van."))

    result = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)

    assert result.status == "refreshed"
    await memory.arefresh_from_db()
    assert memory.summary == "Alice booked the van."


async def test_a_refresh_skips_a_memory_that_is_no_longer_due(bench: Bench):
    bench.discord.post(chat(1, "hello"))
    memory = await due_memory(bench)
    await ShortTermMemory.objects.filter(id=memory.id).aupdate(turns_since_refresh=4)

    skipped = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)
    gone = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id + 100)

    assert (skipped.status, gone.status) == ("skipped", "skipped")
    assert bench.llm.chat_bodies == []
    assert not await Turn.objects.aexists()


async def test_a_failed_refresh_keeps_the_memory_and_asks_for_a_retry(bench: Bench):
    bench.discord.post(chat(1, "hello"))
    memory = await due_memory(bench)
    bench.llm.enqueue(*[Fault(FaultKind.HTTP_ERROR, status=500)] * 4)

    result = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)

    assert (result.status, result.retry) == ("failed", True)
    await memory.arefresh_from_db()
    assert (memory.summary, memory.turns_since_refresh) == ("Bob is moving house.", 5)
    turn = await Turn.objects.aget(id=result.turn_id)
    assert (turn.reason, turn.status) == (TurnReason.MAINTENANCE, Turn.Status.FAILED)


async def test_clearing_forgets_one_memory_or_all_of_a_personas(bench: Bench):
    first = await due_memory(bench)
    await ShortTermMemory.objects.acreate(persona=bench.tomori, channel_id=OTHER_CHANNEL)
    await ShortTermMemory.objects.acreate(persona=bench.anon, channel_id=CHANNEL)

    listed = await sync_to_async(short_term_memories)(persona_id=bench.tomori.id)
    assert {m.channel_id for m in listed} == {CHANNEL, OTHER_CHANNEL}
    assert (
        await sync_to_async(short_term_memory_clear)(persona_id=bench.anon.id, memory_id=first.id)
        == 0
    )
    assert (
        await sync_to_async(short_term_memory_clear)(persona_id=bench.tomori.id, memory_id=first.id)
        == 1
    )
    assert await sync_to_async(short_term_memory_clear)(persona_id=bench.tomori.id) == 1
    assert [m.persona_id for m in await sync_to_async(list)(ShortTermMemory.objects.all())] == [
        bench.anon.id
    ]


async def test_a_turn_that_refreshes_the_memory_does_not_count_as_a_raw_turn(bench: Bench):
    await ShortTermMemory.objects.acreate(
        persona=bench.tomori, channel_id=CHANNEL, turns_since_refresh=5, last_turn_at=NOW
    )
    bench.llm.enqueue(
        Reply.calling(MEMORY_TOOL, {"summary": "Alice plans the gig."}),
        Reply("noted!"),
    )
    trigger = bench.discord.post(chat(1, "tomori, the gig is on Sunday"))

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))

    assert MEMORY_TOOL in offered_tools(bench.llm.chat_bodies[0])  # due: no keyword needed
    memory = await memory_of(bench)
    assert (memory.summary, memory.turns_since_refresh, memory.last_refreshed_turn_id) == (
        "Alice plans the gig.",
        0,
        turn.id,
    )


async def test_direct_messages_keep_one_memory_per_user(bench: Bench):
    alice_dm, bob_dm = sf(70), sf(71)
    bench.discord.places.update({alice_dm: ChannelPlace(None), bob_dm: ChannelPlace(None)})
    dm = await sync_to_async(selectors.channel_configuration)(
        channel_id=alice_dm, guild_id=None, now=NOW
    )
    bob_config = await sync_to_async(selectors.channel_configuration)(
        channel_id=bob_dm, guild_id=None, now=NOW
    )
    for configuration, author, n in ((dm, ALICE, 1), (bob_config, BOB, 2)):
        trigger = bench.discord.post(
            chat(n, "hi", channel_id=configuration.channel_id, author=author)
        )
        turn = await turn_run(
            runtime=bench.runtime,
            request=TurnRequest(
                configuration=configuration,
                persona=bench.tomori,
                trigger=trigger,
                reason=TurnReason.DIRECT_MESSAGE,
            ),
        )
        assert turn.status == Turn.Status.REPLIED

    rows = await sync_to_async(list)(
        ShortTermMemory.objects.order_by("user_id").values_list("channel_id", "user_id", "guild_id")
    )
    assert rows == [(alice_dm, ALICE.id, None), (bob_dm, BOB.id, None)]


async def test_categories_written_by_the_tool_show_in_the_next_prompt(bench: Bench):
    bench.llm.enqueue(
        Reply.calling(MEMORY_TOOL, {"categories": {"plans": "gig on Sunday", "mood": "excited"}}),
        Reply("noted!"),
    )
    first = bench.discord.post(chat(1, "tomori, remember the plans"))
    await turn_run(runtime=bench.runtime, request=await bench.request(first, bench.tomori))
    second = bench.discord.post(chat(3, "tomori, what were the plans?"))

    prepared = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(second, bench.tomori), dry_run=True
    )

    memory = await memory_of(bench)
    assert memory.summary == ""
    assert memory.categories == {"plans": "gig on Sunday", "mood": "excited"}
    assert "- mood: excited\\n- plans: gig on Sunday" in system_text(prepared.body)


async def test_one_background_refresh_at_a_time_per_memory(bench: Bench):
    bench.discord.post(chat(1, "hello"))
    memory = await due_memory(bench)
    claim = sync_to_async(short_term_memory_claim)

    assert await claim(memory_ids=[memory.id], now=NOW) == [memory.id]
    assert await claim(memory_ids=[memory.id], now=NOW + dt.timedelta(minutes=14)) == []
    lost = NOW + REFRESH_CLAIM_TTL
    assert await claim(memory_ids=[memory.id], now=lost) == [memory.id]  # a worker died

    bench.llm.enqueue(Reply("Hello was said."))
    result = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)

    assert result.status == "refreshed"
    await memory.arefresh_from_db()
    assert memory.refresh_claimed_at is None


async def test_a_refresh_that_will_be_retried_keeps_its_claim(bench: Bench):
    bench.discord.post(chat(1, "hello"))
    memory = await due_memory(bench)
    await sync_to_async(short_term_memory_claim)(memory_ids=[memory.id], now=NOW)
    bench.llm.enqueue(*[Fault(FaultKind.HTTP_ERROR, status=500)] * 4)

    result = await short_term_memory_refresh(runtime=bench.runtime, memory_id=memory.id)

    assert result.retry
    await memory.arefresh_from_db()
    assert memory.refresh_claimed_at == NOW
