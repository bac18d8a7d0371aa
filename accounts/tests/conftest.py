"""A sandbox serving Discord's OAuth2 endpoints, and the demo guild configured."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from accounts.tests.discord_login import discord_login_settings
from chat.sandbox.demo import demo_sandbox
from chat.sandbox.server import SandboxServer
from personas.services import config_import

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "chat" / "sandbox" / "demo_config.json"


@pytest.fixture
async def discord(transactional_db, settings) -> AsyncIterator[SandboxServer]:
    """The demo sandbox, with Log in with Discord pointed at it and its guild configured
    (alice: Manage Server, carol: Manage Messages, bob: neither)."""
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    async with SandboxServer(demo_sandbox()) as server:
        discord_login_settings(settings, server)
        try:
            yield server
        finally:
            await sync_to_async(connections.close_all)()
