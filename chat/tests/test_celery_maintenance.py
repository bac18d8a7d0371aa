"""Short-term memory maintenance on a real Celery worker with beat, the real Redis broker, the
sandbox's REST API and the fake model server — all on loopback, in bounded time."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from chat.llm.fake_server import FakeLLMServer, Reply
from chat.models import ShortTermMemory, Turn
from chat.pipeline.triggers import TurnReason
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox
from chat.tests.celery_worker import WORKER_TIMEOUT, start_celery, stop
from chat.tests.e2e.conftest import DEMO_CONFIG, eventually
from personas.models import GuildConfig, Persona, UserPrivacy
from personas.services import config_import

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE, CAROL = DEMO_USER_IDS["alice"], DEMO_USER_IDS["carol"]


async def test_beat_refreshes_a_due_memory_with_one_model_call(tmp_path):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    await UserPrivacy.objects.acreate(
        guild=await GuildConfig.objects.aget(guild_id=DEMO_GUILD_ID), user_id=CAROL, level="full"
    )
    tomori = await Persona.objects.aget(guild__guild_id=DEMO_GUILD_ID, name="Tomori")
    memory = await ShortTermMemory.objects.acreate(
        persona=tomori,
        channel_id=GENERAL,
        guild_id=DEMO_GUILD_ID,
        turns_since_refresh=5,
        last_turn_at=timezone.now() - dt.timedelta(minutes=30),
    )
    async with SandboxServer(demo_sandbox()) as sandbox, FakeLLMServer() as llm:
        sandbox.sandbox.user_says(GENERAL, ALICE, "the gig moved to Sunday")
        sandbox.sandbox.user_says(GENERAL, CAROL, "carol's private words")
        llm.enqueue(Reply("The gig moved to Sunday, Alice says."))
        worker = start_celery(
            sandbox, llm, tmp_path / "beat-schedule", SHORT_TERM_MEMORY_MAINTENANCE_SECONDS="0.5"
        )
        try:

            async def refreshed() -> bool:
                await memory.arefresh_from_db()
                return memory.refreshed_at is not None

            await eventually(refreshed, within=WORKER_TIMEOUT)
        finally:
            await sync_to_async(stop)(worker)
        # The worker has stopped: nothing more can arrive.
        bodies = llm.chat_bodies

    assert len(bodies) == 1
    prompt = json.dumps(bodies[0]["messages"])
    assert "the gig moved to Sunday" in prompt
    assert "private words" not in prompt
    await memory.arefresh_from_db()
    assert memory.summary == "The gig moved to Sunday, Alice says."
    assert memory.turns_since_refresh == 0
    turn = await Turn.objects.aget(id=memory.last_refreshed_turn_id)
    assert (turn.reason, turn.status, turn.persona_name) == (
        TurnReason.MAINTENANCE,
        Turn.Status.REPLIED,
        "Tomori",
    )
    # The test's database work ran on sync_to_async's thread: close its connection there.
    await sync_to_async(connections.close_all)()
