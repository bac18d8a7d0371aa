"""The usage page in a real browser against a live daphne and the bot worker: after alice's
questions the moderator sees today's bar in the server-drawn chart (its tooltip gives the
tokens the model reported), the budget left, and alice by name."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from playwright.async_api import expect

from chat.llm.fake_server import Reply
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import GENERAL, eventually
from dashboard.tests.browser.test_dashboard_browser import _create_user, log_in
from personas.models import GuildConfig, ModelPrice

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


async def test_the_usage_chart_shows_todays_tokens_and_the_budget_left(
    world, live_dashboard, browser, screenshots
):
    await sync_to_async(_create_user)("mo", moderator=True)
    await GuildConfig.objects.filter(guild_id=DEMO_GUILD_ID).aupdate(
        limits={"tokens_per_day": 10_000, "usd_per_month": "5", "user_turns": None, "notice": ""}
    )
    await ModelPrice.objects.acreate(model="gpt-4o-mini", input="0.15", output="0.6")
    world.llm.enqueue(
        Reply("first", prompt_tokens=1500, cached_prompt_tokens=1000, completion_tokens=60),
        Reply("second", prompt_tokens=1700, cached_prompt_tokens=1400, completion_tokens=40),
    )
    await world.start_worker()
    for n in (1, 2):
        world.say(f"tomori, question {n}")
        await eventually(lambda n=n: len(world.bot_messages(GENERAL)) == n)
        await world.drained()
    page = await log_in(browser, live_dashboard, "mo", None)

    await page.goto(f"{live_dashboard}/guilds/{DEMO_GUILD_ID}/usage/")

    tokens = page.locator("figure.usage-chart").first
    await expect(tokens.locator("figcaption")).to_contain_text("Tokens per day")
    today = tokens.locator("g.bar").last
    await expect(today.locator("rect")).to_have_count(3)  # uncached, cached, output
    await expect(today.locator("title")).to_contain_text(
        "2 calls, 800 uncached prompt, 2,400 cached prompt, 100 output tokens"
    )
    box = await tokens.locator("svg").bounding_box()
    assert box is not None and box["width"] > 400 and box["height"] > 100
    stack = [await rect.bounding_box() for rect in await today.locator("rect").all()]
    assert all(b is not None and b["height"] > 0 for b in stack)
    budget = page.locator("#budget table")
    await expect(budget).to_contain_text("tokens a day")
    await expect(budget).to_contain_text("3,300")  # spent today: 3,200 prompt + 100 output
    await expect(budget).to_contain_text("6,700")  # left
    await expect(page.locator('table[data-breakdown="users"]')).to_contain_text("Alice")
    await page.screenshot(path=screenshots / "usage.png", full_page=True)
