"""Snowflakes: increasing ids that carry their creation time."""

from __future__ import annotations

from datetime import UTC, datetime

from chat.pipeline.snowflakes import snowflake_time
from chat.sandbox.snowflake import SnowflakeGenerator, iso_timestamp

NOON = datetime(2026, 7, 11, 12, 0, tzinfo=UTC).timestamp()


def test_an_id_carries_its_creation_time() -> None:
    snowflake = SnowflakeGenerator(clock=lambda: NOON + 0.123).next_id()
    assert iso_timestamp(snowflake_time(snowflake)) == "2026-07-11T12:00:00.123000+00:00"


def test_ids_from_one_millisecond_still_increase() -> None:
    generator = SnowflakeGenerator(clock=lambda: NOON)
    ids = [generator.next_id() for _ in range(5000)]  # more than the 4096 increments
    assert ids == sorted(set(ids))
    assert snowflake_time(ids[0]) == datetime.fromtimestamp(NOON, UTC)


def test_a_clock_stepping_back_never_repeats_or_decreases_ids() -> None:
    times = iter([NOON, NOON - 5, NOON - 5, NOON + 1])
    generator = SnowflakeGenerator(clock=lambda: next(times))
    ids = [generator.next_id() for _ in range(4)]
    assert ids == sorted(set(ids))
    assert snowflake_time(ids[-1]) == datetime.fromtimestamp(NOON + 1, UTC)
