"""Assignments of a turn's status that the lifecycle walk must find (never imported)."""
# ruff: noqa

from chat.models import Turn


def breaks_the_rule(turn, row, queryset):
    turn.status = Turn.Status.REPLIED
    turn.status, turn.error = Turn.Status.FAILED, "x"
    row.status = Turn.Status.ABORTED
    queryset.update(status=Turn.Status.ABORTED)
    queryset.filter(status=Turn.Status.RUNNING)  # a read: not found
    document = row
    document.status = "embedding"  # not a turn: not found
