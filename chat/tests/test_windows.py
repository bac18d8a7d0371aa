"""The worker's window registry: when it reads over REST and when it reuses."""

from __future__ import annotations

from dataclasses import replace

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
        self.reads_before = 0
        self.during_read = None

    async def fetch_history(self, channel_id: int, limit: int):
        self.reads += 1
        if self.during_read is not None:
            self.during_read()
            self.during_read = None
        return list(reversed(self.messages[-limit:]))  # newest first, like Discord

    async def fetch_history_before(self, channel_id: int, before_id: int, limit: int):
        self.reads_before += 1
        if self.during_read is not None:
            self.during_read()
            self.during_read = None
        older = [m for m in self.messages if m.id < before_id]
        return list(reversed(older[-limit:]))

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


async def test_a_registry_without_a_gateway_leaves_re_anchoring_to_the_stored_anchor(discord):
    """The dashboard's dry runs read with a registry of their own: it knows nothing of any
    gateway connection, so it never forces a new anchor (the stored row says when to)."""
    registry = WindowRegistry(
        fetch_history=discord.fetch_history, cache_view=discord.cache_view, gateway=False
    )

    read = await registry.read(CHANNEL, limit=20, dry_run=True)

    assert (read.rest_reason, read.force_reanchor) == (RestReason.NO_PREVIOUS_WINDOW, False)
    assert registry.reanchor_pending(CHANNEL) is False


async def test_a_channel_is_due_a_new_anchor_until_read_in_the_current_connection(registry):
    assert registry.reanchor_pending(CHANNEL) is True
    await registry.read(CHANNEL, limit=20)
    assert registry.reanchor_pending(CHANNEL) is False
    registry.shard_disconnected(0)
    assert registry.reanchor_pending(CHANNEL) is True


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


async def moved_past(registry, discord, new: int = 5) -> None:
    """Read the channel's window, then let ``new`` messages arrive and read it again: the
    window (20) moves past its ``new`` oldest messages."""
    await registry.read(CHANNEL, limit=20)
    arrived = [message(content=f"new {n}") for n in range(new)]
    discord.messages += arrived
    discord.cached = discord.messages[-20:]
    read = await registry.read(CHANNEL, limit=20)
    assert read.rest_reason is None and read.messages[0] == discord.messages[-20]


async def test_a_queued_turn_reads_further_back_once_for_the_whole_stretch(registry, discord):
    await moved_past(registry, discord)  # the window holds m15..new 4; m10..m14 were passed
    queued = discord.messages[10:15]

    first, read_first = await registry.read_up_to(
        CHANNEL, queued[0].id, count=20, fetch_before=discord.fetch_history_before
    )
    later = [
        await registry.read_up_to(
            CHANNEL, trigger.id, count=20, fetch_before=discord.fetch_history_before
        )
        for trigger in queued[1:]
    ]

    assert first == tuple(discord.messages[:11]) and read_first  # the channel's start
    assert [messages[-1] for messages, _ in later] == queued[1:]
    assert not any(read for _, read in later)
    assert later[-1][0] == tuple(discord.messages[:15])
    assert discord.reads_before == 1


async def test_while_queued_turns_wait_the_messages_the_window_passes_are_kept(discord):
    discord.messages = [message(content=f"m{n}") for n in range(60)]
    registry = WindowRegistry(fetch_history=discord.fetch_history, cache_view=discord.cache_view)
    fetch_before = discord.fetch_history_before
    await registry.read(CHANNEL, limit=20)  # m40..m59
    await registry.read_up_to(CHANNEL, discord.messages[39].id, count=5, fetch_before=fetch_before)
    discord.messages += [message(content=f"new {n}") for n in range(10)]
    discord.cached = discord.messages[-20:]
    await registry.read(CHANNEL, limit=20)  # moves past m40..m49

    up_to, read = await registry.read_up_to(
        CHANNEL, discord.messages[45].id, count=5, fetch_before=fetch_before
    )

    assert up_to == tuple(discord.messages[41:46]) and not read
    assert discord.reads_before == 1


async def test_a_channel_without_queued_turns_keeps_nothing_its_window_passed(registry, discord):
    await moved_past(registry, discord)  # nothing asked for older messages

    _, read = await registry.read_up_to(
        CHANNEL, discord.messages[14].id, count=2, fetch_before=discord.fetch_history_before
    )

    assert read and discord.reads_before == 1


