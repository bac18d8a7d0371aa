"""Quiet logs for failures that repeat: one line per streak, not one traceback per failure.

A `FailureStreak` logs the first failure of a streak with its traceback, then one line each time
the count reaches a power of two ("… failed again (8 in a row): …"), and one line when the
thing works again. A Redis or database that is down for a minute costs a handful of lines.

Attempts that run concurrently (live updates published from many turns at once) say when they
began (`FailureStreak.begin`): one that began before the streak's last failure proves nothing
when it succeeds, and one that began before the streak ended is a straggler of that outage when
it fails. Without that, the attempts in flight as the outage starts and ends would split one
outage into several streaks.
"""

from __future__ import annotations

import logging


class FailureStreak:
    """Counts consecutive failures of one activity (``what``: "publishing live updates")."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._logger = logger
        self._what = what
        self.count = 0
        self._begun = 0
        self._last_failure = 0
        """How many attempts had begun when the streak's last failure came."""
        self._ended = 0
        """How many attempts had begun when the last streak ended."""

    def begin(self) -> int:
        """An attempt begins: its number, for `failed` and `succeeded`."""
        self._begun += 1
        return self._begun

    def failed(self, error: BaseException, *, attempt: int | None = None) -> None:
        """Record one failure (of ``attempt``, when attempts run concurrently); logs only the
        first and each power of two. A straggler of a streak that ended counts for nothing."""
        if attempt is not None and attempt <= self._ended and not self.count:
            self._logger.debug("%s failed as its outage ended: %s", self._what, error)
            return
        self._last_failure = self._begun
        self.count += 1
        if self.count == 1:
            self._logger.error("%s failed: %s", self._what, error, exc_info=error)
        elif self.count & (self.count - 1) == 0:
            self._logger.warning("%s failed again (%d in a row): %s", self._what, self.count, error)

    def succeeded(self, *, attempt: int | None = None) -> None:
        """Record a success (of ``attempt``); ends a streak with one line, unless the attempt
        began before the streak's last failure."""
        if not self.count or (attempt is not None and attempt <= self._last_failure):
            return
        self._logger.warning("%s works again after %d failures", self._what, self.count)
        self.count = 0
        self._ended = self._begun
