"""The scheduler learns where a channel is from Discord, never from its unread pool."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Fault, FaultKind
from chat.loop import reactive
from chat.loop.scheduler import Scheduler
from chat.models import Turn
from chat.ports import ChannelPlace
from chat.selectors.event_queue import unread_pool_count, unread_pool_messages
from chat.services.event_queue import OwnIdentity, event_ingest_many, event_queue_consume
from chat.tests.conftest import BOT, CHANNEL, GUILD_ID, Bench
from chat.tests.factories import ALICE, message
from personas.models import Block, GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

# 20:00 UTC on Saturday is already Sunday in Tokyo: the guild's timezone shows in the prompt.
LATE_SATURDAY = dt.datetime(2026, 7, 11, 20, 0, tzinfo=dt.UTC)


def arrive(text: str) -> None:
    """A guild message is ingested and moved into the unread pool."""
    arrived = message(content=text, channel_id=CHANNEL, author=ALICE, at=LATE_SATURDAY)
    event_ingest_many(batch=[(arrived, GUILD_ID)])
    event_queue_consume(own=OwnIdentity(bot_user_id=BOT.id))


async def test_a_message_arriving_as_a_pass_begins_on_an_empty_pool_gets_the_guilds_settings(
    bench: Bench,
):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(
        timezone="Asia/Tokyo", message_fetch_limit=20
    )

    async def message_arrives_now() -> None:
        bench.discord.on_locate.clear()
        await sync_to_async(arrive)("anon, a question for you")

    bench.discord.on_locate.append(message_arrives_now)
    morning = LATE_SATURDAY - dt.timedelta(hours=19)  # Saturday in Tokyo and in UTC
    bench.discord.post(message(content="good morning", channel_id=CHANNEL, at=morning))
    scheduler = Scheduler(runtime=bench.runtime, own=lambda: OwnIdentity(bot_user_id=BOT.id))
    assert await sync_to_async(unread_pool_count)(channel_id=CHANNEL) == 0

    scheduler.schedule(CHANNEL)  # a pass begins while the pool is empty
    await scheduler.idle()

    [turn] = await sync_to_async(list)(Turn.objects.all())
    assert (turn.persona_name, turn.reason, turn.status) == ("Anon", "trigger_word", "replied")
    assert bench.discord.history_reads == [(CHANNEL, 20)]  # the guild's fetch limit
    prompt = str(bench.llm.chat_bodies[-1]["messages"])
    assert "New day: Sunday, July 12, 2026" in prompt  # the day changed in the guild's timezone
    assert "Poems only." in prompt  # the channel's note
    await scheduler.stop()


async def dm_turns(bench: Bench, text: str, *, author=ALICE) -> list[Turn]:
    """``author`` writes ``text`` in a DM; the scheduler runs; the turns it ran."""
    dm_channel = CHANNEL + 1
    bench.discord.places[dm_channel] = ChannelPlace(guild_id=None)
    await sync_to_async(event_ingest_many)(
        batch=[(message(content=text, channel_id=dm_channel, author=author), None)]
    )
    await sync_to_async(event_queue_consume)(own=OwnIdentity(bot_user_id=BOT.id))
    scheduler = Scheduler(runtime=bench.runtime, own=lambda: OwnIdentity(bot_user_id=BOT.id))
    scheduler.schedule(dm_channel)
    await scheduler.idle()
    await scheduler.stop()
    return await sync_to_async(list)(Turn.objects.all())


async def test_a_dm_is_a_dm_because_discord_says_so(bench: Bench):
    await Persona.objects.filter(name="Tomori").aupdate(answers_dms=True)

    [turn] = await dm_turns(bench, "anon, hi")

    assert (turn.persona_name, turn.reason, turn.guild_id) == ("Tomori", "dm", None)


async def test_dms_go_unanswered_until_an_admin_chooses_a_persona_for_them(bench: Bench):
    assert await dm_turns(bench, "hello?") == []
    assert await sync_to_async(unread_pool_count)(channel_id=CHANNEL + 1) == 0


async def test_someone_the_dm_persona_blocked_in_its_guild_is_blocked_in_dms(bench: Bench):
    guild = await GuildConfig.objects.aget(guild_id=GUILD_ID)
    tomori = await Persona.objects.aget(name="Tomori")
    await Persona.objects.filter(pk=tomori.pk).aupdate(answers_dms=True)
    await Block.objects.acreate(guild=guild, persona=tomori, user_id=ALICE.id, type="block")

    assert await dm_turns(bench, "hello?") == []


async def test_where_discord_cannot_say_the_ingested_guild_decides(bench: Bench):
    del bench.discord.places[CHANNEL]
    await sync_to_async(arrive)("anon?")
    scheduler = Scheduler(runtime=bench.runtime, own=lambda: OwnIdentity(bot_user_id=BOT.id))

    scheduler.schedule(CHANNEL)
    await scheduler.idle()

    [turn] = await sync_to_async(list)(Turn.objects.all())
    assert (turn.persona_name, turn.guild_id) == ("Anon", GUILD_ID)
    await scheduler.stop()


async def test_a_message_consumed_while_its_channels_loop_ends_is_answered(bench: Bench):
    """The lost wake-up: the consumer wakes a channel whose loop has finished its last pass but
    is not yet deregistered; that message must still get its turn."""
    scheduler: Scheduler | None = None

    async def a_message_arrives_as_the_loop_ends(channel_id: int) -> None:
        if await sync_to_async(Turn.objects.count)() == 1:
            await sync_to_async(arrive)("anon, one more thing")
            scheduler.schedule(channel_id)  # what the consumer does for the new message

    scheduler = Scheduler(
        runtime=bench.runtime,
        own=lambda: OwnIdentity(bot_user_id=BOT.id),
        before_loop_exit=a_message_arrives_as_the_loop_ends,
    )
    await sync_to_async(arrive)("anon, first thing")

    scheduler.schedule(CHANNEL)
    await scheduler.idle()

    statuses = await sync_to_async(list)(Turn.objects.values_list("status", flat=True))
    assert statuses == ["replied", "replied"]
    assert await sync_to_async(unread_pool_count)(channel_id=CHANNEL) == 0
    await scheduler.stop()


async def test_a_channel_of_chatter_is_read_in_batches_and_its_trigger_still_answered(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
):
    """Messages nobody answers, arriving faster than `QUIET_BATCH_INTERVAL`, are read a few
    times a second in batches, not once each; a trigger among them is answered."""
    reads: list[int] = []

    def counted(*, channel_id: int):
        pool = unread_pool_messages(channel_id=channel_id)
        reads.append(len(pool))
        return pool

    monkeypatch.setattr(reactive, "unread_pool_messages", counted)
    scheduler = Scheduler(runtime=bench.runtime, own=lambda: OwnIdentity(bot_user_id=BOT.id))
    started = time.monotonic()
    for n in range(40):
        await sync_to_async(arrive)(f"lunch plans, take {n}")
        scheduler.schedule(CHANNEL)  # what the intake does with each stored batch
        await asyncio.sleep(0.02)
    await sync_to_async(arrive)("anon, and you?")
    scheduler.schedule(CHANNEL)
    elapsed = time.monotonic() - started
    await scheduler.idle()

    [turn] = await sync_to_async(list)(Turn.objects.all())
    assert (turn.persona_name, turn.status) == ("Anon", "replied")
    assert await sync_to_async(unread_pool_count)(channel_id=CHANNEL) == 0
    # The first read and one per interval since, the empty read that ends each stretch, and
    # the trigger's: never one per message.
    assert len(reads) <= elapsed / reactive.QUIET_BATCH_INTERVAL + 4, reads
    assert sum(reads) >= 41
    await scheduler.stop()


async def test_channel_loops_never_exceed_the_cap_and_every_woken_channel_is_served(bench: Bench):
    await Persona.objects.filter(name="Tomori").aupdate(answers_dms=True)
    dms = [CHANNEL + 100 + n for n in range(6)]
    bench.llm.enqueue(*[Fault(FaultKind.TIMEOUT, delay=0.2)] * len(dms))  # turns take a while
    for channel_id in dms:
        bench.discord.places[channel_id] = ChannelPlace(guild_id=None)
        await sync_to_async(event_ingest_many)(
            batch=[(message(content="hello?", channel_id=channel_id), None)]
        )
    await sync_to_async(event_queue_consume)(own=OwnIdentity(bot_user_id=BOT.id))
    scheduler = Scheduler(
        runtime=bench.runtime, own=lambda: OwnIdentity(bot_user_id=BOT.id), max_loops=2
    )

    for channel_id in dms:
        scheduler.schedule(channel_id)
    await scheduler.idle()

    assert scheduler.most_running_loops == 2
    replied = await sync_to_async(list)(Turn.objects.values_list("channel_id", "status"))
    assert sorted(replied) == sorted((channel_id, "replied") for channel_id in dms)
    await scheduler.stop()
