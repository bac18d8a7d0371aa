"""The dashboard in a real browser (Debian's Chromium via Playwright) against a live daphne,
the bot worker and the Discord sandbox. Every screen is photographed to var/screenshots/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from playwright.async_api import Browser, Page, expect

from chat.models import Turn
from chat.pipeline.tokens import default_token_counter
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import DEMO_CONFIG, GENERAL, World, eventually
from dashboard.access import MODERATORS_GROUP
from personas.models import Persona
from personas.services import config_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a long browser-test password"
PROMPT_START = "You are Mutsumi, a quiet guitarist"
PROMPT_END = " who grows cucumbers and speaks in few words."


def _create_user(username: str, *, staff: bool = False, moderator: bool = False) -> None:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=staff)
    if moderator:
        # Transactional tests flush every table afterwards, the migration's group included.
        group, _ = Group.objects.get_or_create(name=MODERATORS_GROUP)
        user.groups.add(group)


async def log_in(browser: Browser, base_url: str, username: str, shots: Path | None) -> Page:
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    page = await context.new_page()
    await page.goto(f"{base_url}/")
    await expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    if shots:
        await page.screenshot(path=shots / "login.png")
    await page.fill("#id_username", username)
    await page.fill("#id_password", PASSWORD)
    await page.click("button[type=submit]")
    await expect(page.locator("h1")).to_have_text("Guilds")
    return page


def replies_from(world: World, name: str) -> list[dict]:
    return [m for m in world.bot_messages(GENERAL) if m["author"]["username"] == name]


def answered_triggers(persona_name: str) -> list[int]:
    """The trigger message ids of the persona's replied turns, oldest first."""
    turns = Turn.objects.filter(persona_name=persona_name, status=Turn.Status.REPLIED)
    return list(turns.order_by("id").values_list("trigger_message_id", flat=True))


