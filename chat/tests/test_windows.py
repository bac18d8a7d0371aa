"""The worker's window registry: when it reads over REST and when it reuses."""

from __future__ import annotations

import pytest

from chat.pipeline.window_reuse import GatewayCacheView, RestReason
from chat.tests.factories import message
from chat.windows import WindowRegistry

CHANNEL = 500


class FakeDiscord:
    """A channel whose REST history and gateway cache the test controls."""

    def __init__(self, messages) -> None:
        self.messages = list(messages)
        self.cached: list = []
        self.reads = 0
        self.during_read = None

    async def fetch_history(self, channel_id: int, limit: int):
        self.reads += 1
        if self.during_read is not None:
            self.during_read()
            self.during_read = None
        return list(reversed(self.messages[-limit:]))  # newest first, like Discord

    def cache_view(self, channel_id: int) -> GatewayCacheView:
        return GatewayCacheView(messages=tuple(sorted(self.cached, key=lambda m: m.id)))


@pytest.fixture
def discord() -> FakeDiscord:
    return FakeDiscord(message(content=f"m{n}") for n in range(30))


@pytest.fixture
def registry(discord) -> WindowRegistry:
    return WindowRegistry(fetch_history=discord.fetch_history, cache_view=discord.cache_view)


async def test_the_first_read_goes_to_rest_and_chooses_a_new_anchor(registry, discord):
    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.NO_PREVIOUS_WINDOW
    assert read.force_reanchor is True
    assert [m.content for m in read.messages] == [f"m{n}" for n in range(10, 30)]


async def test_within_a_busy_stretch_new_messages_come_from_the_cache(registry, discord):
    await registry.read(CHANNEL, limit=20)
    newest = discord.messages[-1]
    arrived = message(content="new")
    discord.cached = [newest, arrived]

    read = await registry.read(CHANNEL, limit=20)

    assert (read.rest_reason, read.force_reanchor, discord.reads) == (None, False, 1)
    assert read.messages[-1] == arrived and len(read.messages) == 20


async def test_a_change_during_a_rest_read_reads_again(registry, discord):
    await registry.read(CHANNEL, limit=20)
    registry.release(CHANNEL)
    discord.during_read = lambda: registry.record_change(CHANNEL, discord.messages[-1].id)

    await registry.read(CHANNEL, limit=20)

    assert discord.reads == 3


async def test_an_idle_channel_keeps_no_window(registry, discord):
    await registry.read(CHANNEL, limit=20)
    registry.release(CHANNEL)

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.NO_PREVIOUS_WINDOW
    assert read.force_reanchor is False  # the anchor outlives the idle release


async def test_a_reconnect_drops_windows_and_forces_new_anchors(registry, discord):
    await registry.read(CHANNEL, limit=20)
    registry.drop_all()

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.NO_PREVIOUS_WINDOW
    assert read.force_reanchor is True


async def test_an_edit_to_an_uncached_window_message_goes_to_rest(registry, discord):
    await registry.read(CHANNEL, limit=20)
    discord.cached = [discord.messages[-1]]
    registry.record_change(CHANNEL, discord.messages[15].id)

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.UNCACHED_CHANGE
