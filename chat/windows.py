"""The worker's per-channel history windows: reuse while the gateway saw everything, REST
otherwise.

The pure decision is `chat.pipeline.window_reuse.decide_window_reuse`; this module is its shell.
It holds, per channel, the previous window and the change signals the gateway recorded since
(edits, deletes, bulk deletes, reactions), asks the decision, and either returns the merged
window or reads the channel from Discord. Co-responding personas, queued turns and the next
turns of a conversation therefore share one read.

Beyond seed 000, which drops a channel's window when its busy stretch ends (discord.js may sweep
its cache), a window here survives idle gaps: discord.py's message cache only evicts the oldest
messages, and every freshness rule still applies — new messages must be continuous in the
gateway cache since the previous window (else a cache gap forces a REST read), edits, deletes
and reactions recorded while idle force the read the seed prescribes, and a shard disconnect or
reconnect drops every window (the client also forgets the gateway cache on a new session, whose
copies may predate what the gateway missed). Windows are kept for the most recently read
``max_channels`` channels (least recently used dropped first).

Reply targets fetched for a channel are kept with its window (`reply_target`), so a target is
fetched once; an edit or delete of it forgets it.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from chat.pipeline.types import HistoryMessage
from chat.pipeline.window_reuse import (
    ChangeSignals,
    ConfirmedDelivery,
    GatewayCacheView,
    PreviousWindow,
    RestRead,
    RestReason,
    decide_window_reuse,
)

logger = logging.getLogger(__name__)

MAX_CHANNELS = 1000
"""Channels whose windows are kept (least recently read dropped first)."""

MAX_SIGNALS = 500
"""Recorded change ids per channel before the window is dropped (signal overflow)."""

FetchHistory = Callable[[int, int], Awaitable[list[HistoryMessage]]]
CacheView = Callable[[int], GatewayCacheView[HistoryMessage]]


@dataclass(slots=True)
class _ChannelWindow:
    previous: PreviousWindow[HistoryMessage] | None = None
    changed: set[int] = field(default_factory=set)
    deleted: set[int] = field(default_factory=set)
    bulk_deleted: set[int] = field(default_factory=set)
    deliveries: list[ConfirmedDelivery[HistoryMessage]] = field(default_factory=list)
    targets: dict[int, HistoryMessage] = field(default_factory=dict)
    reading: bool = False
    changed_during_read: bool = False

    @property
    def overflowed(self) -> bool:
        return len(self.changed) + len(self.deleted) + len(self.bulk_deleted) > MAX_SIGNALS

    def clear_signals(self) -> None:
        self.changed.clear()
        self.deleted.clear()
        self.bulk_deleted.clear()
        self.deliveries.clear()
        self.changed_during_read = False


@dataclass(frozen=True)
class WindowRead:
    """A window and how it was obtained (``rest_reason`` None: reused without a REST read).

    ``force_reanchor`` is set on the first read of a channel after the worker connected or
    reconnected: a stored anchor predates the connection and is chosen anew (DESIGN §5).
    """

    messages: tuple[HistoryMessage, ...]
    rest_reason: RestReason | None
    force_reanchor: bool = False


class WindowRegistry:
    """Per-channel windows of one worker. Not thread-safe: used from the worker's event loop,
    and a channel is only read under its channel lock."""

    def __init__(
        self,
        *,
        fetch_history: FetchHistory,
        cache_view: CacheView,
        max_channels: int = MAX_CHANNELS,
    ) -> None:
        self._fetch_history = fetch_history
        self._cache_view = cache_view
        self._max_channels = max_channels
        self._windows: OrderedDict[int, _ChannelWindow] = OrderedDict()
        self._connection = 0
        self._anchored_in: dict[int, int] = {}
        self.shard_connected = True
        self.rest_reads = 0

    async def read(
        self, channel_id: int, *, limit: int, is_dm: bool = False, dry_run: bool = False
    ) -> WindowRead:
        """The channel's newest ``limit`` messages (oldest first), reused when safe.

        With ``dry_run`` the answer is the same but the registry is left exactly as it was: the
        previous window, the recorded signals, the read count and the connection's anchoring
        all stay untouched (the dashboard's preview inspects without changing state).
        """
        if dry_run:
            window = copy.deepcopy(self._windows.get(channel_id)) or _ChannelWindow()
        else:
            window = self._windows.setdefault(channel_id, _ChannelWindow())
            self._windows.move_to_end(channel_id)
            while len(self._windows) > self._max_channels:
                self._windows.popitem(last=False)
        read_in = self._anchored_in.get(channel_id)
        decision = decide_window_reuse(
            previous=window.previous,
            cache=self._cache_view(channel_id),
            signals=ChangeSignals(
                changed_ids=frozenset(window.changed),
                deleted_ids=frozenset(window.deleted),
                bulk_deleted_ids=frozenset(window.bulk_deleted),
                overflowed=window.overflowed,
                changed_during_read=window.changed_during_read,
            ),
            confirmed_deliveries=tuple(window.deliveries),
            limit=limit,
            shard_connected=self.shard_connected,
            # drop_all cleared the window; a channel last read before it says so
            shard_reconnected_since=read_in is not None and read_in != self._connection,
            is_dm=is_dm,
            dm_reactions_subscribed=False,
            channel_idle=False,
        )
        if isinstance(decision, RestRead):
            messages = await self._rest_read(channel_id, window, limit=limit, count=not dry_run)
            reason: RestReason | None = decision.reason
        else:
            messages = decision.messages
            reason = None
        force_reanchor = read_in != self._connection
        if not dry_run:
            window.previous = PreviousWindow(messages=messages, limit=limit)
            window.clear_signals()
            self._anchored_in[channel_id] = self._connection
        return WindowRead(messages=messages, rest_reason=reason, force_reanchor=force_reanchor)

    async def _rest_read(
        self, channel_id: int, window: _ChannelWindow, *, limit: int, count: bool = True
    ) -> tuple[HistoryMessage, ...]:
        """Read from Discord; a change recorded while reading forces one more read, because
        the response may carry the pre-edit copy."""
        for _ in range(3):
            window.reading, window.changed_during_read = True, False
            try:
                self.rest_reads += count
                messages = await self._fetch_history(channel_id, limit)
            finally:
                window.reading = False
            if not window.changed_during_read:
                break
            logger.info("channel %s changed during a history read; reading again", channel_id)
        return tuple(sorted(messages, key=lambda m: m.id))

    def record_change(self, channel_id: int, message_id: int) -> None:
        """An edit or a reaction touched ``message_id``."""
        self._signal(channel_id, "changed", [message_id])

    def record_delete(self, channel_id: int, message_ids: Sequence[int], *, bulk: bool) -> None:
        self._signal(channel_id, "bulk_deleted" if bulk else "deleted", message_ids)

    def record_delivery(
        self, channel_id: int, message: HistoryMessage | None, message_id: int
    ) -> None:
        """The bot delivered a message; without a full message object the window is dropped
        on the next read (`RestReason.DELIVERY_WITHOUT_MESSAGE`)."""
        window = self._windows.get(channel_id)
        if window is not None and window.previous is not None:
            window.deliveries.append(ConfirmedDelivery(message_id=message_id, message=message))

    def reply_target(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        """A reply target fetched earlier for the channel (None: not known)."""
        window = self._windows.get(channel_id)
        return window.targets.get(message_id) if window is not None else None

    def remember_reply_target(self, channel_id: int, message: HistoryMessage) -> None:
        window = self._windows.get(channel_id)
        if window is not None:
            window.targets[message.id] = message

    def drop_all(self) -> None:
        """A shard disconnected or reconnected: no window survives it, and every channel's
        next read chooses a new anchor."""
        self._windows.clear()
        self._connection += 1

    def snapshot(self) -> object:
        """A deep copy of the registry's whole state, comparable with ``==`` (tests use it to
        prove that a dry run changed nothing)."""
        return copy.deepcopy(
            (
                self._windows,
                self._connection,
                self._anchored_in,
                self.shard_connected,
                self.rest_reads,
            )
        )

    def _signal(self, channel_id: int, kind: str, message_ids: Sequence[int]) -> None:
        window = self._windows.get(channel_id)
        if window is None:
            return
        for message_id in message_ids:
            window.targets.pop(message_id, None)
        if window.reading:
            window.changed_during_read = True
        if window.previous is not None:
            getattr(window, kind).update(message_ids)