async def test_an_admin_creates_a_persona_in_the_browser_and_it_answers_in_the_sandbox(
    world, live_dashboard, browser, screenshots
):
    await sync_to_async(_create_user)("ada", staff=True)
    await world.start_worker()
    page = await log_in(browser, live_dashboard, "ada", screenshots)
    await page.screenshot(path=screenshots / "guilds.png", full_page=True)

    await page.click("text=Sandbox Café")
    await expect(page.locator("#id_name")).to_have_value("Sandbox Café")
    await page.screenshot(path=screenshots / "guild.png", full_page=True)
    await page.click("nav.tabs >> text=Personas")
    await page.screenshot(path=screenshots / "personas.png", full_page=True)
    await page.click("text=New persona")

    # The token count follows the system prompt as it is typed.
    counter = default_token_counter()
    tokens = page.locator("#token-count strong")
    await expect(tokens).to_have_attribute("data-tokens", "0")
    prompt = page.locator("#id_system_prompt")
    await prompt.press_sequentially(PROMPT_START, delay=5)
    await expect(tokens).to_have_attribute("data-tokens", str(counter.count(PROMPT_START)))
    await prompt.press_sequentially(PROMPT_END, delay=5)
    await expect(tokens).to_have_attribute(
        "data-tokens", str(counter.count(PROMPT_START + PROMPT_END))
    )

    await page.fill("#id_name", "Mutsumi")
    await page.fill("#id_triggers", "cucumber")
    avatar = f"{live_dashboard}/static/dashboard/avatar.svg"
    await page.fill("#id_avatar_url", avatar)
    await expect(page.locator("#avatar-preview img")).to_have_attribute("src", avatar)
    rows = page.locator("#sample-rows .sample-row")
    await expect(rows).to_have_count(1)
    await page.click("text=Add a row")
    await expect(rows).to_have_count(2)
    await rows.nth(0).locator("textarea").fill("{user}: do you grow anything?")
    await rows.nth(1).locator("select").select_option("assistant")
    await rows.nth(1).locator("textarea").fill("{char}: ...cucumbers.")
    await page.screenshot(path=screenshots / "persona-new.png", full_page=True)
    await page.click("text=Create the persona")
    await expect(page.locator(".messages")).to_contain_text("Created Mutsumi.")
    await page.screenshot(path=screenshots / "persona.png", full_page=True)

    mutsumi = await sync_to_async(Persona.objects.get)(
        guild__guild_id=DEMO_GUILD_ID, name="Mutsumi"
    )
    assert mutsumi.sample_dialogue == [
        {"role": "user", "content": "{user}: do you grow anything?"},
        {"role": "assistant", "content": "{char}: ...cucumbers."},
    ]

    # The running worker answers the new trigger word as the new persona.
    trigger = world.say("I brought a cucumber for you")
    [reply] = await eventually(lambda: replies_from(world, "Mutsumi"))
    assert reply["webhook_id"] is not None
    await world.drained()  # the delivery is recorded after Discord has the reply
    assert await sync_to_async(answered_triggers)("Mutsumi") == [int(trigger["id"])]
    assert world.llm.chat_bodies[-1]["messages"][0]["content"] == PROMPT_START + PROMPT_END

    # Change the trigger word in the browser: the next turn uses it, with no restart.
    await page.fill("#id_triggers", "kyuri")
    await page.click("text=Save")
    await expect(page.locator(".messages")).to_contain_text("Saved Mutsumi.")
    await expect(page.locator(".changes li").first).to_contain_text("ada")
    await page.screenshot(path=screenshots / "persona-history.png", full_page=True)
    old_word = world.say("one more cucumber?")
    new_word = world.say("kyuri time")
    await eventually(lambda: len(replies_from(world, "Mutsumi")) == 2)
    await world.settle()
    answered = await sync_to_async(answered_triggers)("Mutsumi")
    assert answered == [int(trigger["id"]), int(new_word["id"])]
    assert int(old_word["id"]) not in answered

    # The other screens, with a block added through its form.
    await page.click("nav.tabs >> text=Channels")
    await page.screenshot(path=screenshots / "channels.png", full_page=True)
    await page.click("table >> text=#general")  # channels by name (the id in its tooltip)
    await expect(page.locator("h1 .name.channel")).to_have_attribute(
        "title", f"channel id {GENERAL}"
    )
    await page.screenshot(path=screenshots / "channel-settings.png", full_page=True)
    await page.click("nav.tabs >> text=Blocks")
    await page.select_option("#id_persona", "Mutsumi")
    await page.fill("#id_user_id", "1191168914227200101")
    await page.select_option("#id_type", "mute")
    await page.fill("#id_reason", "spams cucumbers")
    await page.click("text=Add the block")
    await expect(page.locator("table")).to_contain_text("spams cucumbers")
    await page.screenshot(path=screenshots / "blocks.png", full_page=True)
    await page.click("text=1191168914227200101")
    await expect(page.locator("#id_reason")).to_have_value("spams cucumbers")
    await page.screenshot(path=screenshots / "block.png", full_page=True)
    await page.click("nav.tabs >> text=User privacy")
    await page.screenshot(path=screenshots / "users.png", full_page=True)
    await page.click("text=Configuration file")
    await page.screenshot(path=screenshots / "config-file.png", full_page=True)
    await page.goto(f"{live_dashboard}/guilds/new/")
    await page.screenshot(path=screenshots / "guild-new.png", full_page=True)

    phone = await browser.new_page(viewport={"width": 390, "height": 844})
    await phone.context.add_cookies(await page.context.cookies())
    await phone.goto(f"{live_dashboard}/guilds/{DEMO_GUILD_ID}/personas/{mutsumi.pk}/")
    await phone.screenshot(path=screenshots / "persona-phone.png", full_page=True)


async def test_a_moderator_sees_the_screens_without_edit_controls(
    live_dashboard, browser, screenshots
):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    await sync_to_async(_create_user)("mo", moderator=True)
    tomori = await sync_to_async(Persona.objects.get)(name="Tomori")
    page = await log_in(browser, live_dashboard, "mo", None)
    await expect(page.locator("header .who")).to_have_text("mo · moderator (read-only)")

    for path, shot in [
        (f"/guilds/{DEMO_GUILD_ID}/", "moderator-guild.png"),
        (f"/guilds/{DEMO_GUILD_ID}/personas/{tomori.pk}/", "moderator-persona.png"),
        (f"/guilds/{DEMO_GUILD_ID}/channels/", "moderator-channels.png"),
    ]:
        await page.goto(live_dashboard + path)
        await expect(page.locator("main")).to_be_visible()
        await expect(
            page.locator("main input, main textarea, main select, main button")
        ).to_have_count(0)
        await expect(page.locator("main form")).to_have_count(0)
        await page.screenshot(path=screenshots / shot, full_page=True)

    await page.goto(f"{live_dashboard}/guilds/{DEMO_GUILD_ID}/personas/{tomori.pk}/")
    await expect(page.locator("main")).to_contain_text(
        "You are Tomori, a quiet girl who writes poetry."
    )
