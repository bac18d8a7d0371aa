"""Live updates reach every busy channel's group, however many publish at once (real Redis)."""

from __future__ import annotations

import asyncio

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from botproject.live_updates import (
    LoopState,
    LoopStateName,
    TurnFinished,
    UnreadCount,
    channel_group,
    parse_live_update,
    publish_live_update,
    publish_newest_live_update,
)

CHANNELS = 250


async def test_250_channels_publishing_at_once_lose_no_update():
    # Its own layer instance to receive on: the shared one's receive lock may belong to another
    # test's event loop. Publishing goes through the shared layer, as the worker's does.
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    inboxes = {}
    for n in range(CHANNELS):
        inboxes[n] = await layer.new_channel()
        await layer.group_add(channel_group(n), inboxes[n])
    try:
        await asyncio.gather(
            *(
                publish_live_update(channel_group(n), LoopState(state=LoopStateName.BUSY))
                for n in inboxes
            )
        )
        received = [await asyncio.wait_for(layer.receive(inbox), 10) for inbox in inboxes.values()]
    finally:
        for n, inbox in inboxes.items():
            await layer.group_discard(channel_group(n), inbox)

    assert [parse_live_update(message) for message in received] == [
        LoopState(state=LoopStateName.BUSY)
    ] * CHANNELS


def test_a_live_update_round_trips_through_its_wire_form():
    update = TurnFinished(turn_id=7, persona="Tomori", status="replied")

    assert update.as_message() == {
        "type": "turn.finished",
        "turn_id": 7,
        "persona": "Tomori",
        "status": "replied",
    }
    assert parse_live_update(update.as_message()) == update


async def test_counts_published_faster_than_sent_arrive_as_the_first_and_the_newest():
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    busy, quiet = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(channel_group(1), busy)
    await layer.group_add(channel_group(2), quiet)
    try:
        # All start in one tick: the first is being sent while the others are published.
        await asyncio.gather(
            *(
                publish_newest_live_update(channel_group(1), UnreadCount(count=n))
                for n in range(200)
            ),
            publish_newest_live_update(channel_group(2), UnreadCount(count=7)),
        )
        await publish_live_update(channel_group(1), LoopState(state=LoopStateName.IDLE))
        received = []
        while not received or received[-1] != LoopState(state=LoopStateName.IDLE):
            received.append(parse_live_update(await asyncio.wait_for(layer.receive(busy), 10)))
        other = parse_live_update(await asyncio.wait_for(layer.receive(quiet), 10))
    finally:
        await layer.group_discard(channel_group(1), busy)
        await layer.group_discard(channel_group(2), quiet)

    assert received == [UnreadCount(count=0), UnreadCount(count=199), LoopState(state="idle")]
    assert other == UnreadCount(count=7)  # another group's count is not held back
