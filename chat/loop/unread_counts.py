"""Unread counts for the dashboard, at most one per channel per `INTERVAL`.

A busy channel's pool changes with every batch the intake stores and every batch its loop
reads: hundreds of times a second across a busy worker, each a send on the channel layer that
costs the worker more CPU than storing the messages did. A moderator needs the newest count,
promptly, not every one: the first change of a quiet channel goes out at once (so a new message
shows at once), later ones within the interval wait, and only the newest of them goes out when
it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from botproject.live_updates import UnreadCount, channel_group, publish_live_update

INTERVAL = 0.25
"""Seconds between two counts of one channel: four a second, as fast as a moderator reads a
changing number, at a fraction of the channel-layer sends ten would cost a busy worker."""
FORGET_ABOVE = 4096
"""Channels remembered before those quiet for an interval are forgotten."""


class UnreadCounts:
    """Announces unread counts (one instance per scheduler; `close` when it stops)."""

    def __init__(
        self, *, interval: float = INTERVAL, clock: Callable[[], float] | None = None
    ) -> None:
        self._interval = interval
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._sent_at: dict[int, float] = {}
        """When each channel's last count went out (channels quiet for an interval are
        forgotten)."""
        self._waiting: dict[int, int] = {}
        """The newest count of each channel that waits for its interval to end."""
        self._flusher: asyncio.Task[None] | None = None

    async def announce(self, counts: Mapping[int, int]) -> None:
        """Publish each channel's count now, or, when one went out less than an interval
        ago, when the interval ends (a newer count replaces it meanwhile)."""
        now = self._clock()
        if len(self._sent_at) > FORGET_ABOVE:
            self._forget_quiet(now)
        due = []
        for channel_id, count in counts.items():
            sent_at = self._sent_at.get(channel_id)
            if channel_id in self._waiting or (
                sent_at is not None and now - sent_at < self._interval
            ):
                self._waiting[channel_id] = count
            else:
                self._sent_at[channel_id] = now
                due.append((channel_id, count))
        if self._waiting and self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="unread-counts")
        await _publish(due)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                next_due = min(self._sent_at[c] for c in self._waiting) + self._interval
                await asyncio.sleep(max(next_due - self._clock(), 0.0))
                now = self._clock()
                due = [
                    (c, self._waiting.pop(c))
                    for c in list(self._waiting)
                    if now - self._sent_at[c] >= self._interval
                ]
                for channel_id, _ in due:
                    self._sent_at[channel_id] = now
                await _publish(due)
                self._forget_quiet(now)
        finally:
            self._flusher = None

    def _forget_quiet(self, now: float) -> None:
        for channel_id, sent_at in list(self._sent_at.items()):
            if now - sent_at >= self._interval and channel_id not in self._waiting:
                del self._sent_at[channel_id]

    async def close(self) -> None:
        """Stop; counts still waiting are dropped (the worker is stopping)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher


async def _publish(counts: list[tuple[int, int]]) -> None:
    await asyncio.gather(
        *(
            publish_live_update(channel_group(channel_id), UnreadCount(count=count))
            for channel_id, count in counts
        )
    )
