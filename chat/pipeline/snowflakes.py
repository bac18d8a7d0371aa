"""Discord snowflakes: 64-bit ids that carry their creation time.

Layout (Discord's): milliseconds since the Discord epoch (2015-01-01) in the top 42 bits, then
5 bits worker, 5 bits process and a 12-bit increment. Ids therefore sort by creation time.
"""

from __future__ import annotations

from datetime import UTC, datetime

DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake_from_ms(unix_ms: int, *, worker: int = 0, increment: int = 0) -> int:
    """The snowflake created at ``unix_ms`` (Unix milliseconds) by ``worker``, with
    ``increment``. Raises ``ValueError`` before the Discord epoch."""
    if unix_ms < DISCORD_EPOCH_MS:
        raise ValueError(f"{unix_ms} ms is before the Discord epoch")
    return ((unix_ms - DISCORD_EPOCH_MS) << 22) | ((worker & 0x1F) << 17) | increment


def snowflake_at(moment: datetime) -> int:
    """The smallest snowflake of ``moment`` (what a message sent then would exceed)."""
    return snowflake_from_ms(int(moment.timestamp() * 1000))


def snowflake_time(snowflake: int) -> datetime:
    """When ``snowflake`` was created (UTC, millisecond precision)."""
    return datetime.fromtimestamp(((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000, tz=UTC)
