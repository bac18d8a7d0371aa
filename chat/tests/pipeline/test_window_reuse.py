"""Reusing a busy channel's history window versus reading Discord again (seed 000, freshness)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.window_reuse import (
    ChangeSignals,
    ConfirmedDelivery,
    GatewayCacheView,
    PreviousWindow,
    RestRead,
    RestReason,
    WindowReuse,
    decide_window_reuse,
)


@dataclass(frozen=True)
class Msg:
    id: int
    text: str = ""


def msgs(first: int, last: int, text: str = "") -> tuple[Msg, ...]:
    return tuple(Msg(i, text) for i in range(first, last + 1))


def ids(messages: tuple[Msg, ...]) -> list[int]:
    return [m.id for m in messages]


def busy_channel(**overrides: Any) -> dict[str, Any]:
    """A reusable situation: a full window 1..80 read at limit 80, the cache holding 50..85."""
    inputs: dict[str, Any] = dict(
        previous=PreviousWindow(messages=msgs(1, 80, "read"), limit=80),
        cache=GatewayCacheView(messages=msgs(50, 85, "cached")),
        signals=ChangeSignals(),
        confirmed_deliveries=(),
        limit=80,
        shard_connected=True,
        shard_reconnected_since=False,
        is_dm=False,
        dm_reactions_subscribed=False,
    )
    inputs.update(overrides)
    return inputs


def reused_ids(**overrides: Any) -> list[int]:
    decision = decide_window_reuse(**busy_channel(**overrides))
    assert isinstance(decision, WindowReuse), decision
    return ids(decision.messages)


def test_busy_channel_reuses_window_extended_by_cache_and_trimmed_to_limit() -> None:
    decision = decide_window_reuse(**busy_channel())

    assert isinstance(decision, WindowReuse)
    assert ids(decision.messages) == list(range(6, 86))


# --- each reason to read again -----------------------------------------------------------------


def _signals(**changes: Any) -> ChangeSignals:
    return ChangeSignals(**changes)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (dict(previous=None), RestReason.NO_PREVIOUS_WINDOW),
        (dict(previous=PreviousWindow(messages=(), limit=80)), RestReason.NO_PREVIOUS_WINDOW),
        (dict(shard_connected=False), RestReason.SHARD_DISCONNECTED),
        (dict(shard_reconnected_since=True), RestReason.SHARD_RECONNECTED),
        (dict(is_dm=True), RestReason.DM_WITHOUT_REACTION_EVENTS),
        (dict(signals=_signals(overflowed=True)), RestReason.SIGNAL_OVERFLOW),
        (dict(signals=_signals(changed_during_read=True)), RestReason.CHANGED_DURING_READ),
        (dict(limit=81), RestReason.LIMIT_INCREASED),
        (dict(limit=100), RestReason.LIMIT_INCREASED),
        (
            dict(cache=GatewayCacheView(messages=msgs(50, 85), cleared=True)),
            RestReason.CACHE_CLEARED,
        ),
        # The cache's oldest entry is newer than the window's newest message (80).
        (dict(cache=GatewayCacheView(messages=msgs(81, 85))), RestReason.CACHE_GAP),
        (dict(cache=GatewayCacheView(messages=msgs(83, 85))), RestReason.CACHE_GAP),
        (dict(cache=GatewayCacheView(messages=())), RestReason.CACHE_GAP),
        # The cache is only known complete from after the window's newest message.
        (
            dict(cache=GatewayCacheView(messages=msgs(50, 85), complete_since_id=81)),
            RestReason.CACHE_GAP,
        ),
        # Message 10 was edited; the cache (50..85) has no fresh copy of it.
        (dict(signals=_signals(changed_ids={10})), RestReason.UNCACHED_CHANGE),
        # A delivered reply was edited before its echo reached the cache.
        (
            dict(
                confirmed_deliveries=(ConfirmedDelivery(86, Msg(86, "sent")),),
                signals=_signals(changed_ids={86}),
            ),
            RestReason.UNCACHED_CHANGE,
        ),
        # The full window lost message 20 and nothing newer arrived: 79 < 80.
        (
            dict(
                cache=GatewayCacheView(messages=msgs(50, 80)),
                signals=_signals(deleted_ids={20}),
            ),
            RestReason.DELETION_NEEDS_OLDER_HISTORY,
        ),
        (
            dict(
                cache=GatewayCacheView(messages=msgs(50, 82)),
                signals=_signals(bulk_deleted_ids={20, 21, 60}),
            ),
            RestReason.DELETION_NEEDS_OLDER_HISTORY,
        ),
        (
            dict(confirmed_deliveries=(ConfirmedDelivery(86, Msg(86)), ConfirmedDelivery(87))),
            RestReason.DELIVERY_WITHOUT_MESSAGE,
        ),
        (
            dict(
                previous=PreviousWindow(
                    messages=msgs(1, 80), limit=80, drop_reason=RestReason.SHARD_RECONNECTED
                )
            ),
            RestReason.SHARD_RECONNECTED,
        ),
    ],
)
def test_untrustworthy_window_sends_turn_to_rest_with_its_reason(
    overrides: dict[str, Any], reason: RestReason
) -> None:
    assert decide_window_reuse(**busy_channel(**overrides)) == RestRead(reason)


def test_every_rest_reason_has_a_stable_code() -> None:
    assert {reason.name.lower(): reason.value for reason in RestReason} == {
        "no_previous_window": "no_previous_window",
        "shard_disconnected": "shard_disconnected",
        "shard_reconnected": "shard_reconnected",
        "dm_without_reaction_events": "dm_without_reaction_events",
        "signal_overflow": "signal_overflow",
        "changed_during_read": "changed_during_read",
        "limit_increased": "limit_increased",
        "cache_cleared": "cache_cleared",
        "cache_gap": "cache_gap",
        "uncached_change": "uncached_change",
        "deletion_needs_older_history": "deletion_needs_older_history",
        "delivery_without_message": "delivery_without_message",
        "older_than_window": "older_than_window",
    }


# --- check order ---------------------------------------------------------------------------------

Inputs = dict[str, Any]


def _with_signals(inputs: Inputs, **changes: Any) -> Inputs:
    signals: ChangeSignals = inputs["signals"]
    merged = {
        key: (getattr(signals, key) | value) if isinstance(value, set) else value
        for key, value in changes.items()
    }
    return {**inputs, "signals": replace(signals, **merged)}


def _with_cache(inputs: Inputs, **changes: Any) -> Inputs:
    return {**inputs, "cache": replace(inputs["cache"], **changes)}


def _drop_window(inputs: Inputs) -> Inputs:
    previous = inputs["previous"]
    if previous is None:
        return inputs
    return {**inputs, "previous": replace(previous, drop_reason=RestReason.SHARD_RECONNECTED)}


# The documented check order; each condition can be combined with every later one.
CONDITIONS_IN_ORDER: list[tuple[RestReason, Callable[[Inputs], Inputs]]] = [
    (RestReason.SHARD_DISCONNECTED, lambda i: {**i, "shard_connected": False}),
    (RestReason.SHARD_RECONNECTED, lambda i: {**i, "shard_reconnected_since": True}),
    (RestReason.DM_WITHOUT_REACTION_EVENTS, lambda i: {**i, "is_dm": True}),
    (RestReason.NO_PREVIOUS_WINDOW, lambda i: {**i, "previous": None}),
    (RestReason.SHARD_RECONNECTED, _drop_window),
    (RestReason.SIGNAL_OVERFLOW, lambda i: _with_signals(i, overflowed=True)),
    (RestReason.CHANGED_DURING_READ, lambda i: _with_signals(i, changed_during_read=True)),
    (
        RestReason.DELIVERY_WITHOUT_MESSAGE,
        lambda i: {**i, "confirmed_deliveries": (ConfirmedDelivery(99),)},
    ),
    (RestReason.LIMIT_INCREASED, lambda i: {**i, "limit": 90}),
    (RestReason.CACHE_CLEARED, lambda i: _with_cache(i, cleared=True)),
    (RestReason.CACHE_GAP, lambda i: _with_cache(i, complete_since_id=81)),
    (RestReason.UNCACHED_CHANGE, lambda i: _with_signals(i, changed_ids={10})),
    (
        RestReason.DELETION_NEEDS_OLDER_HISTORY,
        lambda i: _with_signals(_with_cache(i, messages=msgs(50, 80)), deleted_ids={20}),
    ),
]


@pytest.mark.parametrize("position", range(len(CONDITIONS_IN_ORDER)))
def test_each_check_takes_precedence_over_every_later_check(position: int) -> None:
    inputs = busy_channel()
    # Apply from the last condition back, so earlier ones are applied on top of later ones.
    for _, apply in reversed(CONDITIONS_IN_ORDER[position:]):
        inputs = apply(inputs)

    expected_reason = CONDITIONS_IN_ORDER[position][0]
    assert decide_window_reuse(**inputs) == RestRead(expected_reason)


@pytest.mark.parametrize(("reason", "apply"), CONDITIONS_IN_ORDER)
def test_each_condition_alone_forces_rest(
    reason: RestReason, apply: Callable[[Inputs], Inputs]
) -> None:
    assert decide_window_reuse(**apply(busy_channel())) == RestRead(reason)


# --- the merge -----------------------------------------------------------------------------------


def test_cached_instance_wins_over_window_copy() -> None:
    decision = decide_window_reuse(**busy_channel(signals=ChangeSignals(changed_ids={60})))

    assert isinstance(decision, WindowReuse)
    by_id = {m.id: m for m in decision.messages}
    assert by_id[60] == Msg(60, "cached")
    assert by_id[49] == Msg(49, "read")


@pytest.mark.parametrize(
    ("cache", "deliveries", "expected_text"),
    [
        # Delivered before its gateway echo: the delivery's copy is used.
        (msgs(50, 85), (Msg(86, "sent"),), "sent"),
        # The echo arrived: the cached instance wins.
        ((*msgs(50, 85), Msg(86, "echo")), (Msg(86, "sent"),), "echo"),
    ],
)
def test_confirmed_delivery_is_kept_until_its_echo_is_cached(
    cache: tuple[Msg, ...], deliveries: tuple[Msg, ...], expected_text: str
) -> None:
    decision = decide_window_reuse(
        **busy_channel(
            cache=GatewayCacheView(messages=cache),
            confirmed_deliveries=tuple(ConfirmedDelivery(m.id, m) for m in deliveries),
        )
    )

    assert isinstance(decision, WindowReuse)
    assert decision.messages[-1] == Msg(86, expected_text)
    assert ids(decision.messages) == list(range(7, 87))


def test_window_copy_wins_over_a_delivery_it_already_read() -> None:
    decision = decide_window_reuse(
        **busy_channel(confirmed_deliveries=(ConfirmedDelivery(40, Msg(40, "sent")),))
    )

    assert isinstance(decision, WindowReuse)
    assert {m.id: m for m in decision.messages}[40] == Msg(40, "read")


@pytest.mark.parametrize(
    ("signals", "absent"),
    [
        (ChangeSignals(deleted_ids={30}), {30}),
        (ChangeSignals(deleted_ids={84}), {84}),
        (ChangeSignals(bulk_deleted_ids={30, 31, 84}), {30, 31, 84}),
        (ChangeSignals(deleted_ids={30}, bulk_deleted_ids={60}), {30, 60}),
        # A deleted message that was also edited needs no fresh copy.
        (ChangeSignals(deleted_ids={10}, changed_ids={10}), {10}),
    ],
)
def test_deleted_messages_are_removed_and_older_ones_fill_the_limit(
    signals: ChangeSignals, absent: set[int]
) -> None:
    kept = reused_ids(signals=signals)

    assert not absent & set(kept)
    assert len(kept) == 80
    assert kept == [i for i in range(1, 86) if i not in absent][-80:]


def test_deletion_in_a_window_that_held_the_whole_channel_is_reused() -> None:
    kept = reused_ids(
        previous=PreviousWindow(messages=msgs(1, 30), limit=80),
        cache=GatewayCacheView(messages=msgs(1, 32)),
        signals=ChangeSignals(deleted_ids={5}),
    )

    assert kept == [i for i in range(1, 33) if i != 5]


def test_merge_sorts_by_snowflake() -> None:
    cache = (*msgs(50, 80), Msg(82), Msg(85))
    deliveries = (ConfirmedDelivery(84, Msg(84)), ConfirmedDelivery(81, Msg(81)))

    kept = reused_ids(cache=GatewayCacheView(messages=cache), confirmed_deliveries=deliveries)

    assert kept == [*range(5, 83), 84, 85]


@pytest.mark.parametrize(("limit", "first"), [(80, 6), (60, 26), (20, 66)])
def test_smaller_limit_trims_to_the_newest_messages(limit: int, first: int) -> None:
    assert reused_ids(limit=limit) == list(range(first, 86))


def test_cache_and_deliveries_older_than_window_are_not_added() -> None:
    kept = reused_ids(
        previous=PreviousWindow(messages=msgs(11, 40), limit=80),
        cache=GatewayCacheView(messages=msgs(1, 45)),
        confirmed_deliveries=(ConfirmedDelivery(5, Msg(5)),),
    )

    assert kept == list(range(11, 46))


@pytest.mark.parametrize(
    "cache",
    [
        GatewayCacheView(messages=msgs(80, 85)),
        GatewayCacheView(messages=msgs(50, 85), complete_since_id=80),
        GatewayCacheView(messages=msgs(50, 85), complete_since_id=3),
    ],
)
def test_cache_continuing_from_window_newest_message_is_reused(cache: GatewayCacheView) -> None:
    assert reused_ids(cache=cache) == list(range(6, 86))


@pytest.mark.parametrize("changed", [{3}, {60}, {200}])
def test_change_outside_result_or_cached_does_not_force_rest(changed: set[int]) -> None:
    # 3 is trimmed away, 60 is cached, 200 is not in this channel's window at all.
    assert reused_ids(signals=ChangeSignals(changed_ids=changed)) == list(range(6, 86))


def test_dm_with_reaction_events_is_reused() -> None:
    assert reused_ids(is_dm=True, dm_reactions_subscribed=True) == list(range(6, 86))


# --- input checks ---------------------------------------------------------------------------------


def test_out_of_order_window_or_cache_is_rejected() -> None:
    with pytest.raises(ValueError, match="oldest to newest"):
        PreviousWindow(messages=(Msg(2), Msg(1)), limit=80)
    with pytest.raises(ValueError, match="oldest to newest"):
        GatewayCacheView(messages=(Msg(1), Msg(1)))


def test_delivery_whose_message_has_another_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="expected 7"):
        ConfirmedDelivery(7, Msg(8))


@pytest.mark.parametrize("limit", [19, 101, True])
def test_unnormalized_limit_is_rejected(limit: object) -> None:
    with pytest.raises(ValueError, match="normalized fetch limit"):
        decide_window_reuse(**busy_channel(limit=limit))
    with pytest.raises(ValueError, match="normalized fetch limit"):
        PreviousWindow(messages=msgs(1, 3), limit=limit)  # type: ignore[arg-type]


def test_lists_and_iterables_are_stored_as_tuples_and_frozensets() -> None:
    window = PreviousWindow(messages=[Msg(1), Msg(2)], limit=80)  # type: ignore[arg-type]
    signals = ChangeSignals(deleted_ids={1}, changed_ids=[2])  # type: ignore[arg-type]

    assert window.messages == (Msg(1), Msg(2))
    assert signals.deleted_ids == frozenset({1})
    assert signals.changed_ids == frozenset({2})
    assert hash(window) == hash(PreviousWindow(messages=(Msg(1), Msg(2)), limit=80))
    assert not window.dropped
    assert replace(window, drop_reason=RestReason.SIGNAL_OVERFLOW).dropped


# --- properties -----------------------------------------------------------------------------------


@st.composite
def reuse_inputs(draw: st.DrawFn) -> Inputs:
    window_ids = sorted(draw(st.sets(st.integers(1, 300), min_size=1, max_size=100)))
    cache_ids = sorted(draw(st.sets(st.integers(1, 400), max_size=150)))
    limit = draw(st.integers(20, 100))
    previous_limit = draw(st.integers(max(20, len(window_ids)), 100))
    delivered = draw(st.sets(st.integers(1, 400), max_size=5))
    return busy_channel(
        previous=PreviousWindow(
            messages=tuple(Msg(i, "read") for i in window_ids), limit=previous_limit
        ),
        cache=GatewayCacheView(messages=tuple(Msg(i, "cached") for i in cache_ids)),
        confirmed_deliveries=tuple(ConfirmedDelivery(i, Msg(i, "sent")) for i in delivered),
        signals=ChangeSignals(
            changed_ids=draw(st.sets(st.integers(1, 400), max_size=5)),
            deleted_ids=draw(st.sets(st.integers(1, 400), max_size=10)),
            bulk_deleted_ids=draw(st.sets(st.integers(1, 400), max_size=10)),
        ),
        limit=limit,
    )


@given(inputs=reuse_inputs())
def test_reused_window_is_sorted_unique_within_limit_and_free_of_deletions(inputs: Inputs) -> None:
    decision = decide_window_reuse(**inputs)
    assert decision == decide_window_reuse(**inputs)
    if isinstance(decision, RestRead):
        return
    signals: ChangeSignals = inputs["signals"]
    cache_by_id = {m.id: m for m in inputs["cache"].messages}
    kept = ids(decision.messages)

    assert kept == sorted(set(kept))
    assert len(kept) <= inputs["limit"]
    assert not set(kept) & (signals.deleted_ids | signals.bulk_deleted_ids)
    assert all(i >= inputs["previous"].messages[0].id for i in kept)
    for message in decision.messages:
        if message.id in cache_by_id:
            assert message is cache_by_id[message.id]
        elif message.id in signals.changed_ids:
            pytest.fail(f"message {message.id} changed but its copy is not the cached one")
