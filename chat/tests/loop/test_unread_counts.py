"""Unread counts reach the dashboard's channel groups (real Redis) promptly, newest last."""

from __future__ import annotations

import asyncio

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from botproject.live_updates import UnreadCount, channel_group, parse_live_update
from chat.loop.unread_counts import UnreadCounts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _listening(*channel_ids: int):
    # Its own layer instance to receive on: the shared one's receive lock may belong to another
    # test's event loop. Counts go out through the shared layer, as the worker's do.
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    inboxes = {}
    for channel_id in channel_ids:
        inboxes[channel_id] = await layer.new_channel()
        await layer.group_add(channel_group(channel_id), inboxes[channel_id])
    return layer, inboxes


async def _next(layer, inbox) -> UnreadCount:
    return parse_live_update(await asyncio.wait_for(layer.receive(inbox), 10))


async def test_a_quiet_channels_count_goes_out_at_once_then_the_newest_per_interval():
    clock = Clock()
    counts = UnreadCounts(interval=0.05, clock=clock)
    layer, inboxes = await _listening(1, 2)
    try:
        await counts.announce({1: 1})
        assert await _next(layer, inboxes[1]) == UnreadCount(count=1)  # at once

        for n in range(2, 200):  # a burst within the interval: they wait, newest wins
            await counts.announce({1: n})
        await counts.announce({2: 7})  # another channel is not held back by the first
        assert await _next(layer, inboxes[2]) == UnreadCount(count=7)
        clock.now += 0.06  # the interval ends: the flusher wakes within it
        assert await _next(layer, inboxes[1]) == UnreadCount(count=199)

        clock.now += 1.0  # quiet for a while: the next change goes out at once again
        await counts.announce({1: 3})
        assert await _next(layer, inboxes[1]) == UnreadCount(count=3)
    finally:
        await counts.close()
        for channel_id, inbox in inboxes.items():
            await layer.group_discard(channel_group(channel_id), inbox)


async def test_counts_of_a_busy_channel_cost_one_send_per_interval():
    clock = Clock()
    counts = UnreadCounts(interval=0.05, clock=clock)
    layer, inboxes = await _listening(3)
    try:
        received = []
        for n in range(1, 301):  # 300 changes over three intervals
            await counts.announce({3: n})
            if n % 100 == 0:
                clock.now += 0.06
                await asyncio.sleep(0.06)  # the flusher's real timer, so it runs
        while not received or received[-1] != UnreadCount(count=300):
            received.append(await _next(layer, inboxes[3]))
    finally:
        await counts.close()
        await layer.group_discard(channel_group(3), inboxes[3])

    assert received[0] == UnreadCount(count=1)
    assert len(received) <= 5  # the first, then at most one per interval
    assert [c.count for c in received] == sorted(c.count for c in received)
