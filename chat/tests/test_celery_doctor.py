"""Celery beat checks the deployment every ``DOCTOR_SECONDS`` on a real worker, against the
sandbox's REST API, the fake model server, the database and Redis, and keeps the report the
overview shows."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.fake_server import FakeLLMServer
from chat.models import DoctorReport
from chat.pipeline.going_live import ChannelDuties, invite_permissions, invite_url
from chat.sandbox import SandboxServer
from chat.sandbox.demo import demo_sandbox
from chat.tests.celery_worker import WORKER_TIMEOUT, start_celery, stop
from chat.tests.e2e.conftest import DEMO_CONFIG, eventually
from personas.services import config_import

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


async def test_beat_checks_the_deployment_and_keeps_the_report(tmp_path):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    sandbox = demo_sandbox()
    async with SandboxServer(sandbox) as discord, FakeLLMServer() as llm:
        worker = start_celery(
            discord, llm, tmp_path / "beat-schedule", DOCTOR_SECONDS="0.5", LLM_MODEL="fake-model"
        )
        try:

            async def reported() -> DoctorReport | None:
                return await DoctorReport.objects.exclude(ok=None).afirst()

            report = await eventually(reported, within=WORKER_TIMEOUT)
        finally:
            await sync_to_async(stop)(worker)
            await sync_to_async(connections.close_all)()

    lines = {check["name"]: check for check in report.checks}
    assert report.origin == DoctorReport.Origin.SCHEDULE
    assert lines["token"]["ok"] and lines["intent Message Content"]["ok"]
    assert lines["#general (Sandbox Café)"]["ok"] and lines["model fake-model"]["ok"]
    assert lines["database"]["ok"] and lines["redis"]["ok"]
    assert not lines["commands Sandbox Café"]["ok"]  # no worker has registered them
    assert report.ok is False
    assert report.application_id == sandbox.bot_user_id
    assert report.invite_url == invite_url(
        application_id=sandbox.bot_user_id,
        permissions=invite_permissions([ChannelDuties(alter_personas=("Anon",))]),
    )
