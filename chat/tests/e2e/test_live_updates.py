"""What the dashboard will show arrives on the Channels layer (real Redis) after each change."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

from botproject.live_updates import channel_group
from chat.models import Turn
from chat.tests.e2e.conftest import GENERAL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


async def test_a_turn_publishes_loop_window_and_turn_updates_in_order(world):
    layer = get_channel_layer()
    inbox = await layer.new_channel()
    await layer.group_add(channel_group(GENERAL), inbox)
    try:
        await world.start_worker()
        world.say("tomori, what's new?")
        await eventually(lambda: world.bot_messages(GENERAL))
        await world.settle()

        received = []
        while True:
            try:
                received.append(await asyncio.wait_for(layer.receive(inbox), 2))
            except TimeoutError:
                break
    finally:
        await layer.group_discard(channel_group(GENERAL), inbox)

    types = [update["type"] for update in received]
    # The scheduler announces the pool as soon as the message reaches it (before the channel's
    # loop starts), and the loop again when it reads that batch: a count within 100 ms of the
    # first waits for the interval's end (`UnreadCounts`), so it may come after the turn began.
    counts = [update["count"] for update in received if update["type"] == "unread.count"]
    assert types[0] == "unread.count" and counts == [1, 1]
    others = [update for update in received if update["type"] != "unread.count"]
    assert [update["type"] for update in others] == [
        "loop.state",
        "turn.started",
        "window.changed",
        "turn.delivered",  # the reply's one paragraph went out
        "turn.finished",
        "loop.state",
    ]
    finished = received[types.index("turn.finished")]
    turn = await Turn.objects.aget(id=finished["turn_id"])
    assert (finished["status"], turn.status) == ("replied", "replied")
    assert [others[0]["state"], others[-1]["state"]] == ["busy", "idle"]
