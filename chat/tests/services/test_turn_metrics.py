"""Turns are counted and timed at the lifecycle's changes (`chat.services.turn_lifecycle`):
each terminal change once, by status, timed from the trigger; the first message of a claimed
turn once, however many pieces follow; a change that did not happen counts nothing."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from prometheus_client import REGISTRY

from chat.models import Turn
from chat.pipeline.snowflakes import snowflake_from_ms
from chat.ports import Delivered
from chat.services.turn_lifecycle import (
    TransitionRefused,
    turn_aborted,
    turn_claim,
    turn_failed_now,
    turn_piece_delivered,
    turn_refused,
    turn_replied,
    turns_abort_interrupted,
)
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)
S = Turn.Status


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Seen:
    """The turn series before an action, and how far each moved after it."""

    NAMES = (
        ("personabot_turns_total", "replied"),
        ("personabot_turns_total", "failed"),
        ("personabot_turns_total", "aborted"),
        ("personabot_turns_total", "refused"),
    )

    def __init__(self) -> None:
        self.before = self._now()

    def _now(self) -> dict[str, float]:
        values = {status: sample(name, status=status) for name, status in self.NAMES}
        values["first_count"] = sample("personabot_first_message_seconds_count")
        values["first_sum"] = sample("personabot_first_message_seconds_sum")
        values["turn_count"] = sample("personabot_turn_seconds_count")
        values["turn_sum"] = sample("personabot_turn_seconds_sum")
        return values

    def moved(self) -> dict[str, float]:
        now = self._now()
        return {
            key: round(now[key] - self.before[key], 6)
            for key in now
            if now[key] != self.before[key]
        }


def _turn(*, trigger_age_s: float, trigger: bool = True) -> Turn:
    guild, _ = GuildConfig.objects.get_or_create(guild_id=1, defaults={"name": "Band practice"})
    persona, _ = Persona.objects.get_or_create(
        guild=guild, name="Tomori", defaults={"is_main": True}
    )
    trigger_id = snowflake_from_ms(int((time.time() - trigger_age_s) * 1000))
    return Turn.objects.create(
        channel_id=7,
        guild_id=1,
        persona=persona,
        persona_name="Tomori",
        reason="mention",
        trigger_message_id=trigger_id if trigger else None,
    )


def _piece(message_id: int) -> Delivered:
    return Delivered(message_id=message_id, author_id=1, webhook_id=None, message=None)


async def test_a_streamed_reply_counts_one_turn_and_one_first_message_timed_from_its_trigger():
    turn = await sync_to_async(_turn)(trigger_age_s=3.0)
    seen = Seen()

    assert await turn_claim(turn=turn)
    await turn_piece_delivered(turn=turn, delivered=[_piece(9001)], shown=["one"])
    await turn_piece_delivered(turn=turn, delivered=[_piece(9002)], shown=["one", "two"])
    await turn_replied(turn=turn)

    moved = seen.moved()
    assert moved.pop("replied") == 1
    assert moved.pop("first_count") == 1  # the second piece is not a first message
    assert moved.pop("turn_count") == 1
    # Both timed from the trigger's snowflake, three seconds before the claim.
    assert 3.0 <= moved.pop("first_sum") < 10.0
    assert 3.0 <= moved.pop("turn_sum") < 10.0
    assert moved == {}


async def test_a_whole_reply_times_its_first_message_at_the_delivery():
    turn = await sync_to_async(_turn)(trigger_age_s=1.0)
    seen = Seen()

    assert await turn_claim(turn=turn)
    await turn_replied(turn=turn, delivered=[_piece(9003)])

    moved = seen.moved()
    assert (moved["replied"], moved["first_count"], moved["turn_count"]) == (1, 1, 1)


async def test_a_turn_that_answers_no_message_is_timed_from_its_start_and_sends_no_first():
    turn = await sync_to_async(_turn)(trigger_age_s=0, trigger=False)
    seen = Seen()

    await turn_replied(turn=turn)

    moved = seen.moved()
    assert (moved.pop("replied"), moved.pop("turn_count")) == (1, 1)
    assert 0 <= moved.pop("turn_sum") < 5.0
    assert moved == {}


async def test_turns_that_never_sent_count_by_status_without_a_first_message():
    refused = await sync_to_async(_turn)(trigger_age_s=0.5)
    aborted = await sync_to_async(_turn)(trigger_age_s=0.5)
    seen = Seen()

    await turn_refused(turn=refused, reason="the day's tokens are spent")
    await turn_aborted(turn=aborted, reason="stopped")
    with pytest.raises(TransitionRefused):  # a second end is refused, and not counted
        await turn_aborted(turn=aborted, reason="again")

    moved = seen.moved()
    assert (moved["refused"], moved["aborted"], moved["turn_count"]) == (1, 1, 2)
    assert "first_count" not in moved


async def test_a_change_that_did_not_happen_counts_nothing():
    turn = await sync_to_async(_turn)(trigger_age_s=0.5)
    await sync_to_async(Turn.objects.filter(pk=turn.pk).update)(status=S.ABORTED)
    seen = Seen()

    assert await turn_refused(turn=turn, reason="late") is False  # settled elsewhere meanwhile

    assert seen.moved() == {}


async def test_a_change_rolled_back_with_its_transaction_counts_nothing():
    turn = await sync_to_async(_turn)(trigger_age_s=0.5)
    seen = Seen()

    def fail_then_roll_back() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            assert turn_failed_now(turn=turn, error="the model failed")
            raise RuntimeError("the caller's transaction fails after the change")

    await sync_to_async(fail_then_roll_back)()

    assert seen.moved() == {}


async def test_turns_a_stopped_worker_left_running_count_as_aborted_untimed():
    turns = [await sync_to_async(_turn)(trigger_age_s=60) for _ in range(2)]
    seen = Seen()

    moved = await sync_to_async(turns_abort_interrupted)(
        turn_ids=[t.pk for t in turns], reason="the worker stopped during the turn"
    )

    assert moved == 2
    assert seen.moved() == {"aborted": 2}
