"""The autonomous planner's record: what each step was shown, what it decided, what came of it."""

from __future__ import annotations

from collections.abc import Mapping

from chat.models import PlannerStep


def planner_step_record(
    *,
    channel_id: int,
    guild_id: int | None,
    loop_id: str,
    iteration: int,
    prompt: list[dict],
    decision: str,
    action: Mapping[str, object],
    llm_ms: float | None,
) -> int:
    """Record what one planner step was shown and decided, before it is acted on; returns the
    step's id for `planner_step_finish` (and for the persona turn's ``reason_detail``)."""
    return PlannerStep.objects.create(
        channel_id=channel_id,
        guild_id=guild_id,
        loop_id=loop_id,
        iteration=iteration,
        prompt=prompt,
        decision=decision,
        action=dict(action),
        llm_ms=llm_ms,
    ).id


def planner_step_finish(
    *, step_id: int, success: bool, result: str, turn_id: int | None = None
) -> None:
    """Record what came of a planner step: its result and the persona turn it ran, if any."""
    PlannerStep.objects.filter(id=step_id).update(success=success, result=result, turn_id=turn_id)
