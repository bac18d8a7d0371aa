"""`BoundedCache`: what a long-lived process keeps in memory, never more than a set number of
entries (the least recently used go first). Every in-memory cache of the worker is one of these,
so none can grow without bound."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``capacity`` entries; reading (`get`) or writing (`put`) an entry makes it the
    most recently used, and the least recently used is dropped when there is no room.

    Not thread-safe: a cache shared by threads is guarded by its owner's lock.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a bounded cache holds at least 1 entry, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The entry of ``key`` (now the most recently used), or ``default``."""
        if key not in self._entries:
            return default
        self._entries.move_to_end(key)
        return self._entries[key]

    def peek(self, key: K, default: V | None = None) -> V | None:
        """The entry of ``key`` without changing what is most recently used (an inspection
        that must leave the cache as it was), or ``default``."""
        return self._entries.get(key, default)

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` as the most recently used; drop the least recently used
        beyond the capacity."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The entry of ``key`` (now the most recently used); when there is none, ``make()``
        is kept for it first."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = make()
        self.put(key, value)
        return value

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Forget ``key``; its entry, or ``default``."""
        return self._entries.pop(key, default)

    def clear(self) -> None:
        self._entries.clear()

    def items(self) -> list[tuple[K, V]]:
        """The entries, least recently used first (a copy)."""
        return list(self._entries.items())

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))
