"""A failure that repeats logs a handful of lines, not one traceback per failure."""

from __future__ import annotations

import logging

from botproject.failures import FailureStreak


def test_a_long_streak_logs_its_first_failure_powers_of_two_and_the_recovery(caplog):
    streak = FailureStreak(logging.getLogger("probe"), "publishing live updates")

    with caplog.at_level(logging.INFO, logger="probe"):
        for _ in range(1000):
            streak.failed(ConnectionError("redis is down"))
        streak.succeeded()
        streak.succeeded()

    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 + 9 + 1  # the first, 2, 4, … 512, the recovery
    assert caplog.records[0].exc_info is not None  # only the first carries a traceback
    assert all(record.exc_info is None for record in caplog.records[1:])
    assert lines[-2] == "publishing live updates failed again (512 in a row): redis is down"
    assert lines[-1] == "publishing live updates works again after 1000 failures"
    assert streak.count == 0
