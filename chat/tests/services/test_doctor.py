"""The deployment check's service: what it reads and how it puts the lines together, with a
Discord that is passed in (a fake holding one guild's layout, or none at all), the fake model
server, a moderation endpoint, the real database and Redis."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.llm.fake_server import FakeLLMServer
from chat.models import DoctorReport, Turn
from chat.pipeline.permissions import GuildRoles, Overwrite, OverwriteKind, Permission, Role
from chat.ports import (
    BotApplication,
    ChannelLayout,
    DiscordReadRefused,
    DiscordUnavailable,
    GuildLayout,
    TokenRefused,
    WebhookCount,
)
from chat.services.doctor import deployment_examine, doctor_run
from personas.services import config_import

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = Path(__file__).resolve().parents[3] / "personas" / "tests" / "fixtures" / "config.json"
GUILD = 1100000000000000001
GENERAL, POETRY, TALK, GONE = 1200000000000000001, 1200000000000000002, 1200000000000000009, 7
BOT, BOT_ROLE = 1300000000000000001, 1300000000000000002
ALL_FLAGS = (1 << 12) | (1 << 14) | (1 << 18)
SERVED = 275415157824 & ~(1 << 29)  # the invite's permissions, without Manage Webhooks


class FakeDeployment:
    """A Discord that knows one guild (the fixture's first) with #general (a denial for
    @everyone) and #poetry (synced with the Talk category)."""

    intents = (1 << 1) | (1 << 15) | 1
    bot_user_id = BOT
    command_names = frozenset({"privacy", "memory"})

    def __init__(self, *, flags: int = ALL_FLAGS, registered=frozenset({"privacy", "memory"})):
        self.flags = flags
        self.registered = registered
        self.general_overwrites = (
            Overwrite(GUILD, OverwriteKind.ROLE, deny=Permission.SEND_MESSAGES),
        )

    async def application(self) -> BotApplication:
        return BotApplication(id=BOT, name="Persona bot", flags=self.flags, bot_name="Tomori")

    async def bot_guilds(self) -> dict[int, str]:
        return {GUILD: "Café"}

    async def guild_layout(self, guild_id: int) -> GuildLayout:
        talk = (Overwrite(BOT_ROLE, OverwriteKind.ROLE, deny=Permission.MANAGE_WEBHOOKS),)
        return GuildLayout(
            guild_id=guild_id,
            name="Café",
            roles=GuildRoles(
                guild_id=guild_id,
                owner_id=1,
                roles={
                    guild_id: Role(guild_id, "@everyone", 0),
                    BOT_ROLE: Role(BOT_ROLE, "Tomori", SERVED | Permission.MANAGE_WEBHOOKS),
                },
            ),
            bot_role_ids=(BOT_ROLE,),
            bot_role_name="Tomori",
            bot_timed_out_until=None,
            channels=(
                ChannelLayout(TALK, "Talk", "category", None, talk),
                ChannelLayout(GENERAL, "general", "text", None, self.general_overwrites),
                ChannelLayout(POETRY, "poetry", "text", TALK, talk, synced=True),
            ),
        )

    async def webhook_count(self, channel_id: int) -> WebhookCount:
        return WebhookCount(total=15, own=0)

    async def registered_commands(self, guild_id: int | None) -> frozenset[str]:
        if self.registered is None:
            raise DiscordReadRefused("403 Missing Access", status=403, code=50001)
        return self.registered


def opener(found: FakeDeployment | Exception):
    @contextlib.asynccontextmanager
    async def open_it() -> AsyncIterator[FakeDeployment]:
        if isinstance(found, Exception):
            raise found
        yield found

    return open_it


@pytest.fixture
def configured(db):
    data = json.loads(FIXTURE.read_text())
    data["guilds"] = data["guilds"][:1]
    guild = data["guilds"][0]
    guild["channels"] = [
        {"id": str(GENERAL), "mode": "reactive"},
        {"id": str(POETRY), "mode": "reactive"},
        {"id": str(GONE), "mode": "reactive"},
    ]
    config_import(data=data)
    return guild


def lines(examination) -> dict[str, str]:
    return {check.name: check.line for check in examination.checks}


async def examine(found) -> object:
    return await deployment_examine(discord=opener(found), now=timezone.now())


async def test_each_channel_is_judged_as_discord_computes_it(configured, settings):
    settings.LLM_BASE_URL = ""

    found = await examine(FakeDeployment())

    by_name = lines(found)
    assert by_name["#general (Café)"].startswith(
        "FAIL #general (Café): missing Send Messages (to reply): #general's permissions deny it "
        "to @everyone"
    )
    assert by_name["#poetry (Café)"].startswith(
        "FAIL #poetry (Café): missing Manage Webhooks (to speak as Anon): the Talk category's "
        "permissions (#poetry is synced) deny it to Tomori"
    )
    assert by_name[f"channel {GONE} (Café)"].startswith(
        f"FAIL channel {GONE} (Café): configured, but Café has no such channel"
    )
    assert by_name["webhooks #general (Café)"].startswith(
        "FAIL webhooks #general (Café): 15 of 15, none of them the bot's"
    )
    assert "webhooks #poetry (Café)" not in by_name  # unreadable without Manage Webhooks
    assert by_name["commands Hoshimi Lounge"] == "ok   commands Hoshimi Lounge: 2 registered"
    assert found.application_id == BOT
    assert found.invite_url.endswith("&permissions=275415157824")


