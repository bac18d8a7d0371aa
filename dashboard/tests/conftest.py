"""Dashboard fixtures: the three kinds of logged-in user and a configured guild."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from dashboard.access import MODERATORS_GROUP
from personas.models import GuildConfig
from personas.services import config_import

FIXTURE = Path(__file__).resolve().parents[2] / "personas" / "tests" / "fixtures" / "config.json"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def guild(db) -> GuildConfig:
    """The personas fixture file's guilds, imported; returns the first (with Tomori and Anon)."""
    config_import(data=json.loads(FIXTURE.read_text()))
    return GuildConfig.objects.get(guild_id=1100000000000000001)


@pytest.fixture
def admin_user(db) -> User:
    return User.objects.create_user("ada", password=PASSWORD, is_staff=True)


@pytest.fixture
def moderator_user(db) -> User:
    user = User.objects.create_user("mo", password=PASSWORD)
    # get_or_create: a transactional test run before this one flushes the migration's group.
    user.groups.add(Group.objects.get_or_create(name=MODERATORS_GROUP)[0])
    return user


@pytest.fixture
def other_user(db) -> User:
    return User.objects.create_user("otto", password=PASSWORD)


def _client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client(admin_user) -> Client:  # overrides pytest-django's admin_client
    return _client_for(admin_user)


@pytest.fixture
def moderator_client(moderator_user) -> Client:
    return _client_for(moderator_user)


@pytest.fixture
def other_client(other_user) -> Client:
    return _client_for(other_user)
