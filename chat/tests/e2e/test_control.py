"""The worker follows configuration changes announced on the bot.control group."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import DEMO_CONFIG, eventually
from personas.services import config_import

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


async def test_an_imported_change_reaches_the_running_worker(world):
    client = await world.start_worker()
    assert client.adapter.main_persona_name[DEMO_GUILD_ID] == "Tomori"

    document = json.loads(DEMO_CONFIG.read_text())
    tomori, anon = document["guilds"][0]["personas"]
    tomori["main"], anon["main"] = False, True
    await sync_to_async(config_import)(data=document)

    await eventually(lambda: client.adapter.main_persona_name[DEMO_GUILD_ID] == "Anon")
