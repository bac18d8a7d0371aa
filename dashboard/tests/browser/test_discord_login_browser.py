"""Log in with Discord in a real browser: the dashboard's login page, the sandbox's consent page,
back to the dashboard showing only the guilds where Discord gives the person a right."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from playwright.async_api import Browser, expect

from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS
from chat.tests.e2e.conftest import World
from dashboard.tests.browser.conftest import running_daphne
from personas.services import config_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NIGHT_OWLS = 1191168914227200099


def _second_guild(world: World) -> None:
    """A guild the bot serves where alice is a member without any right."""
    sandbox = world.sandbox.sandbox
    sandbox.add_guild("Night Owls", guild_id=NIGHT_OWLS)
    sandbox.add_text_channel(NIGHT_OWLS, "den")
    sandbox.add_member(NIGHT_OWLS, DEMO_USER_IDS["alice"])
    config_import(data={"version": 1, "guilds": [{"id": str(NIGHT_OWLS), "name": "Night Owls"}]})


async def test_a_person_logs_in_with_discord_and_sees_only_their_guilds(
    world, browser: Browser, screenshots
):
    await sync_to_async(_second_guild)(world)
    grants = world.sandbox.sandbox.oauth
    env = {
        "DISCORD_TOKEN": world.sandbox.token,
        "DISCORD_API_BASE": world.sandbox.api_base,
        "DISCORD_GATEWAY_URL": world.sandbox.gateway_url,
        "DISCORD_OAUTH_AUTHORIZE_URL": world.sandbox.oauth_authorize_url,
        "DISCORD_CLIENT_ID": grants.client_id,
        "DISCORD_CLIENT_SECRET": grants.client_secret,
    }
    async with running_daphne(env) as base_url:
        context = await browser.new_context(viewport={"width": 1200, "height": 900})
        page = await context.new_page()
        await page.goto(f"{base_url}/")
        await expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
        await page.screenshot(path=screenshots / "login-with-discord.png")

        await page.click("text=Log in with Discord")
        await expect(page).to_have_url(re.compile(re.escape(world.sandbox.oauth_authorize_url)))
        await expect(page.locator("body")).to_contain_text("wants to: guilds, identify")
        await page.screenshot(path=screenshots / "discord-consent.png")
        await page.click("text=Log in as alice")

        await expect(page.locator("h1")).to_have_text("Guilds")
        await expect(page).to_have_url(f"{base_url}/")
        await expect(page.locator(".who")).to_contain_text("Alice · admin")
        await expect(page.locator(".messages")).to_have_text("Logged in with Discord as Alice.")
        await expect(page.locator("main")).to_contain_text("Sandbox Café")
        await expect(page.locator("main")).not_to_contain_text("Night Owls")
        await page.screenshot(path=screenshots / "overview-as-a-guild-admin.png", full_page=True)

        response = await page.goto(f"{base_url}/guilds/{NIGHT_OWLS}/")
        assert response is not None and response.status == 404
        response = await page.goto(f"{base_url}/guilds/{DEMO_GUILD_ID}/")
        assert response is not None and response.status == 200
        await page.fill("#id_name", "Sandbox Café at dusk")
        await page.click("main form button[type=submit] >> text=Save")
        await expect(page.locator("h1")).to_contain_text("Sandbox Café at dusk")

        await page.click("nav.tabs >> text=Audit")
        change = page.locator("ol.audit li.change").first
        await expect(change).to_contain_text("Alice")
        await expect(change).to_contain_text("(Discord)")
        await expect(change).to_contain_text("dashboard form")
        await expect(change.locator("td.before")).to_contain_text("Sandbox Café")
        await expect(change.locator("td.after")).to_contain_text("Sandbox Café at dusk")
        await page.screenshot(path=screenshots / "audit.png", full_page=True)
        await context.close()
