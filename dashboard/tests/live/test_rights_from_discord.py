"""A right taken in Discord is gone on the dashboard within 60 s, without logging out: the real
worker sees GUILD_MEMBER_UPDATE (a role removed) and GUILD_MEMBER_REMOVE (a kick) over the
sandbox's gateway, while the sandbox's REST answers the same (``users/@me/guilds``)."""

from __future__ import annotations

import time

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from accounts.models import GuildRight
from accounts.tests.discord_login import discord_login, discord_login_settings
from chat.sandbox.demo import (
    DEMO_GUILD_ID,
    DEMO_HELPER_ROLE_ID,
    DEMO_MODERATOR_ROLE_ID,
    DEMO_USER_IDS,
)
from chat.tests.e2e.conftest import ALICE, eventually

CAROL = DEMO_USER_IDS["carol"]

pytestmark = pytest.mark.django_db(transaction=True)

WITHIN = 60.0


async def _bot_rest(world, method: str, path: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.request(
            method,
            world.sandbox.api_base + path,
            headers={"Authorization": f"Bot {world.sandbox.token}"},
        )
    assert response.status_code == 204, response.text


@sync_to_async
def _role_of_alice() -> str | None:
    right = GuildRight.objects.filter(
        user__socialaccount__uid=str(ALICE), guild_id=DEMO_GUILD_ID
    ).first()
    return right.role if right else None


def _status(client: Client, method: str, path: str, data: dict | None = None) -> int:
    return getattr(client, method)(path, data or {}).status_code


async def test_a_role_removed_in_discord_is_gone_within_a_minute_then_the_person(
    dashboard_on_world, settings
):
    world = dashboard_on_world
    discord_login_settings(settings, world.sandbox)
    await world.start_worker()
    world.sandbox.sandbox.member_role_add(DEMO_GUILD_ID, ALICE, DEMO_HELPER_ROLE_ID)
    client = Client()
    assert (await discord_login(client, ALICE)).status_code == 302
    guild_page = f"/guilds/{DEMO_GUILD_ID}/"
    assert await _role_of_alice() == "admin"
    assert (
        '<form method="post" novalidate>'
        in (await sync_to_async(client.get)(guild_page)).content.decode()
    )

    started = time.monotonic()
    await _bot_rest(
        world, "DELETE", f"/guilds/{DEMO_GUILD_ID}/members/{ALICE}/roles/{DEMO_MODERATOR_ROLE_ID}"
    )
    [guild] = [g for g in world.sandbox.sandbox.user_guilds(ALICE) if g["id"] == str(DEMO_GUILD_ID)]
    assert int(guild["permissions"]) & (1 << 5) == 0  # REST says the same as the gateway

    await eventually(_role_is("moderator"), within=WITHIN)
    assert time.monotonic() - started < WITHIN
    page = (await sync_to_async(client.get)(guild_page)).content.decode()
    assert "moderator (read-only)" in page and '<form method="post" novalidate>' not in page
    posted = await sync_to_async(_status)(client, "post", guild_page, {"name": "Hijacked"})
    assert posted == 403

    started = time.monotonic()
    await _bot_rest(world, "DELETE", f"/guilds/{DEMO_GUILD_ID}/members/{ALICE}")
    await eventually(_role_is(None), within=WITHIN)
    response = await sync_to_async(client.get)(guild_page)
    assert time.monotonic() - started < WITHIN
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def _role_is(role: str | None):
    async def check() -> bool:
        return await _role_of_alice() == role

    return check


async def test_a_role_edited_in_discord_takes_its_right_from_everyone_holding_it(
    dashboard_on_world, settings
):
    world = dashboard_on_world
    discord_login_settings(settings, world.sandbox)
    await world.start_worker()
    client = Client()
    assert (await discord_login(client, CAROL)).status_code == 302
    assert await _role_of(CAROL) == "moderator"

    world.sandbox.sandbox.role_edit(DEMO_GUILD_ID, DEMO_HELPER_ROLE_ID, permissions=1 << 10)

    await eventually(_role_of_is(CAROL, None), within=WITHIN)
    response = await sync_to_async(client.get)(f"/guilds/{DEMO_GUILD_ID}/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@sync_to_async
def _role_of(user_id: int) -> str | None:
    right = GuildRight.objects.filter(
        user__socialaccount__uid=str(user_id), guild_id=DEMO_GUILD_ID
    ).first()
    return right.role if right else None


def _role_of_is(user_id: int, role: str | None):
    async def check() -> bool:
        return await _role_of(user_id) == role

    return check
