"""Spend rules: a call's cost, the budget decision, the periods in a guild's time zone, and a
user's turns in a sliding window."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.spend import (
    BudgetKind,
    BudgetLimits,
    BudgetView,
    CostSource,
    Price,
    SpendCount,
    TokenUsage,
    UserTurnsLimit,
    UserTurnSlot,
    Verdict,
    call_bound,
    call_cost,
    priced_usd,
    refusal_reason,
    spend_decision,
    spend_periods,
    user_turn_decision,
)

MINI = Price(input=Decimal("0.15"), cached_input=Decimal("0.075"), output=Decimal("0.6"))
UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")


def test_the_price_table_prices_uncached_cached_and_output_tokens_apart():
    usage = TokenUsage(prompt_tokens=1000, cached_prompt_tokens=400, completion_tokens=100)
    # 600 × 0.15 + 400 × 0.075 + 100 × 0.6 = 90 + 30 + 60 = 180 per million
    assert priced_usd(usage, MINI) == Decimal("0.000180000000")


@pytest.mark.parametrize(
    ("price", "reported", "usd", "source"),
    [
        (MINI, None, Decimal("0.00018"), CostSource.PRICES),
        (MINI, Decimal("0.5"), Decimal("0.5"), CostSource.PROVIDER),
        (None, Decimal("0.25"), Decimal("0.25"), CostSource.PROVIDER),
        (None, None, None, None),
    ],
)
def test_a_reported_cost_wins_and_no_price_is_unknown_never_zero(price, reported, usd, source):
    usage = TokenUsage(prompt_tokens=1000, cached_prompt_tokens=400, completion_tokens=100)
    cost = call_cost(usage, price=price, reported_usd=reported)
    assert cost.usd == usd
    assert cost.source == source


def test_the_bound_is_the_prompt_and_the_whole_output_as_uncached():
    bound = call_bound(prompt_tokens=2000, max_output_tokens=500, price=MINI)
    assert bound.tokens == 2500
    assert bound.usd == Decimal("0.000600000000")  # 2000 × 0.15 + 500 × 0.6
    assert call_bound(prompt_tokens=1, max_output_tokens=1, price=None).usd is None


@given(
    prompt=st.integers(0, 10**7),
    cached=st.integers(0, 10**7),
    completion=st.integers(0, 10**6),
)
def test_a_call_never_costs_more_than_its_bound(prompt, cached, completion):
    usage = TokenUsage(
        prompt_tokens=prompt, cached_prompt_tokens=cached, completion_tokens=completion
    )
    bound = call_bound(prompt_tokens=prompt, max_output_tokens=completion, price=MINI)
    assert usage.total_tokens <= bound.tokens
    assert priced_usd(usage, MINI) <= bound.usd


def guild(tokens_per_day=None, usd_per_month=None, **counts) -> BudgetView:
    day = SpendCount(
        tokens=counts.get("tokens", 0), reserved_tokens=counts.get("reserved_tokens", 0)
    )
    month = SpendCount(
        usd=Decimal(counts.get("usd", 0)), reserved_usd=Decimal(counts.get("reserved_usd", 0))
    )
    limits = BudgetLimits(
        tokens_per_day=tokens_per_day,
        usd_per_month=Decimal(usd_per_month) if usd_per_month is not None else None,
    )
    return BudgetView("guild", limits, day, month)


@pytest.mark.parametrize(
    ("view", "verdict", "kind"),
    [
        (guild(), Verdict.ALLOW, None),
        (guild(tokens_per_day=1000, tokens=999), Verdict.ALLOW, None),
        (guild(tokens_per_day=1000, tokens=1000), Verdict.REFUSE, BudgetKind.TOKENS_PER_DAY),
        (guild(tokens_per_day=1000, tokens=5000), Verdict.REFUSE, BudgetKind.TOKENS_PER_DAY),
        (
            guild(tokens_per_day=1000, tokens=100, reserved_tokens=900),
            Verdict.WAIT,
            BudgetKind.TOKENS_PER_DAY,
        ),
        (guild(tokens_per_day=1000, tokens=100, reserved_tokens=899), Verdict.ALLOW, None),
        (guild(usd_per_month="2.50", usd="2.50"), Verdict.REFUSE, BudgetKind.USD_PER_MONTH),
        (guild(usd_per_month="2.50", usd="2.49"), Verdict.ALLOW, None),
        (
            guild(usd_per_month="2.50", usd="2", reserved_usd="0.5"),
            Verdict.WAIT,
            BudgetKind.USD_PER_MONTH,
        ),
        # A spent budget wins over a busy one, whichever comes first.
        (
            guild(tokens_per_day=10, reserved_tokens=20, usd_per_month="1", usd="1"),
            Verdict.REFUSE,
            BudgetKind.USD_PER_MONTH,
        ),
    ],
)
def test_a_budget_is_spent_busy_or_open(view, verdict, kind):
    decision = spend_decision([view])
    assert decision.verdict is verdict
    assert decision.kind == kind


def test_a_personas_own_budget_refuses_while_the_guilds_has_room():
    persona = BudgetView("Anon", BudgetLimits(tokens_per_day=50), SpendCount(tokens=60))
    decision = spend_decision([guild(tokens_per_day=1000, tokens=60), persona])
    assert decision.verdict is Verdict.REFUSE
    assert decision.scope == "Anon"


@given(
    limit=st.integers(1, 5000),
    calls=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 400)), max_size=60),
    concurrency=st.integers(1, 8),
)
def test_calls_let_in_overspend_a_budget_by_at_most_one_bound(limit, calls, concurrency):
    """Model the store: calls start in waves of ``concurrency``; each reserves its bound if
    the rule allows, then all of the wave settle with what they used (never over the bound)."""
    used = 0
    largest_bound = 0
    pending = list(calls)
    while pending:
        wave, pending = pending[:concurrency], pending[concurrency:]
        reserved, started = 0, []
        for actual, bound_extra in wave:
            bound = actual + bound_extra
            view = BudgetView(
                "guild",
                BudgetLimits(tokens_per_day=limit),
                SpendCount(tokens=used, reserved_tokens=reserved),
            )
            if spend_decision([view]).verdict is Verdict.ALLOW:
                reserved += bound
                started.append(actual)
                largest_bound = max(largest_bound, bound)
        used += sum(started)
    assert used <= limit + largest_bound


def test_periods_are_the_guilds_day_and_month_and_renew_at_its_midnight():
    now = dt.datetime(2026, 3, 31, 22, 30, tzinfo=dt.UTC)  # 00:30 on April 1st in Paris
    periods = spend_periods(now, PARIS)
    assert periods.day == dt.date(2026, 4, 1)
    assert periods.month == dt.date(2026, 4, 1)
    assert periods.day_renews_at == dt.datetime(2026, 4, 1, 22, 0, tzinfo=dt.UTC)
    assert periods.month_renews_at == dt.datetime(2026, 4, 30, 22, 0, tzinfo=dt.UTC)
    utc = spend_periods(now, UTC)
    assert (utc.day, utc.month) == (dt.date(2026, 3, 31), dt.date(2026, 3, 1))
    assert utc.month_renews_at == dt.datetime(2026, 4, 1, tzinfo=dt.UTC)


@given(st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)))
def test_now_falls_inside_its_day_and_month(naive):
    now = naive.replace(tzinfo=dt.UTC)
    for zone in (UTC, PARIS, ZoneInfo("Pacific/Kiritimati"), ZoneInfo("America/Santiago")):
        periods = spend_periods(now, zone)
        assert periods.starts_at(BudgetKind.TOKENS_PER_DAY, zone) <= now < periods.day_renews_at
        assert periods.starts_at(BudgetKind.USD_PER_MONTH, zone) <= now < periods.month_renews_at
        assert periods.day_renews_at <= periods.month_renews_at


def test_the_reason_names_the_budget_its_use_and_when_it_renews():
    decision = spend_decision([guild(tokens_per_day=1000, tokens=1200)])
    periods = spend_periods(dt.datetime(2026, 5, 3, 12, tzinfo=dt.UTC), PARIS)
    reason = refusal_reason(decision, renews_at=periods.day_renews_at, zone=PARIS)
    assert reason == (
        "the guild's budget of 1,000 tokens a day is spent (1,200 used); "
        "it renews at 2026-05-04 00:00 Europe/Paris"
    )
    persona = BudgetView(
        "Anon", BudgetLimits(usd_per_month=Decimal(3)), month=SpendCount(usd=Decimal(4))
    )
    reason = refusal_reason(
        spend_decision([persona]), renews_at=periods.month_renews_at, zone=PARIS
    )
    assert reason.startswith("Anon's budget of $3.00 a month is spent ($4.0000 used)")


FIVE_A_MINUTE = UserTurnsLimit(count=4, per_seconds=60)


def test_a_users_fifth_trigger_in_the_window_is_refused_until_the_first_leaves_it():
    slots: tuple[UserTurnSlot, ...] = ()
    for n in range(4):
        decision = user_turn_decision(slots=slots, message_id=n, now=100.0 + n, limit=FIVE_A_MINUTE)
        assert decision.allowed
        slots = decision.slots
    fifth = user_turn_decision(slots=slots, message_id=9, now=110.0, limit=FIVE_A_MINUTE)
    assert not fifth.allowed
    assert fifth.retry_after == pytest.approx(50.0)
    assert fifth.slots == slots  # a refused trigger takes no slot
    later = user_turn_decision(slots=slots, message_id=9, now=160.5, limit=FIVE_A_MINUTE)
    assert later.allowed
    assert [s.message_id for s in later.slots] == [1, 2, 3, 9]


def test_a_message_already_counted_is_allowed_again_without_a_slot():
    slots = tuple(UserTurnSlot(n, 100.0) for n in range(4))
    again = user_turn_decision(slots=slots, message_id=2, now=101.0, limit=FIVE_A_MINUTE)
    assert again.allowed
    assert again.slots == slots


@given(
    times=st.lists(st.floats(0, 1000, allow_nan=False), max_size=40),
    count=st.integers(1, 6),
    per=st.integers(1, 120),
)
def test_never_more_than_count_triggers_in_any_window(times, count, per):
    limit = UserTurnsLimit(count=count, per_seconds=per)
    slots: tuple[UserTurnSlot, ...] = ()
    allowed_at = []
    for n, now in enumerate(sorted(times)):
        decision = user_turn_decision(slots=slots, message_id=n, now=now, limit=limit)
        slots = decision.slots
        if decision.allowed:
            allowed_at.append(now)
    for start in allowed_at:
        assert sum(1 for t in allowed_at if start <= t < start + per) <= count
