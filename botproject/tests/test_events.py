"""Live events reach every busy channel's group, however many publish at once (real Redis)."""

from __future__ import annotations

import asyncio

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from botproject.events import (
    LoopState,
    LoopStateName,
    TurnFinished,
    channel_group,
    parse_event,
    publish,
)

CHANNELS = 250


async def test_250_channels_publishing_at_once_lose_no_event():
    # Its own layer instance to receive on: the shared one's receive lock may belong to another
    # test's event loop. Publishing goes through the shared layer, as the worker's does.
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    inboxes = {}
    for n in range(CHANNELS):
        inboxes[n] = await layer.new_channel()
        await layer.group_add(channel_group(n), inboxes[n])
    try:
        await asyncio.gather(
            *(publish(channel_group(n), LoopState(state=LoopStateName.BUSY)) for n in inboxes)
        )
        received = [await asyncio.wait_for(layer.receive(inbox), 10) for inbox in inboxes.values()]
    finally:
        for n, inbox in inboxes.items():
            await layer.group_discard(channel_group(n), inbox)

    assert [parse_event(message) for message in received] == [
        LoopState(state=LoopStateName.BUSY)
    ] * CHANNELS


def test_an_event_round_trips_through_its_wire_form():
    event = TurnFinished(turn_id=7, persona="Tomori", status="replied")

    assert event.as_message() == {
        "type": "turn.finished",
        "turn_id": 7,
        "persona": "Tomori",
        "status": "replied",
    }
    assert parse_event(event.as_message()) == event
