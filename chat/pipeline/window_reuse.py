"""Whether a turn may reuse the channel's previous history window or must read Discord again.

Seed 000, "Message retrieval" and "History freshness"; DESIGN §5, "Window reuse". A channel's
first turn reads up to the fetch limit of messages over REST. Later turns (other personas,
queued replays, the next busy stretch after an idle gap) rebuild the window from memory
instead: the previous window, plus what the gateway cache received since, plus the bot's own
confirmed deliveries (`chat.windows` keeps the window across idle gaps and says why that is
safe). That is only safe while nothing could have changed behind the cache's back, so every
reason to distrust it sends the turn back to REST, and says which one.

``decide_window_reuse`` is a pure decision: the worker gathers its inputs (the window registry's
window and recorded change signals, the discord.py message cache for the channel, the shard's
connection state) and acts on the answer. Messages are generic (anything with an integer
snowflake ``id``), as in ``chat.pipeline.window``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from typing import Generic

from chat.pipeline.window import M, validate_fetch_limit


class RestReason(StrEnum):
    """Why a turn must read its history from Discord instead of reusing the window.

    The values are stable codes: turn records and dashboards store and show them.
    """

    NO_PREVIOUS_WINDOW = "no_previous_window"
    """No window is kept for the channel (its first turn, or one dropped), or it is empty."""
    SHARD_DISCONNECTED = "shard_disconnected"
    """The shard is disconnected: gateway events are being missed, so reuse is disabled."""
    SHARD_RECONNECTED = "shard_reconnected"
    """The shard reconnected since the window was read: events may have been missed."""
    DM_WITHOUT_REACTION_EVENTS = "dm_without_reaction_events"
    """A DM, and the client does not receive DM reaction events, so reactions go unseen."""
    SIGNAL_OVERFLOW = "signal_overflow"
    """More change signals arrived than the window registry records; some changes are unknown."""
    CHANGED_DURING_READ = "changed_during_read"
    """A change arrived while the window was being read; the read may hold the old version."""
    LIMIT_INCREASED = "limit_increased"
    """The turn's fetch limit is larger than the one the window was read with."""
    CACHE_CLEARED = "cache_cleared"
    """The gateway cache for the channel was cleared."""
    CACHE_GAP = "cache_gap"
    """The cache cannot be shown to hold every message since the window's newest one."""
    UNCACHED_CHANGE = "uncached_change"
    """A window message was edited or reacted to, and the cache holds no fresh copy of it."""
    DELETION_NEEDS_OLDER_HISTORY = "deletion_needs_older_history"
    """Deletions left fewer messages than the limit, and older messages may exist."""
    DELIVERY_WITHOUT_MESSAGE = "delivery_without_message"
    """A delivery was recorded without a full message object to put in the window."""
    OLDER_THAN_WINDOW = "older_than_window"
    """A queued trigger is older than the kept window and what is kept before it: the history
    before it was read (the worker's own rule, beyond seed 000's list)."""


def _require_oldest_to_newest(messages: tuple[M, ...], what: str) -> None:
    for older, newer in pairwise(messages):
        if newer.id <= older.id:
            raise ValueError(
                f"{what} must be oldest to newest with unique ids; {newer.id} follows {older.id}"
            )


@dataclass(frozen=True)
class PreviousWindow(Generic[M]):
    """The history window the channel's previous turn used.

    Attributes:
        messages: The raw Discord messages of the window (before filtering or simplification),
            oldest to newest, ids strictly increasing. A list is stored as a tuple.
        limit: The normalized fetch limit the window was read (or rebuilt) with.
        drop_reason: None while the window is usable. The worker drops a window by setting the
            reason at the moment it learns it cannot be trusted (for example
            ``RestReason.SHARD_RECONNECTED`` on a reconnect); the next decision returns that
            reason.

    Raises:
        ValueError: on construction, when ids are not strictly increasing or ``limit`` is not a
            normalized fetch limit.
    """

    messages: tuple[M, ...]
    limit: int
    drop_reason: RestReason | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        _require_oldest_to_newest(self.messages, "PreviousWindow.messages")
        validate_fetch_limit(self.limit)

    @property
    def dropped(self) -> bool:
        """True when the window was dropped and must not be reused."""
        return self.drop_reason is not None


