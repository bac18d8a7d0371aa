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


def test_attempts_in_flight_as_an_outage_starts_and_ends_keep_it_one_streak(caplog):
    """Concurrent attempts: a success that began before the last failure does not end the
    streak, and a failure that began before it ended does not start another."""
    streak = FailureStreak(logging.getLogger("probe"), "publishing live updates")

    with caplog.at_level(logging.DEBUG, logger="probe"):
        early = [streak.begin() for _ in range(3)]  # in flight as Redis goes down
        streak.failed(ConnectionError("redis is down"), attempt=early[0])
        streak.succeeded(attempt=early[1])  # it had its answer before the outage
        for _ in range(5):
            streak.failed(ConnectionError("redis is down"), attempt=streak.begin())
        late = [streak.begin() for _ in range(2)]  # in flight as Redis comes back
        streak.succeeded(attempt=streak.begin())  # began after the last failure: recovered
        streak.failed(ConnectionError("connection reset"), attempt=late[0])  # a straggler
        streak.failed(ConnectionError("redis is down"), attempt=early[2])  # another
        streak.succeeded(attempt=late[1])

    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [
        "publishing live updates failed: redis is down",
        "publishing live updates failed again (2 in a row): redis is down",
        "publishing live updates failed again (4 in a row): redis is down",
        "publishing live updates works again after 6 failures",
    ]
    assert streak.count == 0

    with caplog.at_level(logging.INFO, logger="probe"):
        streak.failed(ConnectionError("redis is down again"), attempt=streak.begin())
    assert caplog.records[-1].getMessage() == "publishing live updates failed: redis is down again"