async def test_commands_discord_will_not_list_fail(configured, settings):
    settings.LLM_BASE_URL = ""

    found = await examine(FakeDeployment(registered=None))

    line = lines(found)["commands Hoshimi Lounge"]
    assert line.startswith("FAIL commands Hoshimi Lounge: Discord would not list them")


async def test_without_discord_only_the_token_line_speaks_for_it(configured, settings):
    settings.LLM_BASE_URL = ""

    found = await examine(DiscordUnavailable("DISCORD_TOKEN is not set"))

    names = [check.name for check in found.checks]
    assert names[0] == "token" and not found.checks[0].ok
    assert "DISCORD_TOKEN is not set" in found.checks[0].detail
    assert not any(name.startswith(("#", "guild", "commands", "intent")) for name in names)
    assert names[-3:] == ["database", "redis", "refused turns"]


async def test_a_refused_token_says_where_to_get_a_new_one(configured, settings):
    settings.LLM_BASE_URL = ""

    found = await examine(TokenRefused("401 Unauthorized"))

    assert found.checks[0].line.startswith("FAIL token: Discord refused DISCORD_TOKEN (401")
    assert found.ok is False


async def test_the_model_endpoint_and_each_model_in_use(configured, settings):
    async with FakeLLMServer(models=("fake-model",)) as llm:
        settings.LLM_BASE_URL = llm.base_url
        settings.LLM_MODEL = "fake-model"
        settings.LLM_VISION_MODEL = "eyes"
        settings.LLM_VISION_BASE_URL = ""

        found = await examine(DiscordUnavailable("no"))

    by_name = lines(found)
    assert by_name[f"model endpoint {llm.base_url}"].startswith("ok   model endpoint")
    assert by_name["model fake-model"].startswith("ok   model fake-model: listed (used by ")
    assert "Anon (Hoshimi Lounge)" in by_name["model fake-model"]
    assert by_name["model eyes"].startswith(
        f"FAIL model eyes: {llm.base_url}/models does not list it (used by LLM_VISION_MODEL)"
    )


async def test_an_unset_model_endpoint_is_named(configured, settings):
    settings.LLM_BASE_URL = ""

    found = await examine(DiscordUnavailable("no"))

    assert lines(found)["model endpoint"].startswith("FAIL model endpoint: LLM_BASE_URL is not set")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_redis_that_does_not_answer_fails(configured, settings):
    settings.LLM_BASE_URL = ""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"

    found = await examine(DiscordUnavailable("no"))

    assert lines(found)["redis"].startswith("FAIL redis: no answer to PING")
    assert lines(found)["database"].startswith("ok   database:")


@contextlib.asynccontextmanager
async def moderation_endpoint(status: int, body: dict) -> AsyncIterator[str]:
    async def moderations(request: web.Request) -> web.Response:
        payload = await request.json()
        assert payload["input"] == "hello"
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/moderations", moderations)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"results": [{"flagged": False}]}, "ok   moderation endpoint"),
        (401, {"error": "bad key"}, "FAIL moderation endpoint"),
        (200, {"results": []}, "FAIL moderation endpoint"),
    ],
)
async def test_the_moderation_endpoint_when_one_is_set(
    configured, settings, status, body, expected
):
    settings.LLM_BASE_URL = ""
    async with moderation_endpoint(status, body) as base_url:
        settings.MODERATION_BASE_URL = base_url

        found = await examine(DiscordUnavailable("no"))

    [line] = [c.line for c in found.checks if c.name.startswith("moderation endpoint")]
    assert line.startswith(expected)


async def test_refused_turns_pass_once_their_permission_is_back(configured, settings):
    settings.LLM_BASE_URL = ""

    def refused(channel_id: int, name: str, permission: str) -> None:
        Turn.objects.create(
            guild_id=GUILD,
            channel_id=channel_id,
            persona_name="Tomori",
            reason="mention",
            status=Turn.Status.FAILED,
            discord_refusal={
                "code": 50013,
                "reason": "Missing Permissions",
                "permission": permission,
                "channel_id": str(channel_id),
                "channel_name": name,
            },
        )

    await sync_to_async(refused)(GENERAL, "general", "Add Reactions")
    fixed = await examine(FakeDeployment())
    await sync_to_async(refused)(GENERAL, "general", "Send Messages")
    missing = await examine(FakeDeployment())

    assert lines(fixed)["refused turns"].endswith("Add Reactions in #general (1); fixed since")
    assert lines(missing)["refused turns"].startswith("FAIL refused turns: 2 turns in the last 24")


async def test_a_run_saves_its_report_and_drops_those_older_than_a_week(configured, settings):
    settings.LLM_BASE_URL = ""
    old = await DoctorReport.objects.acreate(origin=DoctorReport.Origin.SCHEDULE, ok=True)
    await DoctorReport.objects.filter(pk=old.pk).aupdate(
        created_at=timezone.now() - dt.timedelta(days=8)
    )
    asked = await DoctorReport.objects.acreate(origin=DoctorReport.Origin.DASHBOARD)

    saved, examination = await doctor_run(
        discord=opener(FakeDeployment()),
        origin=DoctorReport.Origin.SCHEDULE,
        now=timezone.now,
        report_id=asked.pk,
    )

    assert saved.pk == asked.pk and saved.origin == DoctorReport.Origin.DASHBOARD
    assert saved.ok is False and saved.finished_at is not None
    assert [c["name"] for c in saved.checks] == [c.name for c in examination.checks]
    assert saved.bot_guilds == {str(GUILD): "Café"}
    assert not await DoctorReport.objects.filter(pk=old.pk).aexists()
