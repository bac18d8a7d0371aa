"""When a reactive turn counts as queued (its trigger waited)."""

from __future__ import annotations

import pytest

from chat.loop.reactive import trigger_waited


@pytest.mark.parametrize(
    ("message_id", "previous_reply_id", "pending_ids", "queued"),
    [
        (10, None, [10], False),  # the first message of a stretch, alone
        (30, 20, [30], False),  # posted after the previous reply appeared
        (15, 20, [15], True),  # posted before the previous reply was delivered
        (10, None, [10, 11], True),  # another message stands between it and its reply
        (30, 20, [25, 30], False),  # an older pending message does not stand between
    ],
)
def test_a_turn_is_queued_only_when_its_trigger_waited(
    message_id, previous_reply_id, pending_ids, queued
) -> None:
    waited = trigger_waited(
        message_id, previous_reply_id=previous_reply_id, pending_ids=pending_ids
    )

    assert waited is queued
