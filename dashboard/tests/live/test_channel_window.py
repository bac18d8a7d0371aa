"""The channel page shows the window as the bot saw it at its latest turn: ref_N keys, merged
runs, media, and what was left out and why — never a full-privacy user's words."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS
from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.privacy import user_privacy
from dashboard.tests.live.conftest import make_client

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CAROL = DEMO_USER_IDS["carol"]
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _replied() -> Turn | None:
    return Turn.objects.filter(status=Turn.Status.REPLIED).first()


async def test_the_window_shows_refs_merged_runs_media_and_counts_what_it_left_out(world):
    await sync_to_async(user_privacy)(CAROL, guild_id=DEMO_GUILD_ID, level="full")
    world.say("first part of a thought", author=ALICE)
    world.say("and the second part", author=ALICE)
    world.say("carol's secret words", author=CAROL)
    world.say("look at this", author=BOB, attachments=[Upload("cat.png", PNG, "image/png")])
    await world.start_worker()
    world.say("tomori, what do you make of it?", author=ALICE)
    await eventually(sync_to_async(_replied))
    await world.drained()

    client = await sync_to_async(make_client)("mo", moderator=True)
    html = (await sync_to_async(client.get)(f"/channels/{GENERAL}/")).content.decode()
    assert "2 merged" in html
    assert "first part of a thought" in html and "and the second part" in html
    assert '<span class="pill media">media_1</span>' in html
    assert "<code>ref_1</code><code>ref_2</code>" in html  # the merged run's two messages
    assert "<strong>1</strong> full privacy or blacklisted: never shown" in html
    assert "carol's secret words" not in html and "Carol" not in html
    assert "tomori, what do you make of it?" in html
