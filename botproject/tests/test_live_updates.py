"""Live updates reach every busy channel's group, however many publish at once (real Redis)."""

from __future__ import annotations

import asyncio

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from botproject.live_updates import (
    LoopState,
    LoopStateName,
    TurnFinished,
    channel_group,
    parse_live_update,
    publish_live_update,
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
