"""The history window: how many Discord messages a turn reads, and where its prompt starts.

Seed 000, "History fetching and simplification" (Message retrieval, Anchored selection), with
the rules DESIGN §5 fixes:

- ``normalize_fetch_limit`` turns a guild's configured ``message_fetch_limit`` into the limit
  every other step is given (20..100, default 80).
- ``history_window_stride`` is how far a window's start jumps when it moves: 30% of the limit,
  rounded down to an even number (24 at 80).
- ``select_anchored_history`` keeps the window's first message fixed (the stored *anchor*) until
  the window would exceed the limit, then advances it by one stride at a time. A stable first
  message keeps the model provider's prompt cache warm; moving in strides bounds the window to
  between ``limit - stride`` and ``limit`` messages. The window ends at the turn's trigger
  (``end_id``): a queued turn's window runs from the same anchor to its own trigger, so the
  turns of a busy stretch share their prompt's start as an ordinary conversation's do.

Everything here is pure: messages go in oldest to newest, plain data comes out. Messages are
counted as Discord messages, before any simplification or merging. The functions are generic
over any message type with an integer ``id`` (the Discord snowflake; snowflake order is time
order), so they accept whatever message dataclass the rest of the pipeline uses.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from typing import Generic, Protocol, TypeVar

DEFAULT_FETCH_LIMIT = 80
MIN_FETCH_LIMIT = 20
MAX_FETCH_LIMIT = 100


class Snowflaked(Protocol):
    """Anything that carries a Discord snowflake as ``id`` (read-only is enough)."""

    @property
    def id(self) -> int: ...


M = TypeVar("M", bound=Snowflaked)


class ReanchorReason(StrEnum):
    """Why ``select_anchored_history`` chose a new anchor instead of keeping the stored one.

    The values are stable codes: turn records and dashboards store and show them.
    """

    NO_ANCHOR = "no_anchor"
    """No anchor was stored for the channel (first turn, or it expired after an idle release)."""
    ANCHOR_UNAVAILABLE = "anchor_unavailable"
    """The stored anchor message is not in the history (deleted, or outside the fetched range)."""
    LIMIT_CHANGED = "limit_changed"
    """The stored anchor was chosen under a different fetch limit."""
    FORCED = "forced"
    """The caller forced a new anchor (gateway reconnect, a deleted window boundary)."""
    RESET = "reset"
    """A reset marker newer than the stored anchor cut the history; the window restarts after it."""
    ANCHOR_AFTER_END = "anchor_after_end"
    """The stored anchor is newer than the window's end (a turn answering a message from before
    it): the window is chosen as for a new anchor, and the stored anchor is kept unchanged."""


@dataclass(frozen=True)
class AnchoredSelection(Generic[M]):
    """The result of ``select_anchored_history``.

    Attributes:
        messages: The window, oldest to newest: a contiguous run of the input history that ends
            with its newest message at or before the end bound. Empty only when no such message
            is newer than the reset marker (or the history is empty).
        anchor_id: The anchor to store for the channel's next turn: the id of the window's first
            message, except when the window was extended back for a required message (then the
            window starts earlier and this is still the normal anchor) and under
            ``anchor_after_end`` (then it is the stored anchor, unchanged). ``None`` means there
            is nothing to anchor to (empty history after the reset marker); store no anchor.
        reanchor_reason: Why a new anchor was chosen, or ``None`` when the stored anchor was kept
            (possibly advanced by whole strides).
        advanced_by: How many messages the anchor moved forward by the stride rule in this call:
            a multiple of the stride, 0 when it did not move.
    """

    messages: tuple[M, ...]
    anchor_id: int | None
    reanchor_reason: ReanchorReason | None
    advanced_by: int = 0


def normalize_fetch_limit(value: object) -> int:
    """Turn a configured ``message_fetch_limit`` into the limit a turn uses (DESIGN §5).

    Args:
        value: The configured value, as stored or imported. ``None`` means not configured.

    Returns:
        ``DEFAULT_FETCH_LIMIT`` (80) when ``value`` is missing or not a number; otherwise the value
        truncated toward zero and clamped to ``MIN_FETCH_LIMIT..MAX_FETCH_LIMIT`` (20..100).
        Only ``int`` and ``float`` count as numbers: a ``bool`` is not a number here, nor is a
        numeric string (``"80"``), and neither is a NaN or an infinite float, which cannot be
        truncated to an integer.

    Never raises.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_FETCH_LIMIT
    if isinstance(value, float) and not math.isfinite(value):
        return DEFAULT_FETCH_LIMIT
    return min(MAX_FETCH_LIMIT, max(MIN_FETCH_LIMIT, math.trunc(value)))


