"""Short-term memory maintenance on a real Celery worker with beat, the real Redis broker, the
sandbox's REST API and the fake model server — all on loopback, in bounded time."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from chat.llm.fake_server import FakeLLMServer, Reply
from chat.models import ShortTermMemory, Turn
from chat.pipeline.triggers import TurnReason
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox
from chat.tests.e2e.conftest import DEMO_CONFIG, eventually
from personas.models import GuildConfig, Persona, UserPrivacy
from personas.services import config_import

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE, CAROL = DEMO_USER_IDS["alice"], DEMO_USER_IDS["carol"]
BROKER_DB = 5
"""A Redis database of its own, so this worker never takes another test run's tasks."""
WORKER_TIMEOUT = 60.0


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def broker_url() -> str:
    base = settings.REDIS_URL.rsplit("/", 1)[0] if settings.REDIS_URL.count("/") > 2 else None
    return f"{base or settings.REDIS_URL.rstrip('/')}/{BROKER_DB}"


def start_celery(sandbox: SandboxServer, llm: FakeLLMServer, schedule: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key",
        "DATABASE_URL": database_url(),
        "REDIS_URL": broker_url(),
        "DISCORD_TOKEN": sandbox.token,
        "DISCORD_API_BASE": sandbox.api_base,
        "LLM_BASE_URL": llm.base_url,
        "SHORT_TERM_MEMORY_MAINTENANCE_SECONDS": "0.5",
    }
    command = [
        *(sys.executable, "-m", "celery", "-A", "botproject", "worker", "--beat"),
        *("--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"),
        *("--schedule", str(schedule), "--loglevel", "INFO"),
    ]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


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
        worker = start_celery(sandbox, llm, tmp_path / "beat-schedule")
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
