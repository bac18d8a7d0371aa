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

A queued turn whose trigger, or whose anchor, the window has moved past asks `read_up_to` for the
messages up to its trigger. The registry then keeps, next to the window and contiguous with it, what
it read further back and what the window moves past while such turns keep asking; an edit, delete or
reaction among them, a REST read of the window, or a read no queued turn followed lets them go.
"""

from __future__ import annotations

import bisect
import copy
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from chat.caches import BoundedCache
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

MAX_OLDER = 200
"""Messages kept per channel from before its window (least recent dropped first)."""

OLDER_READ = 100
"""Messages one read further back asks for (Discord's most per request)."""

FetchHistory = Callable[[int, int], Awaitable[list[HistoryMessage]]]
FetchBefore = Callable[[int, int, int], Awaitable[list[HistoryMessage]]]
CacheView = Callable[[int], GatewayCacheView[HistoryMessage]]


@dataclass(slots=True)
class _ChannelWindow:
    previous: PreviousWindow[HistoryMessage] | None = None
    changed: set[int] = field(default_factory=set)
    deleted: set[int] = field(default_factory=set)
    bulk_deleted: set[int] = field(default_factory=set)
    deliveries: list[ConfirmedDelivery[HistoryMessage]] = field(default_factory=list)
    targets: dict[int, HistoryMessage] = field(default_factory=dict)
    older: tuple[HistoryMessage, ...] = ()
    """The messages right before ``previous`` (oldest first, contiguous with it): those the
    window moved past while it was reused, and those read further back for a queued turn."""
    older_from_start: bool = False
    """``older`` begins with the channel's first message (a read further back came up short)."""
    older_used: bool = False
    """A queued turn asked for ``older`` since the last `WindowRegistry.read`."""
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
    reconnected: a stored anchor predates the connection and is chosen anew (DESIGN §5). A
    registry without a gateway (``gateway=False``) never sets it: the stored anchor's own
    ``reanchor_due`` says so for it.
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
        dm_reactions_subscribed: bool = False,
        shard_of: Callable[[int], int | None] = lambda channel_id: 0,
        gateway: bool = True,
    ) -> None:
        """``dm_reactions_subscribed``: the gateway delivers reactions in DMs and they are
        recorded (`record_change`); without them a DM's window is never reused. ``shard_of``
        names the shard a channel's events come through (None: not known), so a disconnected
        shard disables reuse for its own channels only. ``gateway``: the registry is fed by
        this process's gateway connection (the worker's), so a channel not read since the
        connection began is re-anchored (`WindowRead.force_reanchor`); one without (the
        dashboard's and Celery's dry runs) knows nothing of any connection and leaves that to
        the stored anchor (`ChannelWindowAnchor.reanchor_due`)."""
        self._fetch_history = fetch_history
        self._dm_reactions_subscribed = dm_reactions_subscribed
        self._cache_view = cache_view
        self._windows: BoundedCache[int, _ChannelWindow] = BoundedCache(max_channels)
        self._connection = 0
        self._anchored_in: dict[int, int] = {}
        self._shard_of = shard_of
        self._gateway = gateway
        self.disconnected_shards: set[int] = set()
        """Shards whose gateway session is down now (`shard_disconnected`)."""
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
            window = copy.deepcopy(self._windows.peek(channel_id)) or _ChannelWindow()
        else:
            window = self._windows.get_or_put(channel_id, _ChannelWindow)
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
            shard_connected=self.channel_shard_connected(channel_id),
            # drop_all cleared the window; a channel last read before it says so
            shard_reconnected_since=read_in is not None and read_in != self._connection,
            is_dm=is_dm,
            dm_reactions_subscribed=self._dm_reactions_subscribed,
        )
        if isinstance(decision, RestRead):
            messages = await self._read_rest(
                channel_id,
                window,
                lambda: self._fetch_history(channel_id, limit),
                count=not dry_run,
            )
            reason: RestReason | None = decision.reason
        else:
            messages = decision.messages
            reason = None
        force_reanchor = self.reanchor_pending(channel_id)
        if not dry_run:
            _keep_older(window, messages, reused=reason is None)
            window.previous = PreviousWindow(messages=messages, limit=limit)
            window.clear_signals()
            self._anchored_in[channel_id] = self._connection
        return WindowRead(messages=messages, rest_reason=reason, force_reanchor=force_reanchor)

    def reanchor_pending(self, channel_id: int) -> bool:
        """Whether the channel's next read re-anchors it: the gateway connected, reconnected
        or disconnected since it was last read (never for a registry without a gateway)."""
        return self._gateway and self._anchored_in.get(channel_id) != self._connection

    async def read_up_to(
        self,
        channel_id: int,
        message_id: int,
        *,
        count: int,
        fetch_before: FetchBefore,
        dry_run: bool = False,
    ) -> tuple[tuple[HistoryMessage, ...], bool] | None:
        """The ``count`` messages up to and including ``message_id`` (oldest first), from what
        the channel's window and the older messages kept before it hold: a queued turn whose
        trigger or anchor the window has moved past keeps what was said before it.

        Reads further back over REST (`OLDER_READ` messages at a time, up to `MAX_OLDER`) when
        what is held does not reach far enough; what it reads is kept for the next queued turn
        (not with ``dry_run``). Call it after `read`, in the same turn.

        Returns:
            The messages and whether REST was read; None when the registry holds no window
            for the channel or ``message_id`` is not among the messages it may keep (the
            caller reads around the message itself).
        """
        window = self._windows.peek(channel_id)
        if window is None or window.previous is None or not window.previous.messages:
            return None
        if dry_run:
            window = copy.deepcopy(window)  # read and keep as usual, on a copy
        window.older_used = True
        newest = window.previous.messages
        read_rest = False
        for _ in range(MAX_OLDER // OLDER_READ + 3):  # a few more for changes while reading
            older = window.older
            held = (*older, *newest)
            position = _last_at_or_before(held, message_id)
            if position is not None and position + 1 >= count:
                break
            if window.older_from_start or len(older) >= MAX_OLDER:
                break
            earlier = await self._read_rest(
                channel_id,
                window,
                lambda before=held[0].id: fetch_before(channel_id, before, OLDER_READ),
                count=not dry_run,
            )
            read_rest = True
            if window.older is not older:
                continue  # a change touched the kept messages while reading: start over
            window.older = (*earlier, *older)
            window.older_from_start = len(earlier) < OLDER_READ
        held = (*window.older, *newest)
        position = _last_at_or_before(held, message_id)
        if position is None or held[position].id != message_id:
            return None
        return held[max(0, position + 1 - count) : position + 1], read_rest

    async def _read_rest(
        self,
        channel_id: int,
        window: _ChannelWindow,
        fetch: Callable[[], Awaitable[list[HistoryMessage]]],
        *,
        count: bool,
    ) -> tuple[HistoryMessage, ...]:
        """Read from Discord; a change recorded while reading forces one more read, because
        the response may carry the pre-edit copy."""
        for _ in range(3):
            window.reading, window.changed_during_read = True, False
            try:
                self.rest_reads += count
                messages = await fetch()
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
        window = self._windows.peek(channel_id)
        if window is not None and window.previous is not None:
            window.deliveries.append(ConfirmedDelivery(message_id=message_id, message=message))

    def reply_target(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        """A reply target fetched earlier for the channel (None: not known)."""
        window = self._windows.peek(channel_id)
        return window.targets.get(message_id) if window is not None else None

    def remember_reply_target(self, channel_id: int, message: HistoryMessage) -> None:
        window = self._windows.peek(channel_id)
        if window is not None:
            window.targets[message.id] = message

    def channel_shard_connected(self, channel_id: int) -> bool:
        """Whether the shard carrying ``channel_id``'s events is connected; a channel whose
        shard is not known counts as disconnected while any shard is."""
        shard = self._shard_of(channel_id)
        if shard is None:
            return not self.disconnected_shards
        return shard not in self.disconnected_shards

    def shard_disconnected(self, shard_id: int) -> None:
        """A shard's session ended: its channels' windows are not reused until it is back;
        every window is dropped (seed 000: disconnects and reconnects drop all windows)."""
        self.disconnected_shards.add(shard_id)
        self.drop_all()

    def shard_connected(self, shard_id: int) -> None:
        """A shard's session is up again (resumed or new): reuse resumes for its channels once
        they are read anew; every window is dropped."""
        self.disconnected_shards.discard(shard_id)
        self.drop_all()

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
                self._windows.items(),
                self._connection,
                self._anchored_in,
                self.disconnected_shards,
                self.rest_reads,
            )
        )

    def _signal(self, channel_id: int, kind: str, message_ids: Sequence[int]) -> None:
        window = self._windows.peek(channel_id)
        if window is None:
            return
        for message_id in message_ids:
            window.targets.pop(message_id, None)
        if window.older and any(
            window.older[0].id <= message_id <= window.older[-1].id for message_id in message_ids
        ):
            # kept copies may be stale: read again when needed
            window.older, window.older_from_start = (), False
        if window.reading:
            window.changed_during_read = True
        if window.previous is not None:
            getattr(window, kind).update(message_ids)


def _keep_older(
    window: _ChannelWindow, messages: tuple[HistoryMessage, ...], *, reused: bool
) -> None:
    """Before ``messages`` replaces the window: keep the older messages kept so far plus those
    the window moves past, while queued turns use them (one asked since the last read), the
    new window continues the old one (reused) and nothing among them changed; else keep none.
    A channel without queued turns behind its window therefore keeps nothing older."""
    previous, older = window.previous, window.older
    kept: tuple[HistoryMessage, ...] = ()
    if window.older_used and reused and previous is not None and messages:
        kept = (*older, *(m for m in previous.messages if m.id < messages[0].id))
    window.older_used = False
    signalled = window.changed | window.deleted | window.bulk_deleted
    if kept and any(kept[0].id <= message_id <= kept[-1].id for message_id in signalled):
        kept = ()
    window.older = kept[-MAX_OLDER:]
    window.older_from_start = (
        window.older_from_start and bool(older) and bool(kept) and window.older[0] is older[0]
    )


def _last_at_or_before(messages: Sequence[HistoryMessage], message_id: int) -> int | None:
    """The position of the newest message at or before ``message_id`` (oldest-first input)."""
    position = bisect.bisect_right([m.id for m in messages], message_id) - 1
    return position if position >= 0 else None
