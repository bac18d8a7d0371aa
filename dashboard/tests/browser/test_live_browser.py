"""The live screens in a real browser (Debian's Chromium) against daphne, the bot worker, the
sandbox and the fake model: the channel page follows the sandbox without a reload, the preview
shows what "alice says hello tomori" would send, and the turn just made is replayed as another
persona. Every screen is photographed to var/screenshots/."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest
from asgiref.sync import sync_to_async
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from playwright.async_api import Page, expect

from botproject.live_updates import UnreadCount, channel_group
from chat.models import Turn, UnreadEvent
from chat.tests.e2e.conftest import ALICE, GENERAL, eventually
from dashboard.tests.browser.conftest import running_daphne
from dashboard.tests.browser.test_dashboard_browser import PASSWORD, _create_user, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Counts the websocket extension's opened sockets (registered before any page script runs).
COUNT_SOCKETS = """
window.__wsOpens = 0;
document.addEventListener('htmx:wsOpen', () => { window.__wsOpens += 1; });
"""

# Layout checks read both elements' boxes in one script run, so a live swap cannot come between.
RIGHT_OF = """([left, right]) => document.querySelector(left).getBoundingClientRect().right
    <= document.querySelector(right).getBoundingClientRect().left"""
FITS_IN = """([inner, outer]) => document.querySelector(inner).getBoundingClientRect().right
    <= document.querySelector(outer).getBoundingClientRect().right"""


async def _sockets_opened(page: Page) -> int:
    return await page.evaluate("window.__wsOpens || 0")


def _latest_turn() -> Turn | None:
    return Turn.objects.filter(status=Turn.Status.REPLIED).order_by("-id").first()


async def test_a_moderator_watches_a_channel_previews_a_message_and_replays_the_turn(
    world, live_site, browser, screenshots
):
    await sync_to_async(_create_user)("mo", moderator=True)
    await world.start_worker()
    page = await log_in(browser, live_site, "mo", None)
    await page.add_init_script(COUNT_SOCKETS)

    # The overview: the worker's heartbeat (shards, latency) and the demo guild's channels.
    await page.goto(f"{live_site}/")
    await expect(page.locator(".guild-overview .gateway")).to_contain_text("shard 0 of 1")
    await expect(page.locator(".guild-overview .latency")).to_contain_text("ms")
    await expect(page.locator(".guild-overview .channels")).to_contain_text("#general")

    # The channel page: a message said in the sandbox appears, then the turn and its reply,
    # pushed over the socket: the page is never reloaded.
    await page.goto(f"{live_site}/channels/{GENERAL}/")
    await eventually(lambda: _sockets_opened(page))
    await page.evaluate("window.__sameDocument = true")
    world.say("hello tomori, how is the band?")
    window = page.locator("#window")
    await expect(window).to_contain_text("hello tomori, how is the band?")
    await expect(window.locator(".entry .refs code").first).to_have_text("ref_1")
    await expect(page.locator("#channel-turns")).to_contain_text("You said:")
    await expect(page.locator("#loop-state")).to_have_attribute("data-state", "idle")
    assert await page.evaluate("window.__sameDocument === true")
    # Names, not numbers; the latest turns fit their card.
    await expect(page.locator("h1 .name.channel")).to_have_text("#general")
    assert await page.evaluate(FITS_IN, ["#channel-turns table", "#channel-turns"])
    await page.screenshot(path=screenshots / "channel.png", full_page=True)

    # The preview: "as alice: hello tomori" shows the request that message would make.
    await page.click("text=Prompt preview")
    await page.select_option("#id_persona", "Tomori")
    await page.fill("#id_as", str(ALICE))
    await page.fill("#id_text", "hello tomori")
    await page.click("#preview-form button[type=submit]")
    request = page.locator("#preview-request")
    await expect(request).to_contain_text(re.compile(r'"Alice: \[ref_\d+\] hello tomori"'))
    await expect(request).to_contain_text("hello tomori, how is the band?")
    await expect(page.locator(".boundary.cache").first).to_be_visible()
    await expect(page.locator(".budget-fill")).to_be_visible()
    await page.screenshot(path=screenshots / "preview.png", full_page=True)
    # Nothing was sent, nothing recorded: one turn so far.
    assert await sync_to_async(Turn.objects.count)() == 1

    # The turn inspector: the turn just made, then its replay as Anon, asking the model.
    await page.click("nav.topnav >> text=Turns")
    await page.screenshot(path=screenshots / "turns.png", full_page=True)
    turn = await sync_to_async(_latest_turn)()
    await page.click(f"#turn-{turn.pk} a")
    await expect(page.locator("h1")).to_contain_text(f"Turn {turn.pk}")
    await expect(page.locator("#turn-reply")).to_contain_text("You said:")
    await expect(page.locator(".timings .t-model")).to_be_visible()
    await page.select_option("#id_replay_persona", "Anon")
    await page.check("#id_ask_model")
    await page.click("#replay button[type=submit]")
    diff = page.locator("#replay-diff")
    await expect(diff).to_contain_text("+++ replay (Anon)")
    await expect(diff).to_contain_text("You are Anon")
    # Streaming is the recorded request's own, so it is no change.
    await expect(diff).not_to_contain_text('- "stream"')
    await expect(diff).not_to_contain_text('+ "stream"')
    await expect(page.locator("#replay-reply")).to_contain_text("You said:")
    await page.screenshot(path=screenshots / "turn.png", full_page=True)
    # The replay delivered nothing and recorded nothing.
    await world.drained()
    assert len(world.bot_messages(GENERAL)) == 1
    assert await sync_to_async(Turn.objects.count)() == 1

    # Why (not)?: for the trigger, Tomori replied and Anon was not triggered.
    await page.goto(f"{live_site}/why/?message={turn.trigger_message_id}")
    answers = page.locator("#why-answer")
    await expect(answers).to_contain_text("Replied (trigger_word (tomori))")
    await expect(answers).to_contain_text("No trigger rule fired")
    await page.screenshot(path=screenshots / "why.png", full_page=True)

    # Back on the overview: the channels by name, the turn among the latest.
    await page.goto(f"{live_site}/")
    await expect(page.locator(".guild-overview .turn-list").first).to_contain_text(f"#{turn.pk}")
    await page.screenshot(path=screenshots / "overview.png", full_page=True)


async def test_an_admin_types_in_the_playground_and_watches_the_reply_arrive(
    world, live_site, browser, screenshots
):
    await sync_to_async(_create_user)("ada", staff=True)
    await world.start_worker()
    page = await log_in(browser, live_site, "ada", None)
    await page.add_init_script(COUNT_SOCKETS)
    await page.goto(f"{live_site}/playground/?channel={GENERAL}")
    await eventually(lambda: _sockets_opened(page))
    await page.evaluate("window.__sameDocument = true")
    chat = page.locator("#playground-chat")
    await expect(chat.locator("h2")).to_have_text("#general")
    await page.select_option("#id_author", str(ALICE))
    await page.fill("#id_content", "anon, sing something!")
    await page.click("#say-form button[type=submit]")
    await expect(page.locator("#say-status")).to_contain_text("sent")
    await expect(page.locator("#id_content")).to_have_value("")
    # The message, then the alter persona's reply under its own name, as they happen; the
    # newest message is the lowest one on screen.
    newest = chat.locator(".chat-message").first
    await expect(chat.locator(".chat-message:not(.persona) .chat-author")).to_have_text(["Alice"])
    await expect(newest.locator(".chat-author")).to_have_text("Anon")
    await expect(newest.locator(".pill")).to_have_text("persona")
    await expect(newest.locator("time")).to_have_text(re.compile(r"^\d\d:\d\d$"))
    await expect(chat.locator(".chat-message:not(.persona) .chat-text")).to_have_text(
        ["anon, sing something!"]
    )
    await expect(page.locator("#window")).to_contain_text("anon, sing something!")
    await expect(page.locator("#channel-turns")).to_contain_text("Anon")
    await expect(page.locator("#channel-turns")).to_contain_text("You said:")
    assert await page.evaluate("window.__sameDocument === true")
    # The chat beside the window (measured in one go: a live swap may replace either).
    assert await page.evaluate(RIGHT_OF, ["#playground-chat", "#window"])
    await page.screenshot(path=screenshots / "playground.png", full_page=True)


async def test_the_playground_sends_without_javascript(world, live_site, browser):
    await sync_to_async(_create_user)("ada", staff=True)
    await world.start_worker()
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await page.goto(f"{live_site}/accounts/login/")
    await page.fill("#id_username", "ada")
    await page.fill("#id_password", PASSWORD)
    await page.click("button[type=submit]")
    await page.goto(f"{live_site}/playground/?channel={GENERAL}")
    await page.select_option("#id_author", str(ALICE))
    await page.fill("#id_content", "tomori, no scripts here")
    await page.click("#say-form button[type=submit]")

    await expect(page).to_have_url(re.compile(r"/playground/\?channel=\d+&as=\d+#playground-chat$"))
    chat = page.locator("#playground-chat")
    await expect(chat).to_contain_text("tomori, no scripts here")
    await eventually(lambda: world.bot_messages(GENERAL))
    await page.reload()
    await expect(chat.locator(".chat-message").first.locator(".chat-author")).to_have_text("Tomori")
    await context.close()


# -- a Redis restart ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _redis_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="redis-restart-test-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _start_redis(port: int, directory: str) -> subprocess.Popen:
    """A private redis-server on a loopback port (never the shared one), without persistence."""
    return subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _redis_answers(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.write(b"PING\r\n")
    await writer.drain()
    answer = await reader.readline()
    writer.close()
    return answer.startswith(b"+PONG")


@contextlib.asynccontextmanager
async def private_redis() -> AsyncIterator[tuple[int, list[subprocess.Popen], str]]:
    port = _free_port()
    with _redis_dir() as directory:
        processes = [_start_redis(port, directory)]
        try:
            await eventually(lambda: _redis_answers(port))
            yield port, processes, directory
        finally:
            for process in processes:
                process.terminate()
                process.wait(10)


async def test_live_pages_reconnect_after_a_redis_restart(transactional_db, browser, screenshots):
    await sync_to_async(_create_user)("mo", moderator=True)
    async with private_redis() as (port, processes, directory):
        redis_url = f"redis://127.0.0.1:{port}/0"
        async with running_daphne({"REDIS_URL": redis_url}) as base_url:
            page = await log_in(browser, base_url, "mo", None)
            await page.add_init_script(COUNT_SOCKETS)
            await page.goto(f"{base_url}/channels/{GENERAL}/")
            await eventually(lambda: _sockets_opened(page))

            # Redis goes away and comes back on the same port, empty.
            processes[0].terminate()
            processes[0].wait(10)
            assert not await _redis_answers(port)
            processes.append(_start_redis(port, directory))
            await eventually(lambda: _redis_answers(port))

            # The page opens a new socket by itself (the consumer rejoins its group) …
            await eventually(lambda: _opened_again(page), within=30)
            # … and the next update reaches it.
            await sync_to_async(UnreadEvent.objects.create)(
                channel_id=GENERAL,
                message_id=1400000000000000030,
                guild_id=None,
                author_id=ALICE,
                event={"author": {"display_name": "Alice"}, "content": "back after the restart"},
            )
            layer = RedisChannelLayer(
                hosts=[redis_url], prefix=settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
            )
            await layer.group_send(channel_group(GENERAL), UnreadCount(count=1).as_message())
            await expect(page.locator("#unread-pool")).to_contain_text("back after the restart")
            await layer.close_pools()
            await page.screenshot(path=screenshots / "channel-after-redis-restart.png")


async def _opened_again(page: Page) -> bool:
    return await _sockets_opened(page) >= 2
