"""The Celery worker's /metrics on CELERY_METRICS_PORT: a real worker with beat and a prefork
pool (tasks run in child processes), scraped with ``prometheus_client``'s parser while beat's
maintenance queues a memory refresh that calls the model."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from chat.llm.fake_server import FakeLLMServer, Reply
from chat.models import ShortTermMemory
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox
from chat.tests.celery_worker import WORKER_TIMEOUT, start_celery, stop
from chat.tests.e2e.conftest import DEMO_CONFIG, eventually
from personas.models import Persona
from personas.services import config_import

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

MODEL = "celery-metrics-model"
MAINTENANCE = "chat.tasks.short_term_memory_maintenance_task"
REFRESH = "chat.tasks.short_term_memory_refresh_task"


def _url(log: Path) -> str | None:
    found = re.search(r"Celery metrics on (http://\S+/metrics)", log.read_text())
    return found.group(1) if found else None


async def _scrape(url: str) -> dict[tuple[str, frozenset], float]:
    async with httpx.AsyncClient() as http:
        response = await http.get(url)
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_the_worker_counts_its_tasks_beats_lag_and_the_tasks_model_calls(tmp_path):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    tomori = await Persona.objects.aget(guild__guild_id=DEMO_GUILD_ID, name="Tomori")
    await ShortTermMemory.objects.acreate(
        persona=tomori,
        channel_id=DEMO_CHANNEL_IDS["general"],
        guild_id=DEMO_GUILD_ID,
        turns_since_refresh=5,
        last_turn_at=timezone.now() - dt.timedelta(minutes=30),
    )
    log = tmp_path / "celery.log"
    async with SandboxServer(demo_sandbox()) as sandbox, FakeLLMServer() as llm:
        sandbox.sandbox.user_says(DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["alice"], "hi all")
        llm.enqueue(Reply("Alice greeted everyone.", prompt_tokens=70, completion_tokens=7))
        worker = start_celery(
            sandbox,
            llm,
            tmp_path / "beat-schedule",
            log=log,
            pool="prefork",
            CELERY_METRICS_PORT="0",
            LLM_MODEL=MODEL,
            SHORT_TERM_MEMORY_MAINTENANCE_SECONDS="0.5",
        )
        try:
            url = await eventually(lambda: _url(log), within=WORKER_TIMEOUT)

            async def refreshed():
                samples = await _scrape(url)
                done = _value(
                    samples, "personabot_celery_tasks_total", task=REFRESH, outcome="succeeded"
                )
                return samples if done else None

            samples = await eventually(refreshed, within=WORKER_TIMEOUT)
        finally:
            await sync_to_async(stop)(worker)

    assert _value(samples, "personabot_celery_tasks_total", task=REFRESH, outcome="succeeded") == 1
    assert _value(samples, "personabot_celery_tasks_total", task=REFRESH, outcome="failed") == 0
    assert _value(samples, "personabot_celery_task_seconds_count", task=REFRESH) == 1
    ran = _value(samples, "personabot_celery_tasks_total", task=MAINTENANCE, outcome="succeeded")
    assert ran >= 1
    # Beat sent each maintenance run; the refresh was queued by a task, not by beat.
    assert _value(samples, "personabot_celery_beat_lag_seconds_count", task=MAINTENANCE) >= ran
    assert 0 <= _value(samples, "personabot_celery_beat_lag_seconds_sum", task=MAINTENANCE) < 60
    assert (
        "personabot_celery_beat_lag_seconds_count",
        frozenset({("task", REFRESH)}),
    ) not in samples
    # The task's own model call and turn, counted in the pool's child process.
    model = {"model": MODEL}
    assert _value(samples, "personabot_model_requests_total", outcome="ok", **model) == 1
    assert _value(samples, "personabot_model_tokens_total", kind="prompt", **model) == 70
    assert _value(samples, "personabot_model_tokens_total", kind="completion", **model) == 7
    assert _value(samples, "personabot_turns_total", status="replied") == 1
    await sync_to_async(connections.close_all)()
