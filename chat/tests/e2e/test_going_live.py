"""Going live against the sandbox playing Discord's part: ``manage.py doctor`` names each blocker
(an intent switched off, a channel overwrite, a missing Manage Webhooks, a guild the bot is not
in) and passes once all is fixed; ``runbot`` stops at once on a 4014 close or a REST 401; a turn
Discord refuses with 50013 shows the channel and the permission by name."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from chat.llm.fake_server import Reply
from chat.models import DoctorReport, Turn
from chat.pipeline.going_live import ChannelDuties, invite_permissions
from chat.pipeline.permissions import Permission
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.tests.e2e.conftest import GENERAL, eventually
from chat.tests.e2e.test_restart import ROOT, _database_url
from personas.services import config_import

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

POETRY = DEMO_CHANNEL_IDS["poetry"]
ALICE = DEMO_USER_IDS["alice"]
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)
ELSEWHERE = 1191168914227299999
"""A guild the configuration names and the bot was never invited to."""
INVITED_WITH = invite_permissions([ChannelDuties(alter_personas=("Anon",))])
"""What the demo configuration's invite link asks for (Tomori, and Anon by webhook)."""


@pytest.fixture
def deployment(world, settings):
    """The settings a deployment on the sandbox has (as ``runbot`` and ``doctor`` read them),
    and the demo guild made a real server's: owned by alice, the bot holding only the role
    its invite gave it."""
    settings.DISCORD_TOKEN = world.sandbox.token
    settings.DISCORD_API_BASE = world.sandbox.api_base
    settings.DISCORD_GATEWAY_URL = world.sandbox.gateway_url
    settings.LLM_BASE_URL = world.llm.base_url
    settings.LLM_MODEL = "fake-model"
    settings.DISCORD_GLOBAL_COMMANDS = False
    discord = world.sandbox.sandbox
    discord.transfer_ownership(DEMO_GUILD_ID, ALICE)
    discord.set_role_permissions(DEMO_GUILD_ID, discord.bot_role_id(DEMO_GUILD_ID), INVITED_WITH)
    return world


async def doctor(*arguments: str) -> tuple[int, str]:
    """``manage.py doctor`` in this process (on a thread of its own, as a command runs):
    (exit status, what it printed)."""

    def run() -> tuple[int, str]:
        out = io.StringIO()
        try:
            call_command("doctor", *arguments, stdout=out)
        except SystemExit as stop:
            return int(stop.code or 0), out.getvalue()
        return 0, out.getvalue()

    return await sync_to_async(run, thread_sensitive=False)()


def failures(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("FAIL")]


async def test_doctor_names_the_message_content_intent_when_it_is_off(deployment):
    sandbox = deployment.sandbox.sandbox
    sandbox.set_application_flags(sandbox.application_flags & ~MESSAGE_CONTENT_FLAGS)

    status, output = await doctor()

    assert status == 1
    [intent] = [line for line in failures(output) if "intent" in line]
    assert intent.startswith("FAIL intent Message Content:")
    assert "switch on Message Content Intent" in intent
    assert "Privileged Gateway Intents" in intent
    assert "ok   intent Server Members: switched on" in output


async def test_doctor_names_general_and_send_messages_when_an_overwrite_denies_it(deployment):
    sandbox = deployment.sandbox.sandbox
    sandbox.set_overwrite(GENERAL, DEMO_GUILD_ID, deny=Permission.SEND_MESSAGES)

    status, output = await doctor()

    assert status == 1
    [general] = [line for line in failures(output) if "#general" in line]
    assert general.startswith("FAIL #general (Sandbox Café): missing Send Messages (to reply)")
    assert "#general's permissions deny it to @everyone" in general
    assert "allow Send Messages for the bot's role (Tomori) there" in general
    assert not [line for line in failures(output) if "#poetry" in line]


async def test_doctor_names_the_missing_manage_webhooks_where_an_alter_persona_speaks(deployment):
    sandbox = deployment.sandbox.sandbox
    bot_role = sandbox.bot_role_id(DEMO_GUILD_ID)
    sandbox.set_overwrite(POETRY, bot_role, deny=Permission.MANAGE_WEBHOOKS)

    status, output = await doctor()

    assert status == 1
    [poetry] = [line for line in failures(output) if "#poetry" in line]
    assert "missing Manage Webhooks (to speak as Anon)" in poetry
    assert "#poetry's permissions deny it to Tomori" in poetry


async def test_doctor_prints_the_invite_link_for_a_configured_guild_the_bot_is_not_in(deployment):
    await sync_to_async(config_import)(
        data={"version": 1, "guilds": [{"id": str(ELSEWHERE), "name": "Elsewhere"}]}
    )

    status, output = await doctor()

    assert status == 1
    invite = (
        f"https://discord.com/oauth2/authorize?client_id={deployment.sandbox.sandbox.bot_user_id}"
        "&scope=bot%20applications.commands&permissions="
    )
    [elsewhere] = [line for line in failures(output) if "Elsewhere" in line]
    assert elsewhere.startswith("FAIL guild Elsewhere: configured, but the bot is not in it")
    permissions = int(re.search(re.escape(invite) + r"(\d+)", elsewhere)[1])
    assert permissions == invite_permissions([ChannelDuties()])  # no persona speaks by webhook
    assert not permissions & Permission.ADMINISTRATOR