@dataclass(frozen=True)
class GatewayCacheView(Generic[M]):
    """What the gateway message cache (discord.py's ``max_messages`` cache) holds for a channel.

    Attributes:
        messages: The cached messages of the channel, oldest to newest, ids strictly increasing,
            converted at the moment of the decision (so they carry every edit and reaction the
            gateway delivered). A list is stored as a tuple.
        complete_since_id: The cache is known to hold every message of the channel with an id at
            or above this one, except deleted messages. None means the usual guarantee of a
            first-in-first-out cache within one gateway session: complete from its oldest entry.
            A value narrows that (the cache is never trusted before its oldest entry).
        cleared: The cache for the channel was cleared since the window was read.

    Raises:
        ValueError: on construction, when ids are not strictly increasing.
    """

    messages: tuple[M, ...]
    complete_since_id: int | None = None
    cleared: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        _require_oldest_to_newest(self.messages, "GatewayCacheView.messages")


@dataclass(frozen=True)
class ChangeSignals:
    """Change events the window registry recorded for the channel since its window was read.

    Attributes:
        changed_ids: Messages edited (update events) or reacted to (raw reaction events).
        deleted_ids: Messages deleted one at a time.
        bulk_deleted_ids: Messages removed by bulk deletion.
        overflowed: More signals arrived than the entry records, so the sets are incomplete.
        changed_during_read: A change event arrived while the window was being read over REST;
            the response may carry the version from before the change.

    Any iterable of ids is stored as a frozenset.
    """

    changed_ids: frozenset[int] = frozenset()
    deleted_ids: frozenset[int] = frozenset()
    bulk_deleted_ids: frozenset[int] = frozenset()
    overflowed: bool = False
    changed_during_read: bool = False

    def __post_init__(self) -> None:
        for name in ("changed_ids", "deleted_ids", "bulk_deleted_ids"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))


@dataclass(frozen=True)
class ConfirmedDelivery(Generic[M]):
    """A message the bot delivered in the channel (bot account or webhook) during the stretch.

    Recorded when Discord confirms the send, possibly before the gateway echo reaches the cache.

    Attributes:
        message_id: The delivered message's id.
        message: The full message object returned by the send; None when the send returned no
            full message, which makes the window unusable (``DELIVERY_WITHOUT_MESSAGE``).

    Raises:
        ValueError: on construction, when ``message`` is given and its id is not ``message_id``.
    """

    message_id: int
    message: M | None = None

    def __post_init__(self) -> None:
        if self.message is not None and self.message.id != self.message_id:
            raise ValueError(
                f"ConfirmedDelivery.message has id {self.message.id}, expected {self.message_id}"
            )


@dataclass(frozen=True)
class WindowReuse(Generic[M]):
    """Reuse: the turn's history is ``messages`` (oldest to newest, at most the limit)."""

    messages: tuple[M, ...]


@dataclass(frozen=True)
class RestRead:
    """Read the history from Discord over REST, for ``reason``."""

    reason: RestReason


