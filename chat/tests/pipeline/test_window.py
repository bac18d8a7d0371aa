"""Fetch limit, stride and anchored selection of the history window (DESIGN §5)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.window import (
    AnchoredSelection,
    ReanchorReason,
    history_window_stride,
    normalize_fetch_limit,
    select_anchored_history,
    validate_fetch_limit,
)


@dataclass(frozen=True)
class Msg:
    id: int


def history(count: int) -> tuple[Msg, ...]:
    """``count`` messages with ids 10, 20, …: message number ``n`` (1-based) has id ``10 * n``.

    Ids step by ten so that ids absent from the history (such as 455) are easy to write.
    """
    return tuple(Msg(10 * n) for n in range(1, count + 1))


def ids(messages: tuple[Msg, ...]) -> list[int]:
    return [message.id for message in messages]


def id_range(first: int, last: int) -> list[int]:
    """Ids of message numbers ``first..last`` in ``history``."""
    return [10 * n for n in range(first, last + 1)]


# --- fetch limit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        (None, 80),
        (5, 20),
        (80.7, 80),
        (500, 100),
        ("abc", 80),
        (float("nan"), 80),
        (20, 20),
        (100, 100),
        (64, 64),
        (19.99, 20),
        (99.999, 99),
        (100.9, 100),
        (-3, 20),
        (0, 20),
        (True, 80),
        (False, 80),
        ("80", 80),
        ("50", 80),
        (float("inf"), 80),
        (float("-inf"), 80),
        ([50], 80),
        (object(), 80),
    ],
)
def test_fetch_limit_is_normalized_to_an_int_between_20_and_100(
    configured: object, expected: int
) -> None:
    assert normalize_fetch_limit(configured) == expected
    assert type(normalize_fetch_limit(configured)) is int


@pytest.mark.parametrize("limit", [19, 101, 0, -80, True, 80.0, "80", None])
def test_unnormalized_limit_is_rejected(limit: object) -> None:
    with pytest.raises(ValueError, match="normalized fetch limit"):
        validate_fetch_limit(limit)
    with pytest.raises(ValueError, match="normalized fetch limit"):
        history_window_stride(limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="normalized fetch limit"):
        select_anchored_history(history(5), limit=limit, anchor_id=None)  # type: ignore[arg-type]


# --- stride ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "stride"),
    [(80, 24), (20, 6), (100, 30), (50, 14), (21, 6), (23, 6), (27, 8), (70, 20), (90, 26)],
)
def test_stride_is_thirty_percent_rounded_down_to_even(limit: int, stride: int) -> None:
    assert history_window_stride(limit) == stride


@pytest.mark.parametrize("limit", range(20, 101))
def test_stride_is_the_largest_even_number_within_thirty_percent(limit: int) -> None:
    stride = history_window_stride(limit)
    assert stride % 2 == 0
    assert 10 * stride <= 3 * limit < 10 * (stride + 2)


# --- anchored selection: choosing a new anchor ---------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected_reason", "expected_ids"),
    [
        # 100 messages at limit 80 (stride 24): a new anchor keeps the newest 56, numbers 45..100.
        (dict(anchor_id=None), ReanchorReason.NO_ANCHOR, id_range(45, 100)),
        (dict(anchor_id=455), ReanchorReason.ANCHOR_UNAVAILABLE, id_range(45, 100)),
        (dict(anchor_id=300, anchor_limit=100), ReanchorReason.LIMIT_CHANGED, id_range(45, 100)),
        (dict(anchor_id=300, force_reanchor=True), ReanchorReason.FORCED, id_range(45, 100)),
        (dict(anchor_id=300, reset_marker_id=600), ReanchorReason.RESET, id_range(61, 100)),
        (dict(anchor_id=300, anchor_limit=80), None, id_range(30, 100)),
        (dict(anchor_id=300), None, id_range(30, 100)),
    ],
)
def test_new_anchor_is_chosen_only_for_its_reason(
    case: dict, expected_reason: ReanchorReason | None, expected_ids: list[int]
) -> None:
    selection = select_anchored_history(history(100), limit=80, **case)

    assert selection.reanchor_reason == expected_reason
    assert ids(selection.messages) == expected_ids
    assert selection.anchor_id == expected_ids[0]
    assert selection.advanced_by == 0


@pytest.mark.parametrize(
    ("case", "expected_reason"),
    [
        (dict(anchor_id=None, force_reanchor=True), ReanchorReason.NO_ANCHOR),
        (dict(anchor_id=300, force_reanchor=True, anchor_limit=50), ReanchorReason.FORCED),
        (dict(anchor_id=455, anchor_limit=50), ReanchorReason.LIMIT_CHANGED),
        (dict(anchor_id=300, reset_marker_id=600, force_reanchor=True), ReanchorReason.RESET),
        (dict(anchor_id=300, reset_marker_id=600, anchor_limit=50), ReanchorReason.RESET),
    ],
)
def test_reanchor_reason_follows_documented_precedence(
    case: dict, expected_reason: ReanchorReason
) -> None:
    assert select_anchored_history(history(100), limit=80, **case).reanchor_reason == (
        expected_reason
    )


@pytest.mark.parametrize(
    ("limit", "count", "expected_first_number"),
    [(80, 100, 45), (20, 100, 87), (100, 200, 131), (50, 60, 25), (80, 56, 1), (80, 30, 1)],
)
def test_new_anchor_keeps_newest_limit_minus_stride_or_all_history(
    limit: int, count: int, expected_first_number: int
) -> None:
    selection = select_anchored_history(history(count), limit=limit, anchor_id=None)

    assert ids(selection.messages) == id_range(expected_first_number, count)
    assert len(selection.messages) == min(count, limit - history_window_stride(limit))


def test_reason_codes_are_stable_strings() -> None:
    assert [reason.value for reason in ReanchorReason] == [
        "no_anchor",
        "anchor_unavailable",
        "limit_changed",
        "forced",
        "reset",
        "anchor_after_end",
    ]
    assert ReanchorReason.FORCED == "forced"


def test_empty_history_has_no_window_and_no_anchor() -> None:
    selection = select_anchored_history((), limit=80, anchor_id=300)

    assert selection == AnchoredSelection(
        messages=(), anchor_id=None, reanchor_reason=ReanchorReason.ANCHOR_UNAVAILABLE
    )


# --- anchored selection: keeping and advancing ---------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "count", "anchor_number", "expected_first_number", "expected_advance"),
    [
        # 81 messages from the anchor at limit 80: one stride (24) forward leaves 57.
        (80, 100, 20, 44, 24),
        # 100 from the anchor: one stride leaves 76.
        (80, 100, 1, 25, 24),
        # 130 from the anchor: 106, 82, then 58 after three strides.
        (80, 130, 1, 73, 72),
        # Exactly the limit: the anchor stays.
        (80, 100, 21, 21, 0),
        # Limit 20, stride 6: 21 messages become 15.
        (20, 30, 10, 16, 6),
        # Limit 100, stride 30: 101 messages become 71.
        (100, 150, 50, 80, 30),
    ],
)
def test_anchor_advances_by_whole_strides_only_while_window_exceeds_limit(
    limit: int,
    count: int,
    anchor_number: int,
    expected_first_number: int,
    expected_advance: int,
) -> None:
    selection = select_anchored_history(
        history(count), limit=limit, anchor_id=10 * anchor_number, anchor_limit=limit
    )

    assert ids(selection.messages) == id_range(expected_first_number, count)
    assert selection.anchor_id == 10 * expected_first_number
    assert selection.advanced_by == expected_advance
    assert selection.reanchor_reason is None


def test_anchor_advances_by_one_stride_when_window_exceeds_limit() -> None:
    kept = select_anchored_history(history(80), limit=80, anchor_id=10)
    advanced = select_anchored_history(history(81), limit=80, anchor_id=kept.anchor_id)

    assert (len(kept.messages), kept.anchor_id) == (80, 10)
    assert (len(advanced.messages), advanced.anchor_id) == (57, 250)
    assert advanced.advanced_by == 24


def test_kept_anchor_survives_deletions_inside_window() -> None:
    remaining = tuple(m for m in history(100) if m.id not in {400, 500, 600})

    selection = select_anchored_history(remaining, limit=80, anchor_id=300)

    assert selection.anchor_id == 300
    assert selection.messages[0].id == 300
    assert len(selection.messages) == 68
    assert selection.reanchor_reason is None


# --- anchored selection: reset marker ------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "case", "expected_ids", "expected_anchor", "expected_reason"),
    [
        # A marker newer than the anchor wins: the window starts right after it.
        (100, dict(anchor_id=300, reset_marker_id=600), id_range(61, 100), 610, "reset"),
        # The marker need not be a message in the history.
        (100, dict(anchor_id=300, reset_marker_id=605), id_range(61, 100), 610, "reset"),
        # A marker at the anchor itself excludes the anchor.
        (100, dict(anchor_id=300, reset_marker_id=300), id_range(31, 100), 310, "reset"),
        # A marker older than the anchor changes nothing.
        (100, dict(anchor_id=300, reset_marker_id=200), id_range(30, 100), 300, None),
        # Nothing after the marker: empty window, nothing to anchor.
        (100, dict(anchor_id=300, reset_marker_id=1000), [], None, "reset"),
        # Without a stored anchor the marker bounds the newest limit - stride messages.
        (100, dict(anchor_id=None, reset_marker_id=900), id_range(91, 100), 910, "no_anchor"),
        (100, dict(anchor_id=None, reset_marker_id=100), id_range(45, 100), 450, "no_anchor"),
        (100, dict(anchor_id=None, reset_marker_id=1000), [], None, "no_anchor"),
        # A forced new anchor newer than the marker still never reaches behind it.
        (
            100,
            dict(anchor_id=950, reset_marker_id=900, force_reanchor=True),
            id_range(91, 100),
            910,
            "forced",
        ),
        # 150 messages after the marker: the start advances 150 → 126 → 102 → 78.
        (200, dict(anchor_id=100, reset_marker_id=500), id_range(123, 200), 1230, "reset"),
    ],
)
def test_reset_marker_newer_than_anchor_wins(
    count: int,
    case: dict,
    expected_ids: list[int],
    expected_anchor: int | None,
    expected_reason: str | None,
) -> None:
    selection = select_anchored_history(history(count), limit=80, **case)

    assert ids(selection.messages) == expected_ids
    assert selection.anchor_id == expected_anchor
    assert selection.reanchor_reason == expected_reason


# --- anchored selection: required queued triggers ------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected_first", "expected_anchor"),
    [
        # A required message older than the anchor pulls the window's start back to it.
        (dict(anchor_id=300, required_ids=frozenset({150})), 150, 300),
        # Several: back to the oldest of them.
        (dict(anchor_id=300, required_ids=frozenset({250, 120, 700})), 120, 300),
        # Already inside the window: nothing changes.
        (dict(anchor_id=300, required_ids=frozenset({700})), 300, 300),
        # Not in the history: ignored.
        (dict(anchor_id=300, required_ids=frozenset({155})), 300, 300),
        # At or before the reset marker: the reset wins.
        (dict(anchor_id=300, reset_marker_id=200, required_ids=frozenset({150, 200})), 300, 300),
        (dict(anchor_id=300, reset_marker_id=200, required_ids=frozenset({150, 250})), 250, 300),
        # With a new anchor too.
        (dict(anchor_id=None, required_ids=frozenset({100})), 100, 450),
        # And with an advancing one: the anchor still advances.
        (dict(anchor_id=10, required_ids=frozenset({50})), 50, 250),
    ],
)
def test_required_trigger_stays_in_window_without_moving_anchor(
    case: dict, expected_first: int, expected_anchor: int
) -> None:
    selection = select_anchored_history(history(100), limit=80, **case)

    assert selection.messages[0].id == expected_first
    assert ids(selection.messages) == list(range(expected_first, 1001, 10))
    assert selection.anchor_id == expected_anchor


def test_window_returns_to_anchor_once_required_trigger_is_answered() -> None:
    with_trigger = select_anchored_history(
        history(100), limit=80, anchor_id=300, required_ids=frozenset({150})
    )
    next_turn = select_anchored_history(
        history(101), limit=80, anchor_id=with_trigger.anchor_id, anchor_limit=80
    )

    assert len(with_trigger.messages) == 86
    assert next_turn.messages[0].id == 300
    assert len(next_turn.messages) == 72


# --- anchored selection: the window ends at the trigger -----------------------------------------


@pytest.mark.parametrize(
    ("case", "expected_first", "expected_last", "expected_anchor", "expected_advance"),
    [
        # The anchor kept, the window cut at the trigger: later messages wait for their turns.
        (dict(anchor_id=300, end_id=700), 30, 70, 300, 0),
        # Anchor to end exactly the limit: kept (the newest 20 messages do not count).
        (dict(anchor_id=210, end_id=1000), 21, 100, 210, 0),
        (dict(anchor_id=210, end_id=900), 21, 90, 210, 0),
        # 81 up to the trigger: one stride.
        (dict(anchor_id=100, end_id=900), 34, 90, 340, 24),
        # Measured to the trigger, not to the newest message: 76 fit, where 86 would not.
        (dict(anchor_id=150, end_id=900), 15, 90, 150, 0),
        (dict(anchor_id=150), 39, 100, 390, 24),
        # An end that is not a message: the window ends at the newest message before it.
        (dict(anchor_id=300, end_id=705), 30, 70, 300, 0),
        # A new anchor keeps the newest limit - stride messages up to the trigger.
        (dict(anchor_id=None, end_id=900), 35, 90, 350, 0),
        (dict(anchor_id=455, end_id=900), 35, 90, 350, 0),
        (dict(anchor_id=None, end_id=300), 1, 30, 10, 0),
        # A reset marker still wins, and the window still ends at the trigger.
        (dict(anchor_id=300, reset_marker_id=500, end_id=700), 51, 70, 510, 0),
    ],
)
def test_window_runs_from_the_anchor_to_the_end_and_advances_only_past_the_limit(
    case: dict,
    expected_first: int,
    expected_last: int,
    expected_anchor: int,
    expected_advance: int,
) -> None:
    selection = select_anchored_history(history(100), limit=80, anchor_limit=80, **case)

    assert ids(selection.messages) == id_range(expected_first, expected_last)
    assert selection.anchor_id == expected_anchor
    assert selection.advanced_by == expected_advance


@pytest.mark.parametrize(
    ("case", "expected_ids", "expected_reason"),
    [
        # A turn answering a message from before the anchor: the newest 56 up to it, and the
        # stored anchor stays where the channel's later prompts start.
        (dict(anchor_id=800, end_id=700), id_range(15, 70), ReanchorReason.ANCHOR_AFTER_END),
        (dict(anchor_id=800, end_id=300), id_range(1, 30), ReanchorReason.ANCHOR_AFTER_END),
        # The anchor at the end itself is kept: a window of one message.
        (dict(anchor_id=700, end_id=700), id_range(70, 70), None),
    ],
)
def test_anchor_after_the_end_is_not_moved(
    case: dict, expected_ids: list[int], expected_reason: ReanchorReason | None
) -> None:
    selection = select_anchored_history(history(100), limit=80, **case)

    assert ids(selection.messages) == expected_ids
    assert selection.anchor_id == case["anchor_id"]
    assert selection.reanchor_reason == expected_reason


@pytest.mark.parametrize(
    ("case", "expected_reason"),
    [
        # Rules before the end's: a reset, no anchor, a forced one, a changed limit.
        (dict(anchor_id=800, reset_marker_id=850), ReanchorReason.RESET),
        (dict(anchor_id=800, force_reanchor=True), ReanchorReason.FORCED),
        (dict(anchor_id=800, anchor_limit=50), ReanchorReason.LIMIT_CHANGED),
    ],
)
def test_anchor_after_end_yields_to_the_earlier_rules(
    case: dict, expected_reason: ReanchorReason
) -> None:
    selection = select_anchored_history(history(100), limit=80, end_id=700, **case)

    assert selection.reanchor_reason == expected_reason
    assert not selection.messages or selection.messages[-1].id == 700
    if selection.messages:
        assert selection.anchor_id == selection.messages[0].id


def test_reset_newer_than_the_end_leaves_an_empty_window() -> None:
    selection = select_anchored_history(
        history(100), limit=80, anchor_id=300, reset_marker_id=800, end_id=700
    )

    assert selection.messages == ()
    assert selection.anchor_id is None


def test_queued_turns_share_the_anchor_until_a_stride_moves_it() -> None:
    """100 messages, the last ordinary turn at number 70 (its window 15..70, 56 messages),
    then triggers 71..100 posted at once, answered one by one in arrival order."""
    messages = history(100)
    ordinary = select_anchored_history(messages[:70], limit=80, anchor_id=None)
    anchor_id = ordinary.anchor_id
    firsts, sizes = [], []
    for number in range(71, 101):
        selection = select_anchored_history(
            messages, limit=80, anchor_id=anchor_id, anchor_limit=80, end_id=10 * number
        )
        assert selection.messages[-1].id == 10 * number
        anchor_id = selection.anchor_id
        firsts.append(selection.messages[0].id)
        sizes.append(len(selection.messages))

    # 57..80 messages from 150 while they fit; at number 95, 81 would: one stride to 390.
    assert firsts == [150] * 24 + [390] * 6
    assert sizes == list(range(57, 81)) + list(range(57, 63))


# --- input checks and types ----------------------------------------------------------------------


@pytest.mark.parametrize("id_order", [[10, 30, 20], [10, 20, 20], [30, 20, 10]])
def test_history_out_of_snowflake_order_is_rejected(id_order: list[int]) -> None:
    with pytest.raises(ValueError, match="oldest to newest"):
        select_anchored_history([Msg(i) for i in id_order], limit=80, anchor_id=None)


@dataclass(frozen=True)
class Post:
    id: int
    content: str


def test_selection_returns_the_callers_own_message_objects_as_a_tuple() -> None:
    posts = [Post(id=n, content=f"post {n}") for n in range(1, 31)]

    selection = select_anchored_history(posts, limit=20, anchor_id=None)

    assert isinstance(selection.messages, tuple)
    assert selection.messages == tuple(posts[16:])
    assert all(a is b for a, b in zip(selection.messages, posts[16:], strict=True))


# --- properties ----------------------------------------------------------------------------------

limits = st.integers(min_value=20, max_value=100)


@st.composite
def snowflake_histories(draw: st.DrawFn, max_size: int = 250) -> tuple[Msg, ...]:
    """Strictly increasing, unevenly spaced ids (snowflakes are sparse)."""
    gaps = draw(st.lists(st.integers(min_value=1, max_value=1000), max_size=max_size))
    total = 10**17
    messages = []
    for gap in gaps:
        total += gap
        messages.append(Msg(total))
    return tuple(messages)


@st.composite
def selection_inputs(draw: st.DrawFn, *, with_required: bool) -> dict:
    messages = draw(snowflake_histories())
    present = [m.id for m in messages]
    some_id = st.sampled_from(present) if present else st.nothing()
    near_id = st.integers(
        min_value=10**17 - 10, max_value=(present[-1] if present else 10**17) + 10
    )
    inputs = dict(
        messages=messages,
        limit=draw(limits),
        anchor_id=draw(st.none() | some_id | near_id),
        anchor_limit=draw(st.none() | limits),
        reset_marker_id=draw(st.none() | some_id | near_id),
        force_reanchor=draw(st.booleans()),
    )
    if with_required:
        inputs["required_ids"] = frozenset(draw(st.lists(some_id | near_id, max_size=4)))
    return inputs


@given(
    limit=limits,
    batches=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=15),
    forced=st.lists(st.booleans(), min_size=15, max_size=15),
)
def test_window_holds_between_limit_minus_stride_and_limit_once_history_suffices(
    limit: int, batches: list[int], forced: list[bool]
) -> None:
    stride = history_window_stride(limit)
    messages: tuple[Msg, ...] = ()
    anchor_id: int | None = None
    for batch, force in zip(batches, forced, strict=False):
        messages = messages + tuple(Msg(len(messages) + n + 1) for n in range(batch))
        selection = select_anchored_history(
            messages, limit=limit, anchor_id=anchor_id, anchor_limit=limit, force_reanchor=force
        )
        anchor_id = selection.anchor_id
        if len(messages) >= limit:
            assert limit - stride <= len(selection.messages) <= limit
        else:
            assert len(selection.messages) >= min(len(messages), limit - stride)


@given(limit=limits, count=st.integers(min_value=1, max_value=320))
def test_first_message_moves_only_with_anchor_and_at_most_once_per_stride(
    limit: int, count: int
) -> None:
    stride = history_window_stride(limit)
    messages: list[Msg] = []
    anchor_id: int | None = None
    first_id: int | None = None
    anchor_changed_at: list[int] = []
    for step in range(1, count + 1):
        messages.append(Msg(1000 * step))
        selection = select_anchored_history(
            messages, limit=limit, anchor_id=anchor_id, anchor_limit=limit
        )
        new_first_id = selection.messages[0].id
        assert (new_first_id != first_id) == (selection.anchor_id != anchor_id)
        if selection.anchor_id != anchor_id:
            anchor_changed_at.append(step)
        anchor_id, first_id = selection.anchor_id, new_first_id
    assert anchor_changed_at[0] == 1
    gaps = [later - earlier for earlier, later in pairwise(anchor_changed_at)]
    assert all(gap >= stride for gap in gaps)


@given(inputs=selection_inputs(with_required=True))
def test_same_input_gives_identical_selection(inputs: dict) -> None:
    first = select_anchored_history(**inputs)
    again = select_anchored_history(**inputs)
    from_list = select_anchored_history(**{**inputs, "messages": list(inputs["messages"])})

    assert first == again == from_list


@given(inputs=selection_inputs(with_required=False))
def test_window_is_a_suffix_of_history_within_limit_and_after_reset(inputs: dict) -> None:
    messages: tuple[Msg, ...] = inputs["messages"]
    selection = select_anchored_history(**inputs)
    window = selection.messages

    assert window == messages[len(messages) - len(window) :]
    assert len(window) <= inputs["limit"]
    marker = inputs["reset_marker_id"]
    if marker is not None:
        assert all(m.id > marker for m in window)
    assert selection.anchor_id == (window[0].id if window else None)
    if selection.reanchor_reason not in (None, ReanchorReason.RESET):
        available = sum(1 for m in messages if marker is None or m.id > marker)
        stride = history_window_stride(inputs["limit"])
        assert len(window) == min(available, inputs["limit"] - stride)


@given(inputs=selection_inputs(with_required=True))
def test_required_messages_after_reset_are_always_in_a_contiguous_window(inputs: dict) -> None:
    messages: tuple[Msg, ...] = inputs["messages"]
    selection = select_anchored_history(**inputs)
    window = selection.messages
    window_ids = {m.id for m in window}
    marker = inputs["reset_marker_id"]
    present = {m.id for m in messages}

    assert window == messages[len(messages) - len(window) :]
    for required_id in inputs["required_ids"]:
        if required_id in present and (marker is None or required_id > marker):
            assert required_id in window_ids
    without_required = select_anchored_history(**{**inputs, "required_ids": frozenset()})
    assert selection.anchor_id == without_required.anchor_id
    assert selection.reanchor_reason == without_required.reanchor_reason
    assert window[len(window) - len(without_required.messages) :] == without_required.messages


@st.composite
def busy_stretches(draw: st.DrawFn) -> tuple[tuple[Msg, ...], int, int, list[int]]:
    """A channel's history, the position of its last ordinary turn and the positions of the
    queued triggers after it, oldest first (other messages may stand between them)."""
    messages = draw(snowflake_histories(max_size=300))
    count = len(messages)
    ordinary = draw(st.integers(min_value=0, max_value=max(0, count - 1)))
    later = range(ordinary + 1, count)
    triggers = sorted(draw(st.sets(st.sampled_from(later), max_size=60))) if later else []
    return messages, draw(limits), ordinary, triggers


@given(stretch=busy_stretches())
def test_consecutive_queued_turns_share_their_start_unless_the_anchor_strides(
    stretch: tuple[tuple[Msg, ...], int, int, list[int]],
) -> None:
    messages, limit, ordinary, triggers = stretch
    stride = history_window_stride(limit)
    selection = select_anchored_history(messages[: ordinary + 1], limit=limit, anchor_id=None)
    anchor_id = selection.anchor_id
    start = ordinary + 1 - len(selection.messages)
    for position in triggers:
        trigger_id = messages[position].id
        selection = select_anchored_history(
            messages, limit=limit, anchor_id=anchor_id, anchor_limit=limit, end_id=trigger_id
        )
        window = selection.messages
        new_start = position + 1 - len(window)

        assert window[-1].id == trigger_id
        assert window == messages[new_start : position + 1]
        assert selection.reanchor_reason is None
        assert new_start - start == selection.advanced_by
        assert selection.advanced_by % stride == 0
        assert min(position + 1, limit - stride) <= len(window) <= limit
        anchor_id, start = selection.anchor_id, new_start


@given(inputs=selection_inputs(with_required=True), end=st.integers(min_value=0, max_value=300))
def test_an_end_bound_selects_as_if_the_history_stopped_there(inputs: dict, end: int) -> None:
    messages: tuple[Msg, ...] = inputs["messages"]
    end_id = messages[min(end, len(messages) - 1)].id if messages else 10**17
    bounded = select_anchored_history(**inputs, end_id=end_id)
    cut = select_anchored_history(
        **{**inputs, "messages": tuple(m for m in messages if m.id <= end_id)}
    )

    assert bounded.messages == cut.messages or (
        bounded.reanchor_reason is ReanchorReason.ANCHOR_AFTER_END
    )
    if bounded.reanchor_reason is ReanchorReason.ANCHOR_AFTER_END:
        assert bounded.anchor_id == inputs["anchor_id"]
        assert cut.reanchor_reason is ReanchorReason.ANCHOR_UNAVAILABLE
        assert bounded.messages[len(bounded.messages) - len(cut.messages) :] == cut.messages
    else:
        assert bounded == cut
    assert all(m.id <= end_id for m in bounded.messages)