async def test_doctor_passes_when_all_is_fixed_and_the_worker_registered_its_commands(deployment):
    await deployment.start_worker()

    status, output = await doctor()

    assert status == 0, failures(output)
    assert "ok   commands Sandbox Café:" in output
    assert "ok   #general (Sandbox Café): every permission its personas need" in output
    assert "ok   webhooks #poetry (Sandbox Café): 0 of 15" in output
    assert f"&permissions={INVITED_WITH}" in output
    report = await DoctorReport.objects.aget()
    assert report.ok is True and report.origin == DoctorReport.Origin.COMMAND
    assert report.application_id == deployment.sandbox.sandbox.bot_user_id


async def test_doctor_as_its_own_process_answers_json_and_its_exit_status(deployment):
    sandbox = deployment.sandbox.sandbox
    sandbox.set_overwrite(GENERAL, DEMO_GUILD_ID, deny=Permission.VIEW_CHANNEL)

    done = await sync_to_async(subprocess.run)(
        [sys.executable, "manage.py", "doctor", "--json"],
        cwd=ROOT,
        env=_environment(deployment),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["ok"] is False
    [general] = [c for c in answer["checks"] if c["channel_id"] == str(GENERAL) and not c["ok"]]
    assert general["name"] == "#general (Sandbox Café)"
    assert general["detail"].startswith("missing View Channel (to see the channel at all)")
    assert general["guild_id"] == str(DEMO_GUILD_ID)
    assert answer["invite_url"].endswith(f"&permissions={INVITED_WITH}")


def _runbot(world) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "runbot"],
        cwd=ROOT,
        env=_environment(world),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _environment(world, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key",
        "DATABASE_URL": _database_url(),
        "DISCORD_TOKEN": world.sandbox.token,
        "DISCORD_API_BASE": world.sandbox.api_base,
        "DISCORD_GATEWAY_URL": world.sandbox.gateway_url,
        "LLM_BASE_URL": world.llm.base_url,
        "LLM_MODEL": "fake-model",
        **more,
    }


async def test_runbot_stops_within_10_s_of_a_4014_close_naming_the_intent(deployment):
    sandbox = deployment.sandbox.sandbox
    sandbox.set_application_flags(sandbox.application_flags & ~MESSAGE_CONTENT_FLAGS)

    worker = _runbot(deployment)
    try:
        await eventually(lambda: deployment.sandbox.identifies(), within=60)
        refused_at = time.monotonic()
        status = await sync_to_async(worker.wait)(timeout=30)
        stopped_after = time.monotonic() - refused_at
        stderr = worker.stderr.read()
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()

    assert status != 0
    assert stopped_after < 10
    assert [r.reason for r in deployment.sandbox.identifies()] == ["disallowed_intents"]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("CommandError: Discord closed the gateway with 4014")
    assert "the Message Content intent" in last and "Message Content Intent" in last


async def test_runbot_stops_on_a_refused_token_at_login(deployment):
    done = await sync_to_async(subprocess.run)(
        [sys.executable, "manage.py", "runbot"],
        cwd=ROOT,
        env=_environment(deployment, DISCORD_TOKEN="not-the-token"),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("CommandError: Discord refused DISCORD_TOKEN (401 Unauthorized)")
    assert "Reset Token" in last
    assert deployment.sandbox.identifies() == []


async def test_a_turn_refused_with_50013_shows_the_channel_and_permission_on_its_page(deployment):
    sandbox = deployment.sandbox.sandbox
    sandbox.set_overwrite(
        GENERAL, sandbox.bot_role_id(DEMO_GUILD_ID), deny=Permission.SEND_MESSAGES
    )
    deployment.llm.enqueue(Reply("Tomori: hello"))
    await deployment.start_worker()

    deployment.say("tomori, are you there?")
    turn = await eventually(
        lambda: Turn.objects.filter(status=Turn.Status.FAILED).afirst(), within=30
    )

    assert turn.discord_refusal == {
        "code": 50013,
        "reason": "Missing Permissions",
        "permission": "Send Messages",
        "channel_id": str(GENERAL),
        "channel_name": "general",
    }
    assert deployment.bot_messages(GENERAL) == []
    page = await sync_to_async(_page_as_admin)(f"/turns/{turn.pk}/")
    assert "Discord refused this turn" in page
    assert "Send Messages" in page and "#general" in page
    overview = await sync_to_async(_page_as_admin)("/")
    assert "Send Messages in #general" in overview


def _page_as_admin(path: str) -> str:
    admin, _ = User.objects.get_or_create(username="root", defaults={"is_staff": True})
    client = Client()
    client.force_login(admin)
    response = client.get(path)
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.content.decode())


async def test_an_alter_persona_refused_its_webhook_names_manage_webhooks(deployment):
    sandbox = deployment.sandbox.sandbox
    bot_role = sandbox.bot_role_id(DEMO_GUILD_ID)
    sandbox.set_overwrite(POETRY, bot_role, deny=Permission.MANAGE_WEBHOOKS)
    await deployment.start_worker()

    deployment.say("anon, sing for us", channel_id=POETRY)
    turn = await eventually(
        lambda: Turn.objects.filter(status=Turn.Status.FAILED).afirst(), within=30
    )

    assert turn.persona_name == "Anon"
    assert turn.discord_refusal["permission"] == "Manage Webhooks"
    assert turn.discord_refusal["channel_name"] == "poetry"
    assert turn.error == (
        "delivery failed: Discord refused (50013 Missing Permissions): the bot lacks Manage "
        "Webhooks in #poetry"
    )
