"""Scale-out: a worker answers only the guilds on its own shards."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, GENERAL, eventually
from chat.worker import WorkerConfig, build_client
from personas.models import Persona

pytestmark = [pytest.mark.e2e, pytest.mark.serial, pytest.mark.django_db(transaction=True)]

DEMO_SHARD = (DEMO_GUILD_ID >> 22) % 2


@pytest.mark.parametrize(("shard", "answers"), [(DEMO_SHARD, True), (1 - DEMO_SHARD, False)])
async def test_a_worker_serves_only_its_shards(world, shard, answers):
    client = await world.start_worker(shard_ids=[shard], shard_count=2)
    assert [guild.id for guild in client.guilds] == ([DEMO_GUILD_ID] if answers else [])

    world.say("tomori, which shard are you?")
    if answers:
        await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert len(world.bot_messages(GENERAL)) == (1 if answers else 0)


@pytest.mark.parametrize(("shard", "answers"), [(0, True), (1, False)])
async def test_a_dm_reaches_only_the_worker_of_shard_0(world, shard, answers):
    await Persona.objects.filter(name="Tomori").aupdate(answers_dms=True)
    dm = world.sandbox.sandbox.open_dm(ALICE)
    client = await world.start_worker(shard_ids=[shard], shard_count=2)

    world.say("hello, are you there?", channel_id=dm)
    if answers:
        await eventually(lambda: world.bot_messages(dm))
    await world.drained()

    sessions = {s["shard"][0]: s["seq"] for s in world.sandbox.sessions() if s["connected"]}
    assert client.intake.guilds.get(dm, "unseen") == (None if answers else "unseen")
    assert len(world.bot_messages(dm)) == (1 if answers else 0)
    assert set(sessions) == {shard}
    if answers:
        [reply] = world.bot_messages(dm)
        assert "guild_id" not in reply and reply["channel_id"] == str(dm)
        assert "hello, are you there?" in reply["content"]  # the model saw the DM


async def test_a_worker_paces_identify_and_rest_through_redis(world):
    client = await world.start_worker(shard_ids=[0, 1], shard_count=2, shared_limits=True)
    limits = client.limits
    assert limits is not None
    assert limits.identify.max_concurrency == 1  # from the sandbox's GET /gateway/bot

    world.say("tomori, are you paced?")
    await eventually(lambda: world.bot_messages(GENERAL))

    identify_slot = f"{limits.identify._prefix}:0"
    assert await limits.redis.pttl(identify_slot) > 0  # both shards identified through it
    assert await limits.redis.zcard(limits.rest._key) >= 1  # the reply's REST calls counted


async def test_two_workers_starting_together_identify_one_bucket_5_s_apart(world):
    first = await world.start_worker(shard_ids=[0], shard_count=2, shared_limits=True)
    config = WorkerConfig(
        token=world.sandbox.token,
        api_base=world.sandbox.api_base,
        gateway_url=world.sandbox.gateway_url,
        shard_ids=[1],
        shard_count=2,
        shared_limits=True,
    )
    async with OpenAICompatibleClient(base_url=world.llm.base_url) as llm:
        second = build_client(config, llm=llm)
        task = asyncio.create_task(second.start(config.token))
        try:
            await eventually(second.is_ready, within=20)
        finally:
            await second.close()
            await asyncio.gather(task, return_exceptions=True)

    assert first.is_ready()
    assert [r.shard for r in world.sandbox.identifies()] == [(0, 2), (1, 2)]
    assert world.sandbox.identifies_too_soon(interval=5.0) == []


@pytest.mark.parametrize("status", [Turn.Status.DELIVERING, Turn.Status.RUNNING])
async def test_a_turn_the_previous_holder_left_after_the_takeover_is_settled(world, status):
    client = await world.start_worker(lease_seconds=0.5)
    trigger = world.say("an earlier message")
    await world.drained()
    # The worker that lost these shards wrote this after the new holder's start-up pass (its
    # database writes are not fenced): a turn begun before the takeover, its reply never sent.
    tomori = await Persona.objects.aget(name="Tomori")
    left = await Turn.objects.acreate(
        channel_id=GENERAL,
        guild_id=DEMO_GUILD_ID,
        persona=tomori,
        persona_name="Tomori",
        reason="trigger_word",
        trigger_message_id=int(trigger["id"]),
        status=status,
    )
    began = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    await Turn.objects.filter(id=left.id).aupdate(created_at=began)
    mine = await Turn.objects.acreate(
        channel_id=GENERAL, guild_id=DEMO_GUILD_ID, persona_name="Tomori", status=status
    )

    async def settled() -> bool:
        await left.arefresh_from_db()
        return left.status == Turn.Status.ABORTED

    await eventually(settled, within=10)
    assert client.scheduler is not None
    await mine.arefresh_from_db()
    assert mine.status == status  # begun after the takeover: this worker's own, untouched
