"""Long-term memory in a real browser against a live daphne, the bot worker and the Discord
sandbox: an admin adds a memory about alice on the memories screen, alice's next question gets
it in the prompt, and the screen's search shows it with its score."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from playwright.async_api import expect

from chat.models import Memory
from chat.pipeline.recall import MEMORY_HEADER
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, GENERAL, eventually
from dashboard.tests.browser.test_dashboard_browser import _create_user, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


async def test_a_memory_an_admin_adds_in_the_browser_reaches_the_next_prompt(
    world, live_dashboard, browser, screenshots
):
    await sync_to_async(_create_user)("ada", staff=True)
    await world.start_worker()
    page = await log_in(browser, live_dashboard, "ada", None)

    await page.goto(f"{live_dashboard}/guilds/{DEMO_GUILD_ID}/memories/")
    await page.select_option("select[name=kind]", "personal")
    await page.fill("input[name=user_id]", str(ALICE))
    await page.fill("textarea[name=text]:below(select[name=kind])", "Alice's cat is called Miso")
    await page.click("text=Add the memory")
    await expect(page.locator("table.memories")).to_contain_text("Alice's cat is called Miso")
    memory = await sync_to_async(Memory.objects.get)()
    assert (memory.user_id, memory.source) == (ALICE, "admin")

    world.sandbox.sandbox.user_says(GENERAL, ALICE, "tomori, what is my cat called?")
    await eventually(lambda: world.llm.chat_bodies)
    prompt = str(world.llm.chat_bodies[0]["messages"])
    assert MEMORY_HEADER in prompt and "Alice's cat is called Miso" in prompt

    await page.fill("input[name=q]", "what is the cat called")
    await page.press("input[name=q]", "Enter")
    row = page.locator(f"#memory-{memory.id}")
    await expect(row.locator("td.score")).to_contain_text("kw 1.00")
    await page.screenshot(path=screenshots / "memories.png", full_page=True)
    await page.goto(f"{live_dashboard}/guilds/{DEMO_GUILD_ID}/documents/")
    await page.screenshot(path=screenshots / "documents.png", full_page=True)
