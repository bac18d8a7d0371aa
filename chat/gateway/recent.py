"""A bounded memory of this process's newest messages, by message id (`chat.gateway.adapter`
attributes gateway-cache copies of its deliveries and of proxied messages with it)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

RECENT_DELIVERIES = 5000
"""How many of its own deliveries (and proxied messages) the adapter remembers for attributing
cached messages (the size of the gateway's message cache: an older one is no longer cached)."""
V = TypeVar("V")


class Recent(Generic[V]):
    """A value per message id for this process's newest ``capacity`` messages (least recently
    recorded forgotten first): what gateway-cache copies are attributed by, since converting a
    cached message reads no database."""

    def __init__(self, capacity: int = RECENT_DELIVERIES) -> None:
        self._capacity = capacity
        self._values: OrderedDict[int, V] = OrderedDict()

    def record(self, message_id: int, value: V) -> None:
        self._values[message_id] = value
        self._values.move_to_end(message_id)
        while len(self._values) > self._capacity:
            self._values.popitem(last=False)

    def get(self, message_id: int) -> V | None:
        return self._values.get(message_id)

    def __len__(self) -> int:
        return len(self._values)
