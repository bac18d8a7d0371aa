"""Discord's daily session start limit, through the real worker on the sandbox: each IDENTIFY
uses a start and a RESUME none, and a worker with fewer starts left than shards to identify
refuses to start, naming the limit and when it resets, before it sends a single IDENTIFY."""

from __future__ import annotations

import asyncio

import pytest
from django.db.models.functions import Now

from chat.gateway.limits import SessionStartLimitReached
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import ShardLease
from chat.tests.e2e.conftest import eventually
from chat.worker import WorkerConfig, run_worker

pytestmark = [pytest.mark.e2e, pytest.mark.serial, pytest.mark.django_db(transaction=True)]


async def test_each_identify_uses_a_session_start_and_a_resume_none(world):
    await world.start_worker(shard_ids=[0, 1], shard_count=2)
    assert world.sandbox.session_start_limit()["remaining"] == 998
    sessions = {s["session_id"] for s in world.sandbox.sessions()}

    assert world.sandbox.drop_connections() == 2
    await eventually(
        lambda: (
            len(world.sandbox.sessions()) == 2
            and all(s["connected"] for s in world.sandbox.sessions())
        )
    )

    assert {s["session_id"] for s in world.sandbox.sessions()} == sessions  # resumed
    assert world.sandbox.session_start_limit()["remaining"] == 998


async def test_a_worker_with_too_few_session_starts_left_refuses_to_start(world):
    world.sandbox.set_session_start_limit(remaining=1, reset_after=5 * 3600 + 30)
    config = WorkerConfig(
        token=world.sandbox.token,
        api_base=world.sandbox.api_base,
        gateway_url=world.sandbox.gateway_url,
        shard_ids=[0, 1],
        shard_count=2,
        shared_limits=True,
    )
    async with OpenAICompatibleClient(base_url=world.llm.base_url) as llm:
        with pytest.raises(SessionStartLimitReached) as refused:
            await asyncio.wait_for(run_worker(config, llm=llm, stop=asyncio.Event()), 30)

    message = str(refused.value)
    assert "session start limit: 1 of 1000 session starts left" in message
    assert "must identify 2 shards" in message
    assert "resets in 5 h 00 min (at 20" in message  # and the UTC time it resets at
    assert world.sandbox.identifies() == []  # not one IDENTIFY was sent
    assert world.sandbox.session_start_limit()["remaining"] == 1
    # The leases it took while starting are released for another worker.
    assert not await ShardLease.objects.filter(expires_at__gt=Now()).aexists()
