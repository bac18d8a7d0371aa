"""Quiet logs for failures that repeat: one line per streak, not one traceback per failure.

A `FailureStreak` logs the first failure of a streak with its traceback, then one line each time
the count reaches a power of two ("… failed again (8 in a row): …"), and one line when the
thing works again. A Redis or database that is down for a minute costs a handful of lines.
"""

from __future__ import annotations

import logging


class FailureStreak:
    """Counts consecutive failures of one activity (``what``: "publishing live updates")."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._logger = logger
        self._what = what
        self.count = 0

    def failed(self, error: BaseException) -> None:
        """Record one failure; logs only the first and each power of two."""
        self.count += 1
        if self.count == 1:
            self._logger.error("%s failed: %s", self._what, error, exc_info=error)
        elif self.count & (self.count - 1) == 0:
            self._logger.warning("%s failed again (%d in a row): %s", self._what, self.count, error)

    def succeeded(self) -> None:
        """Record a success; ends a streak with one line."""
        if self.count:
            self._logger.warning("%s works again after %d failures", self._what, self.count)
            self.count = 0