@pytest.mark.parametrize("change", ["edit", "delete"])
async def test_a_change_to_a_kept_older_message_forces_a_new_read(registry, discord, change):
    await moved_past(registry, discord)
    trigger = discord.messages[14]
    await registry.read_up_to(
        CHANNEL, trigger.id, count=20, fetch_before=discord.fetch_history_before
    )
    if change == "edit":
        registry.record_change(CHANNEL, discord.messages[3].id)
    else:
        registry.record_delete(CHANNEL, [discord.messages[3].id], bulk=False)

    await registry.read_up_to(
        CHANNEL, trigger.id, count=20, fetch_before=discord.fetch_history_before
    )

    assert discord.reads_before == 2


async def test_a_dry_run_reads_further_back_without_keeping_it(registry, discord):
    await moved_past(registry, discord)
    before = registry.snapshot()

    result = await registry.read_up_to(
        CHANNEL,
        discord.messages[12].id,
        count=20,
        fetch_before=discord.fetch_history_before,
        dry_run=True,
    )

    assert result == (tuple(discord.messages[:13]), True)
    assert registry.snapshot() == before


@pytest.mark.parametrize("subscribed", [True, False])
async def test_a_dm_window_is_reused_only_with_dm_reaction_events(discord, subscribed):
    registry = WindowRegistry(
        fetch_history=discord.fetch_history,
        cache_view=discord.cache_view,
        dm_reactions_subscribed=subscribed,
    )
    await registry.read(CHANNEL, limit=20, is_dm=True)
    discord.cached = discord.messages[-5:]

    read = await registry.read(CHANNEL, limit=20, is_dm=True)

    assert read.rest_reason is (None if subscribed else RestReason.DM_WITHOUT_REACTION_EVENTS)


async def test_an_edit_while_reading_further_back_reads_again(registry, discord):
    await moved_past(registry, discord)
    edited = discord.messages[3]

    def edit() -> None:
        discord.messages[3] = replace(edited, content="edited while reading")
        registry.record_change(CHANNEL, edited.id)

    discord.during_read = edit
    messages, _ = await registry.read_up_to(
        CHANNEL, discord.messages[12].id, count=20, fetch_before=discord.fetch_history_before
    )

    assert discord.reads_before == 2
    assert messages[3].content == "edited while reading"


async def test_an_edit_to_kept_messages_while_reading_further_back_starts_over(discord):
    discord.messages = [message(content=f"m{n}") for n in range(250)]
    registry = WindowRegistry(fetch_history=discord.fetch_history, cache_view=discord.cache_view)
    fetch_before = discord.fetch_history_before
    await registry.read(CHANNEL, limit=20)  # m230..m249
    await registry.read_up_to(CHANNEL, discord.messages[229].id, count=5, fetch_before=fetch_before)
    kept = discord.messages[200]  # among the m130..m229 now kept

    def edit() -> None:
        discord.messages[200] = replace(kept, content="edited while reading")
        registry.record_change(CHANNEL, kept.id)

    discord.during_read = edit
    messages, read = await registry.read_up_to(
        CHANNEL, discord.messages[100].id, count=5, fetch_before=fetch_before
    )
    again, read_again = await registry.read_up_to(
        CHANNEL, kept.id, count=1, fetch_before=fetch_before
    )

    assert messages == tuple(discord.messages[96:101]) and read
    # the first; the interrupted one, read twice (a change arrived while reading); then two
    # from the window's start again
    assert discord.reads_before == 5
    assert again[0].content == "edited while reading" and not read_again


async def test_a_disconnected_shard_disables_reuse_for_its_own_channels_only(discord):
    other_channel = 501
    shards = {CHANNEL: 0, other_channel: 1}
    registry = WindowRegistry(
        fetch_history=discord.fetch_history,
        cache_view=discord.cache_view,
        shard_of=shards.get,
    )
    discord.cached = [discord.messages[-1]]  # the gateway cache holds the newest message
    registry.shard_disconnected(1)
    for channel_id in (CHANNEL, other_channel):
        await registry.read(channel_id, limit=20)  # read anew after the drop

    on_the_connected_shard = await registry.read(CHANNEL, limit=20)
    on_the_disconnected_shard = await registry.read(other_channel, limit=20)
    registry.shard_connected(1)
    await registry.read(other_channel, limit=20)
    back = await registry.read(other_channel, limit=20)

    assert on_the_connected_shard.rest_reason is None
    assert on_the_disconnected_shard.rest_reason is RestReason.SHARD_DISCONNECTED
    assert back.rest_reason is None


async def test_a_channel_of_an_unknown_shard_is_not_reused_while_any_shard_is_down(discord):
    registry = WindowRegistry(
        fetch_history=discord.fetch_history,
        cache_view=discord.cache_view,
        shard_of=lambda channel_id: None,
    )
    discord.cached = [discord.messages[-1]]
    registry.shard_disconnected(3)
    await registry.read(CHANNEL, limit=20)

    read = await registry.read(CHANNEL, limit=20)

    assert read.rest_reason is RestReason.SHARD_DISCONNECTED
