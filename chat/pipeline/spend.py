"""Spend and rate limits (DESIGN §3b), as pure rules: what a model call costs, whether a guild's
(or a persona's) budget lets one more call start, and whether a user may trigger one more turn.

The shared counts these rules read live in the database (`chat.services.spend`): a call
*reserves* its upper bound (its prompt's tokens plus ``max_output_tokens``) before it is sent and
*settles* with the provider's reported usage after. The rule for a budget is:

- **spent** when what was used reaches the limit: no call starts until the period renews (a
  day for ``tokens_per_day``, a calendar month for ``usd_per_month``, both in the guild's time
  zone) or an admin raises the limit;
- **busy** when only the reservations of calls in flight reach it: the call waits for them to
  settle, then is judged again (they may use far less than they reserved);
- else a call may start and reserves its bound.

Since every call starts only while used + reserved is under the limit, and a call uses no more
than it reserved (``max_output_tokens`` bounds its reply), a budget is overspent by at most one
call, whatever the concurrency. A turn whose first call was let in finishes (its tool rounds and
retries reserve but are never refused), so the overspend is at most one turn.

A call's cost is the provider's when it reports one (OpenRouter's ``usage.cost``), else the
operator's price table's arithmetic (uncached input, cached input and output priced apart), else
unknown: never zero. Pure: the caller passes ``now``, the counts and the limits in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from zoneinfo import ZoneInfo


class CallKind(StrEnum):
    """What a model call was for: a persona's reply (its first call), a follow-up after tool
    results, an image or animation analysed for a tool, the autonomous planner, a memory
    extraction or refresh, a document's passages embedded, a persona test run's reply or
    judge's verdict."""

    REPLY = "reply"
    TOOL = "tool"
    VISION = "vision"
    PLANNER = "planner"
    EXTRACTION = "extraction"
    REFRESH = "refresh"
    EMBEDDING = "embedding"
    TEST = "test"


MILLION = Decimal(1_000_000)
USD_PLACES = Decimal("0.000000000001")
"""Costs are kept to twelve decimal places: a price has at most six, per million tokens."""


@dataclass(frozen=True, slots=True)
class Price:
    """What one model costs, in US dollars per million tokens: prompt tokens the provider read
    from its cache (``cached_input``), the other prompt tokens (``input``) and the reply's
    (``output``)."""

    input: Decimal
    cached_input: Decimal
    output: Decimal


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """One call's tokens as counted: ``prompt_tokens`` includes the ``cached_prompt_tokens``
    (as providers report them); ``estimated`` when the provider reported none and the
    tokenizer counted them."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False

    @property
    def uncached_prompt_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)

    @property
    def total_tokens(self) -> int:
        """What ``tokens_per_day`` counts: every prompt and reply token."""
        return self.prompt_tokens + self.completion_tokens


class CostSource(StrEnum):
    PROVIDER = "provider"
    PRICES = "prices"


@dataclass(frozen=True, slots=True)
class CallCost:
    """What a call cost: ``usd`` None when it is unknown (no reported cost, no price)."""

    usd: Decimal | None
    source: CostSource | None = None


def priced_usd(usage: TokenUsage, price: Price) -> Decimal:
    """The price table's arithmetic for ``usage``: uncached prompt tokens at ``input``, cached
    ones at ``cached_input``, reply tokens at ``output``, per million, to twelve places."""
    total = (
        usage.uncached_prompt_tokens * price.input
        + min(usage.cached_prompt_tokens, usage.prompt_tokens) * price.cached_input
        + usage.completion_tokens * price.output
    )
    return (total / MILLION).quantize(USD_PLACES)


def call_cost(usage: TokenUsage, *, price: Price | None, reported_usd: Decimal | None) -> CallCost:
    """What a call cost: the provider's reported cost when there is one, else the price
    table's arithmetic, else unknown (``usd`` None, never zero)."""
    if reported_usd is not None:
        return CallCost(reported_usd.quantize(USD_PLACES), CostSource.PROVIDER)
    if price is not None:
        return CallCost(priced_usd(usage, price), CostSource.PRICES)
    return CallCost(None)


