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
    registry.drop_all()  # the next read goes to REST
    discord.during_read = lambda: registry.record_change(CHANNEL, discord.messages[-1].id)

    await registry.read(CHANNEL, limit=20)

    assert discord.reads == 3


async def test_a_window_outlives_an_idle_gap_while_the_gateway_saw_everything(registry, discord):
    await registry.read(CHANNEL, limit=20)
    # Quiet for a while; then the conversation goes on, each message seen by the gateway.
    later = [message(content=f"later {n}") for n in range(3)]
    discord.cached = [discord.messages[-1], *later]

    read = await registry.read(CHANNEL, limit=20)

    assert (read.rest_reason, discord.reads) == (None, 1)
    assert read.messages[-3:] == tuple(later)


@pytest.mark.parametrize(
    ("while_idle", "reason"),
    [
        (lambda r, d: r.record_change(CHANNEL, d.messages[12].id), RestReason.UNCACHED_CHANGE),
        (lambda r, d: r.record_delete(CHANNEL, [d.messages[12].id], bulk=False), "any"),
        (lambda r, d: r.record_change(CHANNEL, d.messages[15].id), RestReason.UNCACHED_CHANGE),
        (lambda r, d: d.cached.clear(), "any"),
    ],
    ids=["edit", "delete", "reaction", "cache-gap"],
)
async def test_what_happens_while_idle_forces_the_read_the_seed_prescribes(
    registry, discord, while_idle, reason
):
    await registry.read(CHANNEL, limit=20)
    discord.cached = [discord.messages[-1]]
    while_idle(registry, discord)
    discord.messages.append(message(content="after the gap"))
    if reason == "any":
        discord.cached = [discord.messages[-1]]  # the newest only: older ones were swept

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is not None and discord.reads == 2
    if reason != "any":
        assert read.rest_reason is reason


async def test_the_least_recently_read_channels_lose_their_windows_first(discord):
    registry = WindowRegistry(
        fetch_history=discord.fetch_history, cache_view=discord.cache_view, max_channels=2
    )
    for channel in (1, 2, 3):
        await registry.read(channel, limit=20)

    first = await registry.read(1, limit=20)
    third = await registry.read(3, limit=20)

    assert first.rest_reason is RestReason.NO_PREVIOUS_WINDOW  # evicted when 3 came in
    assert third.rest_reason is not RestReason.NO_PREVIOUS_WINDOW


async def test_reply_targets_are_kept_with_the_window_until_they_change(registry, discord):
    await registry.read(CHANNEL, limit=20)
    target = discord.messages[0]

    registry.remember_reply_target(CHANNEL, target)
    assert registry.reply_target(CHANNEL, target.id) == target

    registry.record_change(CHANNEL, target.id)
    assert registry.reply_target(CHANNEL, target.id) is None


async def test_a_reconnect_drops_windows_and_forces_new_anchors(registry, discord):
    await registry.read(CHANNEL, limit=20)
    registry.drop_all()

    read = await registry.read(CHANNEL, limit=20)
    never_read = await registry.read(CHANNEL + 1, limit=20)

    assert read.rest_reason is RestReason.SHARD_RECONNECTED
    assert read.force_reanchor is True
    assert never_read.rest_reason is RestReason.NO_PREVIOUS_WINDOW


async def test_an_edit_to_an_uncached_window_message_goes_to_rest(registry, discord):
    await registry.read(CHANNEL, limit=20)
    discord.cached = [discord.messages[-1]]
    registry.record_change(CHANNEL, discord.messages[15].id)

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.UNCACHED_CHANGE
