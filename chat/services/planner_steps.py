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


def planner_actions_recent(*, channel_id: int, limit: int) -> list[tuple[str, bool, str]]:
    """The channel's newest ``limit`` finished planner steps as (action, success, result),
    oldest first, from whichever worker ran them: what a worker taking the channel over shows
    its planner as the recent actions. A step whose answer was no valid action is ``invalid``;
    a step the model never answered has no result and is left out."""
    rows = (
        PlannerStep.objects.filter(channel_id=channel_id)
        .exclude(result="")
        .order_by("-id")
        .values_list("action", "success", "result")[:limit]
    )
    newest = [(action.get("action", "invalid"), ok, result) for action, ok, result in rows]
    return newest[::-1]
