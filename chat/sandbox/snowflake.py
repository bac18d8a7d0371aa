"""Discord snowflakes: 64-bit ids that carry their creation time.

Layout (Discord's): milliseconds since the Discord epoch (2015-01-01) in the top 42 bits, then
5 bits worker, 5 bits process and a 12-bit increment. Ids therefore sort by creation time, and a
message's `timestamp` is derived from its id, as on Discord.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

DISCORD_EPOCH_MS = 1_420_070_400_000
_INCREMENT_BITS = 12
_MAX_INCREMENT = (1 << _INCREMENT_BITS) - 1


def snowflake_from_ms(unix_ms: int, *, worker: int = 0, increment: int = 0) -> int:
    """The snowflake created at `unix_ms` (Unix milliseconds) by `worker`, with `increment`."""
    if unix_ms < DISCORD_EPOCH_MS:
        raise ValueError(f"{unix_ms} ms is before the Discord epoch")
    return ((unix_ms - DISCORD_EPOCH_MS) << 22) | ((worker & 0x1F) << 17) | increment


def snowflake_time(snowflake: int) -> datetime:
    """When `snowflake` was created (UTC, millisecond precision)."""
    return datetime.fromtimestamp(((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000, tz=UTC)


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
