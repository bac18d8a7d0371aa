"""The value types of the configuration file's fields (`personas.config_schema`): Discord ids,
names, time zones, timestamps and texts, each bounded as its database column is
(``personas.models``)."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from personas.models import (
    AVATAR_URL_MAX,
    BLOCK_REASON_MAX,
    FETCH_LIMIT_MAX,
    FETCH_LIMIT_MIN,
    GREETING_MAX,
    LIMIT_NOTICE_MAX,
    MODEL_NAME_MAX,
    NOTE_DEPTH_MAX,
    NOTE_TEXT_MAX,
    PERSONA_NAME_MAX,
    PREFILL_MAX,
    PRICE_PER_MILLION_MAX,
    SAMPLE_CONTENT_MAX,
    SYSTEM_PROMPT_MAX,
    TOKENS_PER_DAY_MAX,
    TRIGGER_LENGTH_MAX,
    USD_DECIMAL_PLACES,
    USD_PER_MONTH_MAX,
    USER_TURNS_COUNT_MAX,
    USER_TURNS_SECONDS_MAX,
)

SNOWFLAKE_MAX = 2**63 - 1


def _check_snowflake(value: str) -> str:
    if not value.isascii() or not value.isdigit():
        raise ValueError("must be a Discord id: a string of digits")
    if int(value) > SNOWFLAKE_MAX:
        raise ValueError("is too large to be a Discord id")
    return value


def check_timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"{value!r} is not an IANA time zone name such as 'Europe/Paris'"
        ) from None
    return value


def check_aware(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return value
    if value.utcoffset() is None:
        raise ValueError("must include a time zone offset, e.g. 2026-12-01T00:00:00Z")
    try:
        value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None
    return value


Snowflake = Annotated[
    str, Field(strict=True), StringConstraints(max_length=20), AfterValidator(_check_snowflake)
]
Name = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=PERSONA_NAME_MAX)
]
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=MODEL_NAME_MAX)]
TriggerWord = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TRIGGER_LENGTH_MAX)
]
Depth = Annotated[int, Field(strict=True, ge=0, le=NOTE_DEPTH_MAX)]
AvatarUrl = Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=AVATAR_URL_MAX)]
FetchLimit = Annotated[int, Field(strict=True, ge=FETCH_LIMIT_MIN, le=FETCH_LIMIT_MAX)]
NoteText = Annotated[str, StringConstraints(max_length=NOTE_TEXT_MAX)]
SampleText = Annotated[str, StringConstraints(max_length=SAMPLE_CONTENT_MAX)]
SystemPrompt = Annotated[str, StringConstraints(max_length=SYSTEM_PROMPT_MAX)]
Prefill = Annotated[str, StringConstraints(max_length=PREFILL_MAX)]
Greeting = Annotated[str, StringConstraints(max_length=GREETING_MAX)]
BlockReason = Annotated[str, StringConstraints(max_length=BLOCK_REASON_MAX)]
TokensPerDay = Annotated[int, Field(strict=True, ge=0, le=TOKENS_PER_DAY_MAX)]
"""A day's tokens (prompt and reply); 0 lets no model call start."""
UsdPerMonth = Annotated[
    Decimal,
    Field(ge=0, le=USD_PER_MONTH_MAX, decimal_places=USD_DECIMAL_PLACES, allow_inf_nan=False),
]
"""US dollars a calendar month: a number or a decimal string such as ``"25.00"``."""
UserTurnsCount = Annotated[int, Field(strict=True, ge=1, le=USER_TURNS_COUNT_MAX)]
UserTurnsSeconds = Annotated[int, Field(strict=True, ge=1, le=USER_TURNS_SECONDS_MAX)]
LimitNotice = Annotated[str, StringConstraints(max_length=LIMIT_NOTICE_MAX)]
UsdPerMillion = Annotated[
    Decimal,
    Field(ge=0, le=PRICE_PER_MILLION_MAX, decimal_places=USD_DECIMAL_PLACES, allow_inf_nan=False),
]
"""A price in US dollars per million tokens (0: free, e.g. a local model)."""
