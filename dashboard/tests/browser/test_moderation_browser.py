"""A withheld reply on the dashboard, in a real browser (Debian's Chromium) against daphne and the
bot worker with moderation on: the turn page lists the checks, and the withheld text appears
only when the moderator clicks for it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from playwright.async_api import expect

from chat.llm.fake_server import Reply, StreamPace
from chat.llm.moderation import ModerationOnError
from chat.models import Turn
from chat.tests.e2e.conftest import GENERAL, eventually
from dashboard.tests.browser.test_dashboard_browser import _create_user, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST = "The first part says hello and sets the scene for what follows."
FLAGGED = "The second part turns dark: flag:violence and worse follow here."


async def test_a_moderator_reveals_a_withheld_reply_with_a_click(
    world, live_site, browser, screenshots
):
    await sync_to_async(_create_user)("mo", moderator=True)
    world.llm.enqueue(
        Reply(f"Tomori: {FIRST}\n\n{FLAGGED}", pace=StreamPace(first_token_s=0.2, words_per_s=20))
    )
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)
    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    turn = await eventually(
        lambda: Turn.objects.filter(trigger_message_id=int(trigger), status="withheld").afirst()
    )

    page = await log_in(browser, live_site, "mo", None)
    await page.goto(f"{live_site}/turns/?status=withheld")
    await expect(page.locator("tr.turn-row")).to_have_count(1)
    await page.click(f"a[href='/turns/{turn.pk}/']")
    moderation = page.locator("#moderation")
    await expect(moderation.locator("tr.moderation-check")).to_have_count(2)
    await expect(moderation).to_contain_text("violence")
    await expect(page.locator("body")).not_to_contain_text("flag:violence")

    await page.click("text=Show the withheld text")
    await expect(page.locator("#withheld-text")).to_contain_text(FLAGGED)
    await expect(page).to_have_url(f"{live_site}/turns/{turn.pk}/")  # swapped in place
    await page.screenshot(path=screenshots / "turn-withheld.png", full_page=True)