def decide_window_reuse(
    *,
    previous: PreviousWindow[M] | None,
    cache: GatewayCacheView[M],
    signals: ChangeSignals,
    confirmed_deliveries: Sequence[ConfirmedDelivery[M]],
    limit: int,
    shard_connected: bool,
    shard_reconnected_since: bool,
    is_dm: bool,
    dm_reactions_subscribed: bool,
) -> WindowReuse[M] | RestRead:
    """Decide whether this turn reuses the previous window or reads history from Discord.

    Checks, in this order; the first that applies decides. They run from the broadest cause to
    the narrowest (shard, channel, window, individual messages), so the reason recorded is the
    one that explains the most: a reconnect that dropped every window reads as
    ``SHARD_RECONNECTED``, not as a missing window.

        1. The shard is disconnected → ``SHARD_DISCONNECTED``.
        2. The shard reconnected since the window was read → ``SHARD_RECONNECTED``.
        3. A DM, without DM reaction events → ``DM_WITHOUT_REACTION_EVENTS``.
        4. No previous window, or an empty one (it has no newest message for the cache to
           continue from) → ``NO_PREVIOUS_WINDOW``.
        5. The window was dropped → its ``drop_reason``.
        6. The change signals overflowed → ``SIGNAL_OVERFLOW``.
        7. A change arrived during the read → ``CHANGED_DURING_READ``.
        8. A confirmed delivery has no message object → ``DELIVERY_WITHOUT_MESSAGE``.
        9. ``limit`` is larger than the window's limit → ``LIMIT_INCREASED`` (the window never
            saw the older messages the larger limit needs). A smaller limit is fine: step 11
            trims.
        10. The cache was cleared → ``CACHE_CLEARED``.
        11. The cache does not continue the window → ``CACHE_GAP``: the cache is empty, or its
            oldest entry (or ``complete_since_id``, when later) is newer than the window's newest
            message, so a message between the two may have been evicted or missed. This holds
            even when the cache is below capacity: deletion or sweeping can shrink a cache after
            earlier entries were evicted.
        12. Merge, in this precedence for the same id: cached instance (it carries edits and
            reactions), then the window's copy, then the delivery's copy (a delivery older than
            the window's read is in the read itself, which is the fresher copy). Cached messages
            and deliveries older than the window's oldest message are not added: the window's
            start is where the REST read established the history is complete. Remove deleted and
            bulk-deleted ids, sort by snowflake, keep the newest ``limit``.
        13. A message in the result was edited or reacted to and its copy is not the cached
            one → ``UNCACHED_CHANGE``. Changes to messages outside the result do not matter.
        14. Before trimming, the merge holds fewer than ``limit`` messages while the previous
            window was full (it held its own limit, so the channel may have older messages)
            → ``DELETION_NEEDS_OLDER_HISTORY``. Without deletions the merge cannot shrink, and a
            window that was not full already held the channel's whole history.
        15. Otherwise → ``WindowReuse`` with the result of step 12.

    Args:
        previous: The channel's window from its previous turn; None when the window registry
            holds none.
        cache: What the gateway cache holds for the channel now.
        signals: Change events recorded since the window was read.
        confirmed_deliveries: The bot's confirmed deliveries in the channel since the window
            was read, in any order.
        limit: The normalized fetch limit for this turn.
        shard_connected: The channel's shard is connected to the gateway now.
        shard_reconnected_since: The shard reconnected after the window was read.
        is_dm: The channel is a direct-message channel.
        dm_reactions_subscribed: The client receives reaction events in DMs.

    Returns:
        ``WindowReuse`` with the history to use, or ``RestRead`` with the reason to read.

    Raises:
        ValueError: when ``limit`` is not a normalized fetch limit.
    """
    validate_fetch_limit(limit)
    if not shard_connected:
        return RestRead(RestReason.SHARD_DISCONNECTED)
    if shard_reconnected_since:
        return RestRead(RestReason.SHARD_RECONNECTED)
    if is_dm and not dm_reactions_subscribed:
        return RestRead(RestReason.DM_WITHOUT_REACTION_EVENTS)
    if previous is None or not previous.messages:
        return RestRead(RestReason.NO_PREVIOUS_WINDOW)
    if previous.drop_reason is not None:
        return RestRead(previous.drop_reason)
    if signals.overflowed:
        return RestRead(RestReason.SIGNAL_OVERFLOW)
    if signals.changed_during_read:
        return RestRead(RestReason.CHANGED_DURING_READ)
    if any(delivery.message is None for delivery in confirmed_deliveries):
        return RestRead(RestReason.DELIVERY_WITHOUT_MESSAGE)
    if limit > previous.limit:
        return RestRead(RestReason.LIMIT_INCREASED)
    if cache.cleared:
        return RestRead(RestReason.CACHE_CLEARED)
    if not _cache_continues_window(cache, newest_window_id=previous.messages[-1].id):
        return RestRead(RestReason.CACHE_GAP)

    oldest_window_id = previous.messages[0].id
    merged: dict[int, M] = {}
    for delivery in confirmed_deliveries:
        if delivery.message is not None and delivery.message_id >= oldest_window_id:
            merged[delivery.message_id] = delivery.message
    for message in previous.messages:
        merged[message.id] = message
    cached_ids: set[int] = set()
    for message in cache.messages:
        if message.id >= oldest_window_id:
            merged[message.id] = message
            cached_ids.add(message.id)
    for deleted_id in signals.deleted_ids | signals.bulk_deleted_ids:
        merged.pop(deleted_id, None)
    kept = [merged[message_id] for message_id in sorted(merged)]
    window = tuple(kept[-limit:])

    if any(m.id in signals.changed_ids and m.id not in cached_ids for m in window):
        return RestRead(RestReason.UNCACHED_CHANGE)
    if len(kept) < limit and len(previous.messages) >= previous.limit:
        return RestRead(RestReason.DELETION_NEEDS_OLDER_HISTORY)
    return WindowReuse(window)


def _cache_continues_window(cache: GatewayCacheView[M], *, newest_window_id: int) -> bool:
    """True when the cache is known to hold every message newer than the window's newest."""
    if not cache.messages:
        return False
    complete_from = cache.messages[0].id
    if cache.complete_since_id is not None:
        complete_from = max(complete_from, cache.complete_since_id)
    return complete_from <= newest_window_id
