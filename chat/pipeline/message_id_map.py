"""Compact prompt identifiers for Discord snowflakes (seed 000, "Message ID translation").

A prompt never shows a raw 17–20 digit snowflake: models waste tokens on them and hallucinate
near-misses. Messages become ``ref_1, ref_2, …`` and attachments ``media_1, media_2, …``, numbered
from 1 in the order simplification renders them, so the same window always yields the same keys.
Tools that target a message take the key and resolve it back through the map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

MESSAGE_PREFIX = "ref"
MEDIA_PREFIX = "media"
KEY_PATTERN = re.compile(r"(ref|media)_([1-9][0-9]*)")


class MessageIdMap:
    """Two namespaces of compact keys, filled while one turn's history is simplified.

    Registering is idempotent: the same snowflake always gets the key it got first. Keys are
    strict: ``ref_1x``, ``ref_0`` and ``ref_01`` are not keys (see `is_key`). The map is mutable
    only while it is being filled; `as_mapping` hands out a read-only view for the turn record.
    """

    def __init__(self) -> None:
        self._numbers: dict[str, dict[int, int]] = {MESSAGE_PREFIX: {}, MEDIA_PREFIX: {}}
        """Per namespace, snowflake → key number."""
        self._issued: dict[str, list[int]] = {MESSAGE_PREFIX: [], MEDIA_PREFIX: []}
        """Per namespace, the snowflakes in issue order: key number N is at N − 1. (A kept
        context holds one map per channel, so keys are numbers here and strings only on the
        way out.)"""

    def register_message(self, message_id: int) -> str:
        """Return the ``ref_N`` key for a message snowflake, issuing the next one if new."""
        return self._register(MESSAGE_PREFIX, message_id)

    def register_media(self, attachment_id: int) -> str:
        """Return the ``media_N`` key for an attachment snowflake, issuing the next one if new."""
        return self._register(MEDIA_PREFIX, attachment_id)

    def message_key(self, message_id: int) -> str | None:
        """The key already issued for a message, or None when it was never registered."""
        number = self._numbers[MESSAGE_PREFIX].get(message_id)
        return None if number is None else f"{MESSAGE_PREFIX}_{number}"

    def resolve(self, key: str) -> int | None:
        """The snowflake behind ``key``; None when ``key`` is not an issued key (malformed keys
        such as ``ref_01`` are never issued, so they resolve to None too)."""
        match = KEY_PATTERN.fullmatch(key)
        if match is None:
            return None
        issued, number = self._issued[match[1]], int(match[2])
        return issued[number - 1] if number <= len(issued) else None

    def as_mapping(self) -> Mapping[str, int]:
        """Every issued key and its snowflake, read-only, in issue order per namespace."""
        return MappingProxyType(
            {
                f"{prefix}_{number}": snowflake
                for prefix, issued in self._issued.items()
                for number, snowflake in enumerate(issued, start=1)
            }
        )

    def copy(self) -> MessageIdMap:
        """An independent map with the same keys, to go on registering from."""
        duplicate = MessageIdMap()
        duplicate._numbers = {prefix: dict(n) for prefix, n in self._numbers.items()}
        duplicate._issued = {prefix: list(issued) for prefix, issued in self._issued.items()}
        return duplicate

    def __len__(self) -> int:
        return sum(len(issued) for issued in self._issued.values())

    def __eq__(self, other: object) -> bool:
        """Maps are equal when they issued the same keys, for the same snowflakes, in order."""
        if not isinstance(other, MessageIdMap):
            return NotImplemented
        return self._issued == other._issued

    __hash__ = None  # type: ignore[assignment]  # mutable while being filled

    @staticmethod
    def is_key(text: str) -> bool:
        """True when ``text`` has the exact shape of a key (whether or not it was issued)."""
        return KEY_PATTERN.fullmatch(text) is not None

    def _register(self, prefix: str, snowflake: int) -> str:
        numbers = self._numbers[prefix]
        number = numbers.get(snowflake)
        if number is None:
            issued = self._issued[prefix]
            issued.append(snowflake)
            number = numbers[snowflake] = len(issued)
        return f"{prefix}_{number}"
