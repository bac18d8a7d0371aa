"""The stored window anchor as inspection reads it: a worker that dropped its windows marks its
own channels' anchors due a new anchor, and only those stored before it did."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from chat.models import ChannelWindowAnchor
from chat.services.turn_record import window_anchor_store, window_anchors_reanchor_due
from chat.shards import ShardSet

pytestmark = pytest.mark.django_db

ON_SHARD_0 = 4 << 22  # (guild >> 22) % 2 == 0
ON_SHARD_1 = 5 << 22


def due() -> dict[int, bool]:
    return dict(ChannelWindowAnchor.objects.values_list("channel_id", "reanchor_due"))


def test_a_worker_marks_the_anchors_of_its_own_shards_and_dms_on_shard_0():
    window_anchor_store(channel_id=1, anchor_id=100, limit=80, guild_id=ON_SHARD_0)
    window_anchor_store(channel_id=2, anchor_id=200, limit=80, guild_id=ON_SHARD_1)
    window_anchor_store(channel_id=3, anchor_id=300, limit=80, guild_id=None)  # a DM: shard 0

    marked = window_anchors_reanchor_due(
        shards=ShardSet.of([0], 2), before=timezone.now() + dt.timedelta(seconds=1)
    )

    assert marked == 2
    assert due() == {1: True, 2: False, 3: True}


def test_an_anchor_stored_after_the_windows_were_dropped_is_not_marked():
    window_anchor_store(channel_id=1, anchor_id=100, limit=80, guild_id=ON_SHARD_0)
    dropped_at = timezone.now()
    window_anchor_store(channel_id=2, anchor_id=200, limit=80, guild_id=ON_SHARD_0)
    ChannelWindowAnchor.objects.filter(channel_id=1).update(
        updated_at=dropped_at - dt.timedelta(seconds=1)
    )

    assert window_anchors_reanchor_due(shards=ShardSet(), before=dropped_at) == 1
    assert due() == {1: True, 2: False}


def test_storing_a_new_anchor_clears_its_due_mark():
    window_anchor_store(channel_id=1, anchor_id=100, limit=80, guild_id=ON_SHARD_0)
    window_anchors_reanchor_due(shards=ShardSet(), before=timezone.now() + dt.timedelta(1))

    window_anchor_store(channel_id=1, anchor_id=150, limit=80, guild_id=ON_SHARD_0)

    assert due() == {1: False}
    window_anchor_store(
        channel_id=1, anchor_id=150, limit=80, guild_id=ON_SHARD_0, reanchor_due=True
    )
    assert due() == {1: True}
