"""Budgets across worker processes (DESIGN §3b): two `runbot` processes on PostgreSQL, each
serving one guild's shard, take 50 triggers at once (25 channels a guild, one trigger each,
the model answering slowly so calls overlap); each guild's day of tokens ends within one turn
of its limit, and every trigger past it is refused without a model call."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace, raw_discord_identifiers
from chat.models import SpendCounter, SpendReservation, Turn
from chat.pipeline.snowflakes import snowflake_from_ms
from chat.sandbox import GatewaySettings, SandboxServer
from chat.sandbox.demo import DEMO_BOT_ID
from chat.sandbox.state import Sandbox
from chat.tests.e2e.conftest import World, eventually
from chat.tests.e2e.test_restart import start_runbot
from personas.services import config_import

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres_only(reason="two worker processes share one database"),
]

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
CHANNELS = 25
TURN_TOKENS = 120
"""What the fake model reports for every answer: 100 prompt and 20 output tokens."""
LIMIT = 1_150
"""A guild's tokens a day: nine turns and a part of a tenth."""
ALICE = snowflake_from_ms(EPOCH_MS, increment=4000)
GUILDS = [snowflake_from_ms(EPOCH_MS + k, increment=1) for k in (0, 1)]
"""Guild k is on shard k of 2 (a guild's shard is its creation time's milliseconds mod 2)."""


def channels_of(k: int) -> list[int]:
    return [snowflake_from_ms(EPOCH_MS + 1000 * k + n, increment=2) for n in range(CHANNELS)]


def sandbox() -> Sandbox:
    world = Sandbox(token="spend-bot-token", bot_name="Tomori", bot_user_id=DEMO_BOT_ID)
    world.add_user("alice", user_id=ALICE, global_name="Alice")
    for k, guild_id in enumerate(GUILDS):
        world.add_guild(f"Guild {k}", guild_id=guild_id)
        world.add_member(guild_id, ALICE)
        for n, channel_id in enumerate(channels_of(k)):
            world.add_text_channel(guild_id, f"room-{n}", channel_id=channel_id)
    return world


def configuration() -> dict:
    persona = {
        "name": "Tomori",
        "main": True,
        "system_prompt": "You are Tomori. You answer briefly.",
        "triggers": ["tomori"],
        "llm": {"max_output_tokens": 200, "context_window": 8000},
    }
    return {
        "version": 1,
        "guilds": [
            {
                "id": str(guild_id),
                "name": f"Guild {k}",
                "personas": [persona],
                "limits": {"tokens_per_day": LIMIT},
            }
            for k, guild_id in enumerate(GUILDS)
        ],
    }


@pytest.fixture
async def spend_world(transactional_db, no_raw_ids_reach_the_model) -> AsyncIterator[World]:
    await sync_to_async(config_import)(data=configuration())
    llm_server = FakeLLMServer(
        responder=lambda body: Reply("noted.", prompt_tokens=100, completion_tokens=20),
        guard=raw_discord_identifiers,
        pace=StreamPace(first_token_s=0.3),
    )
    no_raw_ids_reach_the_model.findings = llm_server.guard_findings
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with SandboxServer(sandbox(), gateway=gateway) as server, llm_server as llm:
        try:
            yield World(sandbox=server, llm=llm)
        finally:
            await sync_to_async(connections.close_all)()


def settled_turns() -> dict[str, int]:
    statuses = Turn.objects.filter(status__in=[Turn.Status.REPLIED, Turn.Status.REFUSED])
    return {
        status: statuses.filter(status=status).count()
        for status in (Turn.Status.REPLIED, Turn.Status.REFUSED)
    }


def tokens_used(guild_id: int) -> int:
    day = SpendCounter.objects.get(guild_id=guild_id, persona_id=0, period="day")
    return day.tokens


async def test_two_workers_with_50_concurrent_triggers_overspend_at_most_one_turn_each(
    spend_world, tmp_path
):
    world = spend_world
    workers: list[subprocess.Popen] = [
        start_runbot(
            world, "--shard-ids", str(k), "--shard-count", "2", log=tmp_path / f"worker{k}.log"
        )
        for k in (0, 1)
    ]
    try:
        await eventually(
            lambda: len([s for s in world.sandbox.sessions() if s["connected"]]) == 2, within=60
        )
        await asyncio.sleep(0)  # both gateways are up: every trigger reaches a worker
        for k in (0, 1):
            for channel_id in channels_of(k):
                world.say("tomori, one question", channel_id=channel_id, author=ALICE)

        async def all_settled() -> bool:
            counts = await sync_to_async(settled_turns)()
            return sum(counts.values()) == 2 * CHANNELS

        await eventually(all_settled, within=120)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)

    counts = await sync_to_async(settled_turns)()
    for k, guild_id in enumerate(GUILDS):
        used = await sync_to_async(tokens_used)(guild_id)
        replied = await Turn.objects.filter(guild_id=guild_id, status="replied").acount()
        assert used == replied * TURN_TOKENS, k
        assert LIMIT <= used <= LIMIT + TURN_TOKENS, (k, used)  # spent, by at most one turn
    assert counts[Turn.Status.REFUSED] == 2 * CHANNELS - counts[Turn.Status.REPLIED]
    assert counts[Turn.Status.REFUSED] >= 2 * (CHANNELS - (LIMIT // TURN_TOKENS + 1))
    # Only the replies asked the model: a refused trigger called nothing.
    assert len(world.llm.chat_bodies) == counts[Turn.Status.REPLIED]
    assert not await SpendReservation.objects.aexists()
