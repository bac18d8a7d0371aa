"""The sandbox's snowflakes: a generator of strictly increasing ids stamped with the current
time, and Discord's timestamp format. The layout is `chat.pipeline.snowflakes`'s; a message's
`timestamp` is derived from its id, as on Discord.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from chat.pipeline.snowflakes import snowflake_from_ms

_INCREMENT_BITS = 12
_MAX_INCREMENT = (1 << _INCREMENT_BITS) - 1


def iso_timestamp(moment: datetime) -> str:
    """`moment` as Discord writes timestamps: ISO 8601 with microseconds and `+00:00`."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


class SnowflakeGenerator:
    """Hands out strictly increasing snowflakes stamped with the current time.

    Several ids in one millisecond differ by their increment; if the increment would overflow, or
    the clock steps backwards, the generator borrows the next millisecond, so ids never repeat
    and never decrease. `clock` returns Unix seconds (``time.time`` by default).
    """

    def __init__(self, *, worker: int = 1, clock: Callable[[], float] = time.time) -> None:
        self._worker = worker
        self._clock = clock
        self._last_ms = 0
        self._increment = 0

    def next_id(self) -> int:
        now_ms = int(self._clock() * 1000)
        if now_ms > self._last_ms:
            self._last_ms, self._increment = now_ms, 0
        elif self._increment < _MAX_INCREMENT:
            self._increment += 1
        else:
            self._last_ms, self._increment = self._last_ms + 1, 0
        return snowflake_from_ms(self._last_ms, worker=self._worker, increment=self._increment)
