"""Ids in the dashboard's query strings (its paths use Django's ``<int:…>``: ASCII digits too).

An id is written in ASCII digits and fits the database's id columns (a signed 64-bit integer):
Discord snowflakes and row ids alike. Anything else names nothing: ``str.isdigit()`` accepts
``²`` and ``٣``, and ``int()`` reads both, so neither is used on a request's text here.
"""

from __future__ import annotations

import re

ID_MAX = 2**63 - 1
"""The largest value a bigint column holds; a larger number is no row's id."""

_ID = re.compile(r"[0-9]{1,19}")


def parse_id(value: str | None) -> int | None:
    """The id ``value`` spells (surrounding whitespace ignored), or None when it is missing,
    empty, not ASCII digits, or larger than `ID_MAX`."""
    text = (value or "").strip()
    if not _ID.fullmatch(text):
        return None
    number = int(text)
    return number if number <= ID_MAX else None