@dataclass(frozen=True, slots=True)
class CallBound:
    """What a call may use at most, reserved before it starts: its prompt's tokens and its
    ``max_output_tokens``; ``usd`` priced as if no prompt token were cached (None: no price)."""

    tokens: int
    usd: Decimal | None


def call_bound(*, prompt_tokens: int, max_output_tokens: int, price: Price | None) -> CallBound:
    """The upper bound a call reserves."""
    usage = TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=max_output_tokens)
    return CallBound(
        tokens=usage.total_tokens, usd=priced_usd(usage, price) if price is not None else None
    )


# --- Budgets ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """A guild's (or a persona's) budget; None: that budget is not limited."""

    tokens_per_day: int | None = None
    usd_per_month: Decimal | None = None

    @property
    def limited(self) -> bool:
        return self.tokens_per_day is not None or self.usd_per_month is not None


@dataclass(frozen=True, slots=True)
class SpendCount:
    """What one period of one budget has used and what calls in flight have reserved."""

    tokens: int = 0
    usd: Decimal = Decimal(0)
    reserved_tokens: int = 0
    reserved_usd: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class BudgetView:
    """One budget as a call sees it: whose it is (``scope``: ``guild`` or a persona's name),
    its limits, today's count and this month's."""

    scope: str
    limits: BudgetLimits
    day: SpendCount = field(default_factory=SpendCount)
    month: SpendCount = field(default_factory=SpendCount)


class Verdict(StrEnum):
    ALLOW = "allow"
    WAIT = "wait"
    REFUSE = "refuse"


class BudgetKind(StrEnum):
    TOKENS_PER_DAY = "tokens_per_day"
    USD_PER_MONTH = "usd_per_month"


@dataclass(frozen=True, slots=True)
class SpendDecision:
    """Whether a call may start. For ``WAIT`` and ``REFUSE``: the budget that said so
    (``scope``, ``kind``), its ``limit`` and what it has ``used`` (and ``reserved``)."""

    verdict: Verdict
    scope: str = ""
    kind: BudgetKind | None = None
    limit: Decimal = Decimal(0)
    used: Decimal = Decimal(0)
    reserved: Decimal = Decimal(0)


ALLOWED = SpendDecision(Verdict.ALLOW)


def spend_decision(budgets: Sequence[BudgetView]) -> SpendDecision:
    """Whether a call counted against ``budgets`` may start (module docstring): ``REFUSE``
    when any budget is spent, else ``WAIT`` when the reservations in flight fill one, else
    ``ALLOW``. The first budget in ``budgets`` order that says no is named."""
    pairs = [pair for budget in budgets for pair in _counted(budget)]
    for scope, kind, limit, count in pairs:
        used = _used(kind, count)
        if used >= limit:
            return SpendDecision(Verdict.REFUSE, scope, kind, limit, used)
    for scope, kind, limit, count in pairs:
        used, reserved = _used(kind, count), _reserved(kind, count)
        if used + reserved >= limit:
            return SpendDecision(Verdict.WAIT, scope, kind, limit, used, reserved)
    return ALLOWED


def _counted(budget: BudgetView) -> list[tuple[str, BudgetKind, Decimal, SpendCount]]:
    pairs = []
    if budget.limits.tokens_per_day is not None:
        pairs.append(
            (
                budget.scope,
                BudgetKind.TOKENS_PER_DAY,
                Decimal(budget.limits.tokens_per_day),
                budget.day,
            )
        )
    if budget.limits.usd_per_month is not None:
        pairs.append(
            (budget.scope, BudgetKind.USD_PER_MONTH, budget.limits.usd_per_month, budget.month)
        )
    return pairs


def _used(kind: BudgetKind, count: SpendCount) -> Decimal:
    return Decimal(count.tokens) if kind is BudgetKind.TOKENS_PER_DAY else count.usd


def _reserved(kind: BudgetKind, count: SpendCount) -> Decimal:
    if kind is BudgetKind.TOKENS_PER_DAY:
        return Decimal(count.reserved_tokens)
    return count.reserved_usd


