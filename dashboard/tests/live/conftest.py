"""Fixtures for the live screens: the end-to-end world (sandbox, fake model, the real worker)
with the dashboard pointed at it, and clients for each role."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from chat.tests.e2e.conftest import no_raw_ids_reach_the_model, world  # noqa: F401
from dashboard.access import MODERATORS_GROUP


@pytest.fixture
def dashboard_on_world(world, settings):  # noqa: F811
    """The dashboard's settings pointed at the world's sandbox and fake model."""
    settings.DISCORD_TOKEN = world.sandbox.token
    settings.DISCORD_API_BASE = world.sandbox.api_base
    settings.DISCORD_GATEWAY_URL = world.sandbox.gateway_url
    settings.LLM_BASE_URL = world.llm.base_url
    return world


@pytest.fixture
def guild_async(transactional_db):
    """The personas fixture's guilds, imported, for transactional (async) tests."""
    import json

    from dashboard.tests.conftest import FIXTURE
    from personas.services import config_import

    config_import(data=json.loads(FIXTURE.read_text()))


def make_client(username: str, *, staff: bool = False, moderator: bool = False) -> Client:
    """A logged-in test client (a transactional test flushes the migration's group, so it is
    made again when missing)."""
    user = User.objects.create_user(username, password="x" * 20, is_staff=staff)
    if moderator:
        group, _ = Group.objects.get_or_create(name=MODERATORS_GROUP)
        user.groups.add(group)
    client = Client()
    client.force_login(user)
    return client
