"""The overview's scale-out panel in a real browser (Debian's Chromium) against daphne and the
bot worker on the sandbox: leases taken and released while the page is open appear without a
reload, up to a reshard in progress. Photographed to var/screenshots/overview-reshard.png."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import sync_to_async
from playwright.async_api import expect

from chat.leases import shard_leases_claim, shard_leases_release
from chat.models import WorkerHeartbeat
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.shards import ShardSet
from chat.tests.e2e.conftest import eventually
from dashboard.tests.browser.test_dashboard_browser import _create_user, log_in
from dashboard.tests.browser.test_live_browser import COUNT_SOCKETS, _sockets_opened

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TTL = dt.timedelta(seconds=60)
X = (DEMO_GUILD_ID >> 22) % 2  # the demo guild's shard of 2; the worker runs it
Y = 1 - X


def _claim(holder: str, shard_ids: tuple[int, ...], count: int) -> int | None:
    return shard_leases_claim(shards=ShardSet(ids=shard_ids, count=count), holder=holder, ttl=TTL)


async def test_an_operator_watches_leases_move_through_a_reshard(
    world, live_site, browser, screenshots
):
    await sync_to_async(_create_user)("op", staff=True)
    await world.start_worker(shard_ids=[X], shard_count=2)
    beat = await eventually(lambda: WorkerHeartbeat.objects.afirst())
    worker = beat.holder
    page = await log_in(browser, live_site, "op", None)
    await page.add_init_script(COUNT_SOCKETS)
    await page.goto(f"{live_site}/")
    await eventually(lambda: _sockets_opened(page))
    await page.evaluate("window.__sameDocument = true")
    row = page.locator(f'#scale-out tr.worker[data-holder="{worker}"]')
    await expect(row).to_contain_text("no live lease")

    # The worker takes its lease, as runbot's does; another machine holds the other shard.
    assert await sync_to_async(_claim)(worker, (X,), 2)
    assert await sync_to_async(_claim)("old-host:4711:0a1b", (Y,), 2)
    await expect(row).to_contain_text(f"shard {X} of 2 · fence")
    await expect(row.locator(".lease-state")).to_have_text("serving")
    await expect(page.locator(f'.shard-map .shard[data-shard="{Y}"]')).to_contain_text("old-host")

    # Reshard 2 → 4: the other machine is stopped, a new worker takes its guilds under 4.
    await sync_to_async(shard_leases_release)(
        shards=ShardSet(ids=(Y,), count=2), holder="old-host:4711:0a1b"
    )
    assert await sync_to_async(_claim)("new-host:4712:2c3d", (Y, Y + 2), 4)
    reshard = page.locator("#reshard")
    await expect(reshard).to_contain_text("Reshard in progress")
    await expect(reshard).to_contain_text(f"2 shards still unowned ({X}, {X + 2})")
    waiting = page.locator(f'.shard-map .shard[data-shard="{X + 2}"]')
    await expect(waiting).to_have_attribute("data-state", "waiting")
    await expect(waiting).to_contain_text(f"waiting for shard {X} of 2")
    assert await page.evaluate("window.__sameDocument === true")  # never reloaded
    await page.screenshot(path=screenshots / "overview-reshard.png", full_page=True)