@dataclass(frozen=True, slots=True)
class SpendPeriods:
    """The periods ``now`` falls in, in a guild's time zone: the day and the month (its first
    day), and when each renews (aware, UTC)."""

    day: dt.date
    month: dt.date
    day_renews_at: dt.datetime
    month_renews_at: dt.datetime

    def renews_at(self, kind: BudgetKind) -> dt.datetime:
        return self.day_renews_at if kind is BudgetKind.TOKENS_PER_DAY else self.month_renews_at

    def starts_at(self, kind: BudgetKind, zone: ZoneInfo) -> dt.datetime:
        """When the period of ``kind`` began (aware, UTC)."""
        first = self.day if kind is BudgetKind.TOKENS_PER_DAY else self.month
        return _midnight(first, zone)


def spend_periods(now: dt.datetime, zone: ZoneInfo) -> SpendPeriods:
    """The day and month ``now`` (aware) falls in, in ``zone``, and when each renews: at the
    zone's next midnight, and at midnight of the next month's first day."""
    local = now.astimezone(zone)
    day = local.date()
    month = day.replace(day=1)
    next_month = (month + dt.timedelta(days=32)).replace(day=1)
    return SpendPeriods(
        day=day,
        month=month,
        day_renews_at=_midnight(day + dt.timedelta(days=1), zone),
        month_renews_at=_midnight(next_month, zone),
    )


def _midnight(day: dt.date, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(0), tzinfo=zone).astimezone(dt.UTC)


def refusal_reason(
    decision: SpendDecision, *, renews_at: dt.datetime, zone: ZoneInfo, main_scope: str = "guild"
) -> str:
    """The sentence a refused (or long-waiting) call is recorded with, for the why page: which
    budget, its limit, what it used, and when it renews (in the guild's time zone)."""
    whose = "the guild's" if decision.scope == main_scope else f"{decision.scope}'s"
    when = renews_at.astimezone(zone).strftime("%Y-%m-%d %H:%M")
    if decision.kind is BudgetKind.TOKENS_PER_DAY:
        budget = f"{whose} budget of {int(decision.limit):,} tokens a day"
        used = f"{int(decision.used):,} used"
        reserved = f"{int(decision.reserved):,} reserved"
    else:
        budget = f"{whose} budget of ${decision.limit:,.2f} a month"
        used = f"${decision.used:,.4f} used"
        reserved = f"${decision.reserved:,.4f} reserved"
    if decision.verdict is Verdict.WAIT:
        return f"{budget} is held by calls in flight ({used}, {reserved})"
    return f"{budget} is spent ({used}); it renews at {when} {zone.key}"


# --- A user's turns -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserTurnsLimit:
    """At most ``count`` triggers of one user per ``per_seconds`` in a guild."""

    count: int
    per_seconds: int


@dataclass(frozen=True, slots=True)
class UserTurnSlot:
    """One trigger of the user counted in the window: its message and when (epoch seconds)."""

    message_id: int
    at: float


@dataclass(frozen=True, slots=True)
class UserTurnDecision:
    """Whether the trigger may have a turn; ``slots`` is the window to store after it (the
    trigger counted when allowed); ``retry_after`` the seconds until a slot frees (refused)."""

    allowed: bool
    slots: tuple[UserTurnSlot, ...]
    retry_after: float | None = None


def user_turn_decision(
    *, slots: Sequence[UserTurnSlot], message_id: int, now: float, limit: UserTurnsLimit
) -> UserTurnDecision:
    """A sliding window over the user's triggers: slots older than ``per_seconds`` are
    dropped; a message already counted (another persona answering it) is allowed again without
    a new slot; a new one is allowed while fewer than ``count`` remain. A refused trigger takes
    no slot."""
    live = tuple(s for s in slots if now - s.at < limit.per_seconds)
    if any(s.message_id == message_id for s in live):
        return UserTurnDecision(True, live)
    if len(live) < limit.count:
        return UserTurnDecision(True, (*live, UserTurnSlot(message_id, now)))
    oldest = min(s.at for s in live)
    return UserTurnDecision(False, live, retry_after=oldest + limit.per_seconds - now)
