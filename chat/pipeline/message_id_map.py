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
        self._keys: dict[str, dict[int, str]] = {MESSAGE_PREFIX: {}, MEDIA_PREFIX: {}}
        """Per namespace, snowflake → key (one dict per namespace rather than (prefix,
        snowflake) keys: a kept context holds one map, and the key tuples were a tenth of it)."""
        self._snowflakes: dict[str, int] = {}
        self._counts = {MESSAGE_PREFIX: 0, MEDIA_PREFIX: 0}

    def register_message(self, message_id: int) -> str:
        """Return the ``ref_N`` key for a message snowflake, issuing the next one if new."""
        return self._register(MESSAGE_PREFIX, message_id)

    def register_media(self, attachment_id: int) -> str:
        """Return the ``media_N`` key for an attachment snowflake, issuing the next one if new."""
        return self._register(MEDIA_PREFIX, attachment_id)

    def message_key(self, message_id: int) -> str | None:
        """The key already issued for a message, or None when it was never registered."""
        return self._keys[MESSAGE_PREFIX].get(message_id)

    def resolve(self, key: str) -> int | None:
        """The snowflake behind ``key``; None when ``key`` is not an issued key (malformed keys
        such as ``ref_01`` are never issued, so they resolve to None too)."""
        return self._snowflakes.get(key)

    def as_mapping(self) -> Mapping[str, int]:
        """A read-only view of every issued key and its snowflake, in issue order per namespace."""
        return MappingProxyType(self._snowflakes)

    def copy(self) -> MessageIdMap:
        """An independent map with the same keys, to go on registering from."""
        duplicate = MessageIdMap()
        duplicate._keys = {prefix: dict(keys) for prefix, keys in self._keys.items()}
        duplicate._snowflakes = dict(self._snowflakes)
        duplicate._counts = dict(self._counts)
        return duplicate

    def __len__(self) -> int:
        return len(self._snowflakes)

    def __eq__(self, other: object) -> bool:
        """Maps are equal when they issued the same keys, for the same snowflakes, in order."""
        if not isinstance(other, MessageIdMap):
            return NotImplemented
        return list(self._snowflakes.items()) == list(other._snowflakes.items())

    __hash__ = None  # type: ignore[assignment]  # mutable while being filled

    @staticmethod
    def is_key(text: str) -> bool:
        """True when ``text`` has the exact shape of a key (whether or not it was issued)."""
        return KEY_PATTERN.fullmatch(text) is not None

    def _register(self, prefix: str, snowflake: int) -> str:
        keys = self._keys[prefix]
        existing = keys.get(snowflake)
        if existing is not None:
            return existing
        self._counts[prefix] += 1
        key = f"{prefix}_{self._counts[prefix]}"
        keys[snowflake] = key
        self._snowflakes[key] = snowflake
        return key
