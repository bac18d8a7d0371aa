"""Retention: records past their keeping time are deleted in bounded batches."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from chat.models import EventQueue, MessageIndex, PlannerStep, Turn


@dataclass(frozen=True)
class Retention:
    """How long records are kept: finished turns (and their planner steps), the message index,
    and the event queue's deduplication keys."""

    turns: dt.timedelta = dt.timedelta(days=30)
    message_index: dt.timedelta = dt.timedelta(days=90)
    dedup_keys: dt.timedelta = dt.timedelta(days=7)


def records_prune(
    *, now: dt.datetime, retention: Retention, batch_size: int = 5000, max_batches: int = 20
) -> dict[str, int]:
    """Delete records past their retention, ``batch_size`` rows per statement and at most
    ``max_batches`` statements per kind per run (a large backlog is worked off over several
    runs without long locks). Returns how many rows of each kind went.

    Never deleted: turns still running or delivering, ready queue rows (work not yet done),
    unread pools.
    """
    kinds = {
        "turns": Turn.objects.filter(created_at__lt=now - retention.turns).exclude(
            status__in=[Turn.Status.RUNNING, Turn.Status.DELIVERING]
        ),
        "planner_steps": PlannerStep.objects.filter(created_at__lt=now - retention.turns),
        "message_index": MessageIndex.objects.filter(created_at__lt=now - retention.message_index),
        "dedup_keys": EventQueue.objects.filter(created_at__lt=now - retention.dedup_keys).exclude(
            status=EventQueue.Status.READY
        ),
    }
    deleted = dict.fromkeys(kinds, 0)
    for kind, rows in kinds.items():
        for _ in range(max_batches):
            ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch_size])
            if not ids:
                break
            rows.model._default_manager.filter(pk__in=ids).delete()
            deleted[kind] += len(ids)
            if len(ids) < batch_size:
                break
    return deleted
