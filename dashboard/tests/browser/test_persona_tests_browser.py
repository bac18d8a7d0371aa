"""Persona tests in a real browser (Debian's Chromium) against daphne, the bot worker, the
sandbox, the fake model and a real Celery worker: an admin saves a turn as a test case, edits
the persona's form without saving, runs the set against those unsaved values and reads the
recorded reply and the new one side by side, the words that changed marked."""

from __future__ import annotations

import os
import re
import uuid

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from playwright.async_api import expect

from chat.llm.fake_server import Reply
from chat.models import PersonaTestRun, Turn
from chat.tests.celery_worker import broker_url, start_celery, stop
from chat.tests.e2e.conftest import GENERAL, eventually
from dashboard.tests.browser.conftest import running_daphne
from dashboard.tests.browser.test_dashboard_browser import _create_user, log_in
from personas.models import Persona

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HAIKU = "alice, I remember\nyour voice like the evening tide\nwelcome back again"


@pytest.fixture
async def site_with_celery(world, tmp_path):
    """Daphne pointed at the world (as `live_site`) and a Celery worker (no beat) taking the
    tasks daphne queues: both on a broker database and a queue of this test's own."""
    queue = f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    worker = start_celery(
        world.sandbox,
        world.llm,
        tmp_path / "beat-schedule",
        beat=False,
        TEST_CELERY_QUEUE=queue,
        LLM_MODEL=settings.LLM_MODEL,
    )
    env = {
        "DISCORD_TOKEN": world.sandbox.token,
        "DISCORD_API_BASE": world.sandbox.api_base,
        "DISCORD_GATEWAY_URL": world.sandbox.gateway_url,
        "LLM_BASE_URL": world.llm.base_url,
        "LIVE_TEST_CELERY_QUEUE": queue,
        "LIVE_TEST_CELERY_BROKER": broker_url(),
    }
    try:
        async with running_daphne(env) as base_url:
            yield base_url
    finally:
        await sync_to_async(stop)(worker)


def _replied() -> Turn | None:
    return Turn.objects.filter(status=Turn.Status.REPLIED).order_by("-id").first()


async def test_an_admin_runs_a_saved_turn_against_unsaved_persona_values(
    world, site_with_celery, browser, screenshots
):
    site = site_with_celery
    await sync_to_async(_create_user)("ada", staff=True)
    await world.start_worker()
    world.say("tomori, do you remember me?")
    turn = await eventually(sync_to_async(_replied))
    await world.drained()
    page = await log_in(browser, site, "ada", None)

    # Save the turn as a test case, from its page.
    await page.goto(f"{site}/turns/{turn.pk}/")
    await page.fill("#id_case_name", "remembers alice")
    await page.click("#save-as-case button[type=submit]")
    await expect(page.locator(".messages")).to_contain_text(
        "Saved as a test case of Tomori: “remembers alice”"
    )
    await expect(page.locator("#baseline")).to_contain_text("You said:")

    # Edit the persona's form, save nothing, run the set against those values.
    tomori = await Persona.objects.select_related("guild").aget(name="Tomori")
    await page.goto(f"{site}/guilds/{tomori.guild.guild_id}/personas/{tomori.pk}/")
    await page.fill("#id_system_prompt", "You are Tomori. You answer in haiku.")
    await page.uncheck("#id_test_saved")
    world.llm.enqueue(Reply(HAIKU))
    await page.click("#run-draft-tests")

    await expect(page.locator("h1")).to_contain_text("Run ")
    await expect(page.locator("#test-run-progress")).to_be_visible()
    await page.screenshot(path=screenshots / "persona-test-run-progress.png", full_page=True)
    # The page follows the run (Celery) to its end without a reload.
    await expect(page.locator("#test-run-status")).to_have_text("Finished", timeout=60_000)
    result = page.locator(".test-result[data-case='remembers alice']")
    old = result.locator(".reply-column[data-title='Baseline (recorded)'] .reply")
    new = result.locator(".reply-column[data-title='draft (unsaved)'] .reply")
    await expect(old).to_contain_text("You said:")
    await expect(new).to_contain_text("your voice like the evening tide")
    await expect(new.locator("ins").first).to_be_visible()  # the new words, marked
    await expect(new).not_to_contain_text("You said:")  # the old words are not run in
    lost = result.locator(".reply-column[data-title='draft (unsaved)'] .removed-words del")
    await expect(lost.first).to_be_visible()  # but listed: what the new reply no longer says
    await expect(page.locator("#test-run-cost")).to_contain_text("1 model call")
    await page.screenshot(path=screenshots / "persona-test-run.png", full_page=True)

    # The draft was never saved, nothing reached Discord, the request went to the model.
    stored = await Persona.objects.aget(pk=tomori.pk)
    assert "haiku" not in stored.system_prompt
    assert len(world.bot_messages(GENERAL)) == 1
    run = await PersonaTestRun.objects.aget()
    assert run.status == PersonaTestRun.Status.FINISHED and run.draft["for"] == [tomori.pk]
    sent = world.llm.chat_bodies[-1]
    assert sent["messages"][0]["content"] == "You are Tomori. You answer in haiku."
    assert re.search(r"Alice: \[ref_\d+\] tomori, do you remember me\?", str(sent["messages"]))