def validate_fetch_limit(limit: object) -> int:
    """Check that ``limit`` is a normalized fetch limit and return it.

    Returns:
        ``limit`` unchanged when it is an ``int`` (not a ``bool``) in 20..100.

    Raises:
        ValueError: for anything else. Callers are expected to pass the result of
            ``normalize_fetch_limit``; an unnormalized limit here is a programming error.
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not MIN_FETCH_LIMIT <= limit <= MAX_FETCH_LIMIT
    ):
        raise ValueError(
            f"limit must be a normalized fetch limit, an int in "
            f"{MIN_FETCH_LIMIT}..{MAX_FETCH_LIMIT}; got {limit!r}"
        )
    return limit


def history_window_stride(limit: int) -> int:
    """How many messages a window's start moves at a time: ``floor(0.3 × limit)``, made even.

    Computed in integers (``3 * limit // 10``, minus one if odd) so no float rounding can creep
    in: 20→6, 50→14, 80→24, 100→30. Budget truncation removes history in batches of this size
    too (DESIGN §5, "Budget").

    Args:
        limit: A normalized fetch limit (see ``normalize_fetch_limit``).

    Returns:
        The stride, an even number between 6 and 30.

    Raises:
        ValueError: when ``limit`` is not a normalized fetch limit.
    """
    validate_fetch_limit(limit)
    stride = 3 * limit // 10
    return stride - stride % 2


def select_anchored_history(
    messages: Sequence[M],
    *,
    limit: int,
    anchor_id: int | None,
    anchor_limit: int | None = None,
    reset_marker_id: int | None = None,
    required_ids: AbstractSet[int] = frozenset(),
    force_reanchor: bool = False,
    end_id: int | None = None,
) -> AnchoredSelection[M]:
    """Choose the turn's history window: from the channel's anchor to the turn's trigger.

    Callers pass the history after queued-trigger add-back and proxy filtering (seed 000), and
    store the returned ``anchor_id`` (with ``limit``) for the channel's next turn.

    Steps:
        1. Only messages newer than ``reset_marker_id`` (all, when it is None) and not newer
           than ``end_id`` (all, when it is None) are available. Everything below counts the
           window up to the end: a queued turn's window is measured to its own trigger, and
           the messages after it, waiting for their own turns, are not in it (DESIGN §5).
        2. Choose where the window starts, first rule that applies:
           a. a stored anchor at or before the reset marker → start at the first available
              message (reason ``reset``);
           b. no stored anchor → reason ``no_anchor``;
           c. ``force_reanchor`` → reason ``forced``;
           d. ``anchor_limit`` given and different from ``limit`` → reason ``limit_changed``;
           e. the anchor is newer than ``end_id`` → reason ``anchor_after_end``: the returned
              anchor is the stored one, so a turn answering an older message does not move
              the start of the channel's later prompts;
           f. the anchor is not among the available messages → reason ``anchor_unavailable``;
           g. otherwise keep the stored anchor (reason None).
           Under b–f the new start is chosen so the window holds the newest ``limit - stride``
           available messages (all of them if there are fewer).
        3. While the window from that start would hold more than ``limit`` messages, the start
           advances by one stride. With enough history the window therefore holds between
           ``limit - stride`` and ``limit`` messages, and its first message changes only when
           the anchor moves. The start of step 3 is the anchor returned (under
           ``anchor_after_end``, the stored anchor is).
        4. Required messages (queued triggers that must stay in) older than that start extend
           the window back to the oldest of them, so the window stays a contiguous run of the
           history. The extension never reaches a message at or before the reset marker, and it
           does not change the returned anchor: the next turn, with the trigger answered,
           returns to the normal window. An extended window may hold more than ``limit``
           messages; budget truncation deals with the tokens.

    The lower bound of step 3 holds for anchors this function returned, over a history that
    only grows and ends that never move back: queued turns run in arrival order, so each queued
    turn's window starts at the anchor the previous one stored and reaches to its own trigger,
    until a stride moves it. Messages deleted from inside the window shrink it while the anchor
    is kept (a kept anchor keeps the prompt cache warm); a deleted anchor is
    ``anchor_unavailable``, and a caller that sees the window's boundary deleted may pass
    ``force_reanchor``.

    Args:
        messages: The available history, oldest to newest, ids strictly increasing.
        limit: The normalized fetch limit for this turn (20..100).
        anchor_id: The stored anchor's message id; None when the channel has none.
        anchor_limit: The limit the stored anchor was chosen under; None when not recorded,
            in which case the anchor is not judged by it.
        reset_marker_id: The newest reset (or compact-refresh) boundary: the window holds only
            messages with a larger id. It need not be in ``messages``. None: no reset.
        required_ids: Ids that must be in the window if they are in ``messages``, newer than
            the reset marker and not newer than ``end_id``. Ids not in ``messages`` are
            ignored: the caller adds queued triggers back into the history before calling.
        force_reanchor: Choose a new anchor even if the stored one is usable.
        end_id: The newest message the window may hold: the turn's trigger. It need not be in
            ``messages``; the window then ends at the newest message before it. None: the
            newest message of ``messages``.

    Returns:
        An ``AnchoredSelection``; see its attributes.

    Raises:
        ValueError: when ``limit`` is not a normalized fetch limit, or ids in ``messages`` are
            not strictly increasing.
    """
    validate_fetch_limit(limit)
    stride = history_window_stride(limit)
    ids = [message.id for message in messages]
    for older, newer in pairwise(ids):
        if newer <= older:
            raise ValueError(
                f"messages must be oldest to newest with unique ids; {newer} follows {older}"
            )
    # Step 1: the messages up to the end, and the index of the first newer than the marker.
    total = len(ids) if end_id is None else bisect_right(ids, end_id)
    first_available = (
        0 if reset_marker_id is None else min(total, bisect_right(ids, reset_marker_id))
    )

    # Step 2.
    reason: ReanchorReason | None
    if anchor_id is not None and reset_marker_id is not None and anchor_id <= reset_marker_id:
        reason = ReanchorReason.RESET
        start = first_available
    else:
        if anchor_id is None:
            reason = ReanchorReason.NO_ANCHOR
        elif force_reanchor:
            reason = ReanchorReason.FORCED
        elif anchor_limit is not None and anchor_limit != limit:
            reason = ReanchorReason.LIMIT_CHANGED
        elif end_id is not None and anchor_id > end_id:
            reason = ReanchorReason.ANCHOR_AFTER_END
        else:
            reason = ReanchorReason.ANCHOR_UNAVAILABLE
            position = bisect_left(ids, anchor_id, first_available, total)
            if position < total and ids[position] == anchor_id:
                reason = None
                start = position
        if reason is not None:
            start = max(first_available, total - (limit - stride))

    # Step 3.
    advanced_by = 0
    while total - start > limit:
        start += stride
        advanced_by += stride
    new_anchor_id = ids[start] if start < total else None
    if reason is ReanchorReason.ANCHOR_AFTER_END:
        new_anchor_id = anchor_id

    # Step 4.
    window_start = start
    for required_id in required_ids:
        position = bisect_left(ids, required_id, lo=first_available, hi=window_start)
        if position < window_start and ids[position] == required_id:
            window_start = position

    return AnchoredSelection(
        messages=tuple(messages[window_start:total]),
        anchor_id=new_anchor_id,
        reanchor_reason=reason,
        advanced_by=advanced_by,
    )
