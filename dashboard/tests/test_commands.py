"""``ensureadmin`` (run by ``make run``) and the moderators group migration."""

from __future__ import annotations

import importlib
import io
import re

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import authenticate
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command

from dashboard.access import MODERATORS_GROUP

pytestmark = pytest.mark.django_db


def run_ensureadmin() -> str:
    out = io.StringIO()
    call_command("ensureadmin", stdout=out)
    return out.getvalue()


def test_an_empty_database_gets_an_admin_whose_password_is_printed_once():
    first = run_ensureadmin()
    password = re.search(r"password '([^']+)'", first).group(1)
    admin = authenticate(username="admin", password=password)
    assert admin is not None and admin.is_staff and admin.is_superuser
    assert run_ensureadmin() == ""
    assert User.objects.count() == 1


def test_nothing_is_created_when_a_staff_user_exists():
    User.objects.create_user("ops", password="x-long-password", is_staff=True)
    assert run_ensureadmin() == ""
    assert not User.objects.filter(username="admin").exists()


def test_a_non_staff_user_named_admin_is_not_promoted():
    User.objects.create_user("admin", password="x-long-password")
    with pytest.raises(CommandError, match="taken by a non-staff user"):
        run_ensureadmin()
    assert not User.objects.get(username="admin").is_staff


def test_the_migration_makes_the_moderators_group():
    # Run on its own: a transactional test run before this one may have flushed the
    # migration's row from the test database.
    migration = importlib.import_module("dashboard.migrations.0001_moderators_group")
    Group.objects.filter(name=MODERATORS_GROUP).delete()

    migration.create_group(django_apps, None)

    assert Group.objects.filter(name=MODERATORS_GROUP).exists()
