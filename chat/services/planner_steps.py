"""The autonomous planner's record: what each step was shown, what it decided, what came of it."""

from __future__ import annotations

from collections.abc import Mapping

from chat import metrics
from chat.models import PlannerStep, Turn
from chat.services.event_queue import unread_pool_take


def planner_step_record(
    *,
    channel_id: int,
    guild_id: int | None,
    loop_id: str,
    iteration: int,
    prompt: list[dict[str, str]],
    decision: str,
    action: Mapping[str, object],
    llm_ms: float | None,
    ignored: Mapping[str, object] | None = None,
) -> int:
    """Record what one planner step was shown and decided, before it is acted on; returns the
    step's id for `planner_step_finish` (and for the persona turn's ``reason_detail``); the
    step is counted by its action (`chat.metrics.PLANNER_STEPS`; none when ``action`` is empty:
    the model failed or answered no valid action). ``ignored``: keys of the decision the action
    does not use (`PlannerDecision.ignored`)."""
    metrics.planner_step_counted(action=str(action.get("action", "none")))
    return PlannerStep.objects.create(
        channel_id=channel_id,
        guild_id=guild_id,
        loop_id=loop_id,
        iteration=iteration,
        prompt=prompt,
        decision=decision,
        action=dict(action),
        ignored=dict(ignored or {}),
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


def planner_reactions_unsettled(*, channel_id: int) -> list[tuple[int, int, str, str]]:
    """The channel's ``react`` steps newer than its last finished step and never finished
    themselves (the worker stopped or was killed around the reaction), as (step id, message
    id, emoji, message ref): whether the reaction was made is read back from Discord
    (`planner_step_finish` when it was), so a worker taking the channel over does not react
    a second time."""
    rows = PlannerStep.objects.filter(channel_id=channel_id)
    last_finished = rows.exclude(result="").order_by("-id").values_list("id", flat=True).first()
    unsettled = rows.filter(result="", action__action="react", action__has_key="message_id")
    if last_finished is not None:
        unsettled = unsettled.filter(id__gt=last_finished)
    return [
        (step_id, action["message_id"], action.get("emoji", ""), action.get("message", ""))
        for step_id, action in unsettled.order_by("id").values_list("id", "action")
    ]


def planner_sends_settle(*, channel_id: int) -> int:
    """Finish the channel's ``send_message`` steps newer than its last finished step whose
    persona turn replied although the step was never finished (the worker stopped between the
    reply and the step's record), and mark read the unread messages the step was shown, as the
    step would have: a worker taking the channel over shows its planner the reply as done and
    the answered messages as read, so it neither answers nor reacts to them again. Returns how
    many were finished."""
    rows = PlannerStep.objects.filter(channel_id=channel_id)
    last_finished = rows.exclude(result="").order_by("-id").values_list("id", flat=True).first()
    unsettled = rows.filter(result="", action__action="send_message")
    if last_finished is not None:
        unsettled = unsettled.filter(id__gt=last_finished)
    finished = 0
    for step_id, action in unsettled.values_list("id", "action"):
        turn = Turn.objects.filter(
            reason_detail__planner_step_id=step_id, status=Turn.Status.REPLIED
        ).first()
        if turn is not None:
            shown = action.get("shown_ids") or [turn.trigger_message_id]
            unread_pool_take(channel_id=channel_id, message_ids=shown)
            planner_step_finish(
                step_id=step_id,
                success=True,
                result=f"{turn.persona_name}: {turn.status}",
                turn_id=turn.id,
            )
            finished += 1
    return finished
