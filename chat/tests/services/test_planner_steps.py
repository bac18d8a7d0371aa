"""Planner steps a stopped worker left unfinished, as the worker taking the channel over sees
them."""

from __future__ import annotations

import pytest

from chat.codec import message_to_json
from chat.models import PlannerStep, Turn, UnreadEvent
from chat.pipeline.triggers import TurnReason
from chat.services.planner_steps import (
    planner_actions_recent,
    planner_reactions_unsettled,
    planner_sends_settle,
)
from chat.tests.factories import message

pytestmark = pytest.mark.django_db

CHANNEL = 42


def step(iteration: int, action: dict, *, result: str = "", success: bool = False) -> PlannerStep:
    return PlannerStep.objects.create(
        channel_id=CHANNEL,
        loop_id="loop",
        iteration=iteration,
        action=action,
        result=result,
        success=success,
    )


def turn(step_id: int, status: str) -> Turn:
    return Turn.objects.create(
        channel_id=CHANNEL,
        persona_name="Tomori",
        reason=TurnReason.PLANNER,
        reason_detail={"planner_step_id": step_id},
        status=status,
    )


def test_a_send_whose_turn_replied_is_finished_one_whose_turn_was_aborted_is_not():
    step(1, {"action": "react", "message": "ref_1", "emoji": "👍"}, result="ok", success=True)
    shown, later = message(channel_id=CHANNEL), message(channel_id=CHANNEL)
    replied = step(2, {"action": "send_message", "persona": "Tomori", "shown_ids": [shown.id]})
    replying = turn(replied.id, Turn.Status.REPLIED)
    for unread in (shown, later):  # `later` came after the step was planned: it stays unread
        UnreadEvent.objects.create(
            channel_id=CHANNEL, message_id=unread.id, author_id=1, event=message_to_json(unread)
        )

    assert planner_sends_settle(channel_id=CHANNEL) == 1

    assert list(UnreadEvent.objects.values_list("message_id", flat=True)) == [later.id]

    replied.refresh_from_db()
    assert (replied.success, replied.result, replied.turn_id) == (
        True,
        "Tomori: replied",
        replying.id,
    )
    assert planner_actions_recent(channel_id=CHANNEL, limit=5)[-1] == (
        "send_message",
        True,
        "Tomori: replied",
    )
    aborted = step(3, {"action": "send_message", "persona": "Tomori"})
    turn(aborted.id, Turn.Status.ABORTED)
    assert planner_sends_settle(channel_id=CHANNEL) == 0
    assert PlannerStep.objects.get(id=aborted.id).result == ""


def test_only_unfinished_reactions_after_the_last_finished_step_are_to_be_read_back():
    step(1, {"action": "react", "message": "ref_1", "emoji": "👍", "message_id": 7})
    step(2, {"action": "continue"}, result="stopped", success=True)
    late = step(3, {"action": "react", "message": "ref_2", "emoji": "🎉", "message_id": 9})

    assert planner_reactions_unsettled(channel_id=CHANNEL) == [(late.id, 9, "🎉", "ref_2")]
