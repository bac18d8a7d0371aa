"""Spend and rate limits, counted in the database and shared by every worker (DESIGN §3b).

The rules are pure (`chat.pipeline.spend`); this module keeps the counts they read:

- `spend_reserve`: before a model call, in one transaction: take the guild's reservation lock
  (every reservation of a guild waits for the one before it, in any process), sum the
  reservations in flight, read the counters, judge (`spend_decision`), and insert this call's
  reservation (its upper bound) when it may start.
- `spend_settle`: after the call, in one transaction: delete its reservation, add what it used
  to the counters (the guild's and the persona's, for the day and the month) and to the day's
  rollup row (guild, channel, persona, user, kind, model). Integer sums in single statements
  (``INSERT … ON CONFLICT DO UPDATE``): exact on PostgreSQL and SQLite.
- `user_turn_take`: a user's sliding window of triggers, taken and judged
  (`user_turn_decision`) under the row's lock.

`SpendMeter` is the `chat.llm.metering.CallMeter` of one turn (or planner step, memory task): it
prices each call (`PriceBook`: the operator's table, kept while its stamp stands), reserves its
bound, waits while only reservations in flight fill a budget, and settles with the provider's
usage (else the tokenizer's count, marked estimated). `Spend` builds meters for a runtime and
answers the questions asked before a turn (may this user trigger one more? is the budget
spent?). Every refusal goes through `Spend.refused`, the one place it is logged (and counted).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.utils import timezone

from chat.llm.base import ChatRequest, Completion, ModelRequest, TextCompletionRequest
from chat.llm.metering import CallCharge, Refusal, SpendRefused
from chat.models_spend import (
    ANONYMOUS,
    NOBODY,
    PICO,
    SpendCounter,
    SpendReservation,
    UsageDay,
    UserTurnWindow,
)
from chat.pipeline.spend import (
    BudgetKind,
    BudgetLimits,
    BudgetView,
    CallBound,
    CallCost,
    CallKind,
    Price,
    SpendCount,
    SpendDecision,
    SpendPeriods,
    TokenUsage,
    UserTurnDecision,
    UserTurnsLimit,
    UserTurnSlot,
    Verdict,
    call_bound,
    call_cost,
    refusal_reason,
    spend_decision,
    spend_periods,
    user_turn_decision,
)
from chat.pipeline.tokens import TokenCounter, default_token_counter
from chat.selectors import ChannelConfiguration
from personas.config_version import PRICES_VERSION_KEY, config_versions
from personas.models import GuildConfig, ModelPrice, Persona

logger = logging.getLogger(__name__)

RESERVATION_TTL = dt.timedelta(minutes=10)
"""A reservation a stopped process never settled lapses after this (a model call's own total
timeout is three minutes)."""
WAIT_POLL_S = 0.1
"""How often a call waiting for reservations in flight asks again."""
WAIT_MAX_S = 30.0
"""How long a call waits for reservations in flight before it is refused."""
PRICE_RECHECK_S = 1.0
"""A worker reads the price table's stamp at most once a second: a changed price applies to
calls within a second."""
IMAGE_PART_TOKENS = 1_000
"""What an image part of a request is reserved as (providers count 85 to about 1,500)."""
DEFAULT_NOTICE = "({persona} is resting: this server's model budget is spent. It renews {renews}.)"
"""The notice a spent budget sends when the guild sets none; ``{persona}`` is the main
persona's name, ``{renews}`` when the budget renews."""


# --- What a guild configured ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GuildLimits:
    """A guild's limits as stored (`personas.models.GuildConfig.limits`): its budget, a user's
    turns (None: no limit) and its notice ('': the default)."""

    budget: BudgetLimits = field(default_factory=BudgetLimits)
    user_turns: UserTurnsLimit | None = None
    notice: str = ""


def budget_from_stored(stored: Mapping[str, Any] | None) -> BudgetLimits:
    """A stored budget (a guild's or a persona's ``limits``) as the rules read it."""
    if not stored:
        return BudgetLimits()
    usd = stored.get("usd_per_month")
    tokens = stored.get("tokens_per_day")
    return BudgetLimits(
        tokens_per_day=int(tokens) if tokens is not None else None,
        usd_per_month=Decimal(str(usd)) if usd is not None else None,
    )


def guild_limits_from_stored(stored: Mapping[str, Any] | None) -> GuildLimits:
    """A guild's stored ``limits`` (validated when it was saved) as the rules read them."""
    if not stored:
        return GuildLimits()
    turns = stored.get("user_turns")
    return GuildLimits(
        budget=budget_from_stored(stored),
        user_turns=UserTurnsLimit(int(turns["count"]), int(turns["per_seconds"]))
        if turns
        else None,
        notice=str(stored.get("notice") or ""),
    )


@dataclass(frozen=True, slots=True)
class SpendSite:
    """Who pays for a call and who caused it: the guild (a DM's: its persona's guild), the
    channel (0: none), the persona (id 0 and no name: none, e.g. the planner), the person
    whose message caused it (`NOBODY`: none), the guild's time zone and the budgets it counts
    against (the guild's and, when the persona has one, the persona's)."""

    guild_id: int
    zone: ZoneInfo
    channel_id: int = 0
    persona_id: int = 0
    persona_name: str = ""
    user_id: int = NOBODY
    guild_budget: BudgetLimits = field(default_factory=BudgetLimits)
    persona_budget: BudgetLimits = field(default_factory=BudgetLimits)
    user_turns: UserTurnsLimit | None = None
    """The guild's ``user_turns``, counted against ``user_id`` (when someone's message caused
    the call)."""

    @property
    def limited(self) -> bool:
        """Whether a budget applies (a call reserves its bound)."""
        return self.guild_budget.limited or self.persona_budget.limited

    @property
    def counts_user_turns(self) -> bool:
        return self.user_turns is not None and self.user_id not in (NOBODY, ANONYMOUS)


def spend_site(
    *,
    configuration: ChannelConfiguration,
    persona: Persona | None,
    user_id: int | None = None,
) -> SpendSite | None:
    """Who pays for a call in a channel: its guild (a DM's: the DM persona's guild), the
    channel, ``persona`` (None: no persona, the planner) and ``user_id`` (None: nobody's
    message caused it). None when no guild can pay (a DM nobody answers)."""
    guild = configuration.settings.guild or (persona.guild if persona is not None else None)
    if guild is None:
        return None
    return guild_site(
        guild=guild, channel_id=configuration.channel_id, persona=persona, user_id=user_id
    )


def guild_site(
    *,
    guild: GuildConfig,
    channel_id: int = 0,
    persona: Persona | None = None,
    user_id: int | None = None,
) -> SpendSite:
    """`SpendSite` of a call in ``guild`` (see `spend_site`)."""
    limits = guild_limits_from_stored(guild.limits)
    return SpendSite(
        guild_id=guild.guild_id,
        zone=ZoneInfo(guild.timezone),
        channel_id=channel_id,
        persona_id=persona.id if persona is not None else 0,
        persona_name=persona.name if persona is not None else "",
        user_id=user_id or NOBODY,
        guild_budget=limits.budget,
        persona_budget=budget_from_stored(persona.limits)
        if persona is not None
        else BudgetLimits(),
        user_turns=limits.user_turns,
    )


# --- Prices ---------------------------------------------------------------------------------


class PriceBook:
    """The operator's price table (`ModelPrice`), read once and kept while its stamp
    (`PRICES_VERSION_KEY`) stands; the stamp is read at most once every ``recheck_s`` seconds
    (0: on every question), so a changed price applies within that. Safe from threads."""

    def __init__(self, *, recheck_s: float = 0.0) -> None:
        self._stamp: str | None = None
        self._prices: dict[str, Price] = {}
        self._checked = -float("inf")
        self._recheck_s = recheck_s
        self._lock = threading.Lock()

    @property
    def fresh(self) -> bool:
        """Whether `price` would answer without reading the database now."""
        return time.monotonic() - self._checked < self._recheck_s

    def price(self, model: str) -> Price | None:
        """The price of ``model`` (its name exactly as requests send it); None: no price."""
        if not self.fresh:
            stamp = config_versions([PRICES_VERSION_KEY])[PRICES_VERSION_KEY]
            with self._lock:
                if stamp != self._stamp:
                    self._prices = prices_table()
                    self._stamp = stamp
                self._checked = time.monotonic()
        with self._lock:
            return self._prices.get(model)


def prices_table() -> dict[str, Price]:
    """Every priced model's price (a row without ``cached_input`` prices cached prompt tokens
    at ``input``)."""
    return {
        row.model: Price(
            input=row.input,
            cached_input=row.cached_input if row.cached_input is not None else row.input,
            output=row.output,
        )
        for row in ModelPrice.objects.all()
    }


# --- The counters (sync: run them on the database thread) -----------------------------------


def _commit_without_flush() -> None:
    """In a PostgreSQL transaction: commit it without waiting for its WAL to reach the disk
    (``synchronous_commit`` off for this transaction alone; the spend thread's own connection
    has it off for its whole session, `_counting_connection`). A counter's commit then costs
    about a tenth of a millisecond instead of a disk flush; what a crash of the database
    server itself could lose is its last fraction of a second of counting (never a half-written
    row). A worker's crash loses nothing. SQLite's WAL is already not flushed per commit."""
    if connection.vendor != "postgresql" or _counting_session():
        return
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _counting_session() -> bool:
    """Whether this thread's connection is the spend thread's, with commits unflushed."""
    return getattr(connection, "spend_session", None) is connection.connection is not None


def _counting_connection() -> None:
    """On the spend thread: its connection commits without a disk flush for its whole
    session (it runs the counters' statements alone), set once per connection."""
    if connection.vendor == "postgresql" and not _counting_session():
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO OFF")
        connection.spend_session = connection.connection  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call let in: its reservation row (None: nothing reserved, no budget applies) and the
    periods it counts in (a call settles in the day it started)."""

    id: int | None
    periods: SpendPeriods


def _counter_keys(site: SpendSite, periods: SpendPeriods) -> list[tuple[int, int, str, dt.date]]:
    """The counter rows a call of ``site`` adds to, in lock order: the guild's day and month,
    then the persona's (when the call has one)."""
    owners = [0, site.persona_id] if site.persona_id else [0]
    return [
        (site.guild_id, owner, period, start)
        for owner in owners
        for period, start in (
            (SpendCounter.Period.DAY, periods.day),
            (SpendCounter.Period.MONTH, periods.month),
        )
    ]


SPEND_LOCK_NAMESPACE = 0x7370656E  # "spen"
"""The first key of the PostgreSQL advisory lock a guild's reservations take (the second is
the guild's id folded to 32 bits: two guilds that share one only wait for each other)."""


def _guild_lock(guild_id: int) -> None:
    """Take the guild's reservation lock until the transaction ends: reservations of one
    guild are judged one at a time, in any process, while settlements (which add to the
    counters and drop reservations) go on beside them. PostgreSQL: a transaction-level
    advisory lock; SQLite: its one writer at a time already orders them."""
    if connection.vendor != "postgresql":
        return
    folded = (guild_id ^ (guild_id >> 32)) & 0x7FFFFFFF
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SPEND_LOCK_NAMESPACE, folded])


def _counters_read(site: SpendSite, periods: SpendPeriods) -> dict[tuple[int, str], SpendCount]:
    """What each of the call's counters has used (a counter not made yet: nothing), by
    (persona id, period)."""
    keys = _counter_keys(site, periods)
    rows = SpendCounter.objects.filter(
        guild_id=site.guild_id,
        persona_id__in={owner for _, owner, _, _ in keys},
        starts_on__in={periods.day, periods.month},
    ).values_list(
        "persona_id", "period", "starts_on", "prompt_tokens", "completion_tokens", "usd_pico"
    )
    wanted = {(owner, period, start) for _, owner, period, start in keys}
    return {
        (owner, period): SpendCount(tokens=prompt + completion, usd=Decimal(pico) / PICO)
        for owner, period, start, prompt, completion, pico in rows
        if (owner, period, start) in wanted
    }


def _reserved(site: SpendSite, now: dt.datetime) -> dict[int, tuple[int, Decimal]]:
    """The live reservations of the guild, summed per persona id: (tokens, US dollars)."""
    rows = (
        SpendReservation.objects.filter(guild_id=site.guild_id, expires_at__gt=now)
        .values_list("persona_id", "tokens", "usd_pico")
        .order_by()
    )
    sums: dict[int, tuple[int, Decimal]] = {}
    for owner, tokens, pico in rows:
        held_tokens, held_usd = sums.get(owner, (0, Decimal(0)))
        sums[owner] = (held_tokens + tokens, held_usd + Decimal(pico) / PICO)
    return sums


def spend_views(
    site: SpendSite,
    used: Mapping[tuple[int, str], SpendCount],
    reserved: Mapping[int, tuple[int, Decimal]],
) -> list[BudgetView]:
    """The budgets a call of ``site`` counts against, as the rule reads them."""
    guild_tokens = sum(tokens for tokens, _ in reserved.values())
    guild_usd = sum((usd for _, usd in reserved.values()), Decimal(0))
    persona_tokens, persona_usd = reserved.get(site.persona_id, (0, Decimal(0)))

    def count(owner: int, period: str, tokens: int, usd: Decimal) -> SpendCount:
        found = used.get((owner, period), SpendCount())
        return SpendCount(found.tokens, found.usd, tokens, usd)

    views = [
        BudgetView(
            "guild",
            site.guild_budget,
            day=count(0, SpendCounter.Period.DAY, guild_tokens, guild_usd),
            month=count(0, SpendCounter.Period.MONTH, guild_tokens, guild_usd),
        )
    ]
    if site.persona_id and site.persona_budget.limited:
        views.append(
            BudgetView(
                site.persona_name,
                site.persona_budget,
                day=count(site.persona_id, SpendCounter.Period.DAY, persona_tokens, persona_usd),
                month=count(
                    site.persona_id, SpendCounter.Period.MONTH, persona_tokens, persona_usd
                ),
            )
        )
    return views


@dataclass(frozen=True, slots=True)
class UserTurnAsk:
    """A turn's first call also counts its trigger (``message_id``, at ``at`` epoch
    seconds) against the site's ``user_turns``."""

    message_id: int
    at: float


def spend_reserve(
    *,
    site: SpendSite,
    bound: CallBound,
    now: dt.datetime,
    force: bool = False,
    user_turn: UserTurnAsk | None = None,
) -> Reservation | SpendDecision | UserTurnDecision:
    """Let one call of ``site`` start if its limits allow, in one transaction:

    1. With ``user_turn`` (a turn's first call, someone's message): lock the user's window of
       recent triggers; a user past ``user_turns`` is refused (the `UserTurnDecision`).
    2. When a budget applies: take the guild's reservation lock (`_guild_lock`), sum the
       reservations in flight and read the counters, judge (`spend_decision`); a spent
       (``REFUSE``) or busy (``WAIT``) budget is returned as its decision, the trigger not
       counted.
    3. Count the trigger in the window and reserve ``bound``; returns the `Reservation` (its
       id None when no budget applies).

    ``force`` (a call of a turn already let in) skips 1 and 2. Atomic across processes: a
    guild's reservations are judged one at a time."""
    periods = spend_periods(now, site.zone)
    with transaction.atomic():
        _commit_without_flush()
        window: tuple[int, tuple[UserTurnSlot, ...]] | None = None
        turn: UserTurnDecision | None = None
        if user_turn is not None and not force and site.counts_user_turns:
            assert site.user_turns is not None
            window = _window_taken(site.guild_id, site.user_id)
            turn = user_turn_decision(
                slots=window[1],
                message_id=user_turn.message_id,
                now=user_turn.at,
                limit=site.user_turns,
            )
            if not turn.allowed:
                return turn
        if site.limited and not force:
            _guild_lock(site.guild_id)
            # Reservations first, then the counters: a settlement committing in between is
            # then counted twice (used, and still reserved), never not at all.
            reserved = _reserved(site, now)
            decision = spend_decision(spend_views(site, _counters_read(site, periods), reserved))
            if decision.verdict is not Verdict.ALLOW:
                return decision
        if window is not None and turn is not None and turn.slots != window[1]:
            _window_store(window[0], turn.slots)
        if not site.limited:
            return Reservation(None, periods)
        row = SpendReservation.objects.create(
            guild_id=site.guild_id,
            persona_id=site.persona_id,
            day=periods.day,
            month=periods.month,
            tokens=bound.tokens,
            usd_pico=int((bound.usd or Decimal(0)) * PICO),
            expires_at=now + RESERVATION_TTL,
        )
    return Reservation(row.id, periods)


@dataclass(frozen=True, slots=True)
class Counted:
    """One call to add: its kind, model, tokens and cost."""

    kind: CallKind
    model: str
    tokens: TokenUsage
    cost: CallCost


def spend_settle(
    *, site: SpendSite, reservation: Reservation | None, periods: SpendPeriods, counted: Counted
) -> None:
    """Settle one call in one transaction: its reservation goes, what it used is added to the
    counters of ``periods`` (the guild's, and the persona's when it has one) and to the day's
    rollup row."""
    with transaction.atomic():
        _commit_without_flush()
        if reservation is not None and reservation.id is not None:
            SpendReservation.objects.filter(id=reservation.id).delete()
        _counters_add(site, periods, counted)
        _rollup_add(site, periods.day, counted)


def spend_release(*, reservation: Reservation) -> None:
    """Drop a reservation whose call used nothing (it failed before any answer)."""
    if reservation.id is not None:
        SpendReservation.objects.filter(id=reservation.id).delete()


def _amounts(counted: Counted) -> list[int]:
    usage, usd = counted.tokens, counted.cost.usd
    return [
        1,
        usage.prompt_tokens,
        min(usage.cached_prompt_tokens, usage.prompt_tokens),
        usage.completion_tokens,
        int(usd * PICO) if usd is not None else 0,
        0 if usd is not None else 1,
    ]


_ADDED = ("calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "usd_pico")


def _added(table: str, columns: Sequence[str]) -> str:
    return ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns)


def _counters_add(site: SpendSite, periods: SpendPeriods, counted: Counted) -> None:
    table = SpendCounter._meta.db_table
    keys = _counter_keys(site, periods)
    amounts = _amounts(counted)
    columns = (*_ADDED, "unpriced_calls")
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(keys))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (guild_id, persona_id, period, starts_on, {', '.join(columns)}) "
            f"VALUES {values} ON CONFLICT (guild_id, persona_id, period, starts_on) "
            f"DO UPDATE SET {_added(table, columns)}",
            [value for key in keys for value in (*key, *amounts)],
        )


_ROLLUP_KEY = ("guild_id", "day", "channel_id", "persona_name", "user_id", "kind", "model")
_ROLLUP_AMOUNTS = (*_ADDED, "unpriced_calls", "estimated_calls")


def _rollup_add(site: SpendSite, day: dt.date, counted: Counted) -> None:
    key = [
        site.guild_id,
        day,
        site.channel_id,
        site.persona_name,
        site.user_id,
        str(counted.kind),
        counted.model[:200],
    ]
    _rollup_upsert(key, [*_amounts(counted), 1 if counted.tokens.estimated else 0])


def _rollup_upsert(key: Sequence[object], amounts: Sequence[int]) -> None:
    """Add ``amounts`` (`_ROLLUP_AMOUNTS`) to the rollup row of ``key`` (`_ROLLUP_KEY`), made
    when missing: one statement."""
    table = UsageDay._meta.db_table
    columns = _ROLLUP_AMOUNTS
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (guild_id, day, channel_id, persona_name, user_id, kind, model, "
            f"{', '.join(columns)}) VALUES ({', '.join(['%s'] * (len(key) + len(amounts)))}) "
            f"ON CONFLICT ({', '.join(_ROLLUP_KEY)}) "
            f"DO UPDATE SET {_added(table, columns)}",
            [*key, *amounts],
        )


def usage_forget_user(*, guild_id: int, user_id: int) -> int:
    """Someone chose full privacy in the guild: fold their rollup rows into the anonymous
    person's (`ANONYMOUS`: the totals stay, their id goes) and drop their window of recent
    triggers. Call it in the caller's transaction; returns how many rows were folded."""
    rows = list(UsageDay.objects.select_for_update().filter(guild_id=guild_id, user_id=user_id))
    for row in rows:
        key = [getattr(row, name) for name in _ROLLUP_KEY]
        key[_ROLLUP_KEY.index("user_id")] = ANONYMOUS
        _rollup_upsert(key, [getattr(row, name) for name in _ROLLUP_AMOUNTS])
    UsageDay.objects.filter(id__in=[row.id for row in rows]).delete()
    UserTurnWindow.objects.filter(guild_id=guild_id, user_id=user_id).delete()
    return len(rows)


def spend_record(*, site: SpendSite, now: dt.datetime, counted: Counted) -> None:
    """Count a call that reserved nothing (no budget applies): the counters and rollup, in
    the periods of ``now``."""
    spend_settle(
        site=site, reservation=None, periods=spend_periods(now, site.zone), counted=counted
    )


def spend_state(*, site: SpendSite, now: dt.datetime) -> SpendDecision:
    """Whether a call of ``site`` could start now, read without reserving or locking (the
    question a background task asks before it prepares anything)."""
    periods = spend_periods(now, site.zone)
    keys = _counter_keys(site, periods)
    used = {}
    for row in SpendCounter.objects.filter(
        guild_id=site.guild_id,
        persona_id__in={owner for _, owner, _, _ in keys},
        starts_on__in={periods.day, periods.month},
    ):
        if (row.guild_id, row.persona_id, row.period, row.starts_on) in keys:
            used[(row.persona_id, row.period)] = SpendCount(
                tokens=row.tokens, usd=Decimal(row.usd_pico) / PICO
            )
    return spend_decision(spend_views(site, used, _reserved(site, now)))


def reservations_prune(*, now: dt.datetime) -> int:
    """Delete lapsed reservations (calls a stopped process never settled); returns how many."""
    return SpendReservation.objects.filter(expires_at__lte=now).delete()[0]


# --- A user's turns --------------------------------------------------------------------------


def user_turn_take(
    *, guild_id: int, user_id: int, message_id: int, now: float, limit: UserTurnsLimit
) -> UserTurnDecision:
    """Judge one trigger of ``user_id`` in ``guild_id`` against ``limit`` and count it when it
    is let in, under the lock of the user's window row (atomic across processes)."""
    with transaction.atomic():
        _commit_without_flush()
        row_id, slots = _window_taken(guild_id, user_id)
        decision = user_turn_decision(slots=slots, message_id=message_id, now=now, limit=limit)
        if decision.slots != slots:
            _window_store(row_id, decision.slots)
    return decision


def _window_taken(guild_id: int, user_id: int) -> tuple[int, tuple[UserTurnSlot, ...]]:
    """The user's window row (made when missing) locked until the transaction ends, in one
    statement: its id and its slots."""
    table = UserTurnWindow._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (guild_id, user_id, slots) VALUES (%s, %s, %s) "
            f"ON CONFLICT (guild_id, user_id) DO UPDATE SET slots = {table}.slots "
            "RETURNING id, slots",
            [guild_id, user_id, "[]"],
        )
        row_id, stored = cursor.fetchone()
    stored = UserTurnWindow._meta.get_field("slots").from_db_value(stored, None, connection)
    return row_id, tuple(UserTurnSlot(int(m), float(at)) for m, at in stored or [])


def _window_store(row_id: int, slots: Sequence[UserTurnSlot]) -> None:
    UserTurnWindow.objects.filter(id=row_id).update(slots=[[s.message_id, s.at] for s in slots])


# --- The meter ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ticket:
    request: ModelRequest
    kind: CallKind
    price: Price | None
    reservation: Reservation | None
    periods: SpendPeriods


class SpendMeter:
    """The `CallMeter` of one turn (planner step, memory task): every call of it is priced,
    reserved against ``site``'s budgets (when it has any) and settled into the counters and
    the rollups. ``prompt_tokens`` is the prompt's count when the caller knows it (a persona
    turn's context); else the meter counts the request's text."""

    def __init__(
        self,
        spend: Spend,
        site: SpendSite,
        *,
        prompt_tokens: int | None = None,
        trigger_id: int | None = None,
    ):
        self._spend = spend
        self.site = site
        self._prompt_tokens = prompt_tokens
        self._trigger_id = trigger_id

    async def reserve(self, request: ModelRequest, *, kind: CallKind, admitted: bool) -> object:
        """Let the call start (module docstring): the turn's first call (``admitted`` False)
        also counts its trigger against the guild's ``user_turns``; a call reserves its bound
        when a budget applies. Raises `SpendRefused` for a user past their turns, a spent
        budget, or one held by calls in flight for `WAIT_MAX_S` (a first call only). A call
        no limit applies to costs no trip to the database."""
        spend, site = self._spend, self.site
        counts_turn = not admitted and self._trigger_id is not None and site.counts_user_turns
        if not site.limited and not counts_turn:
            periods = spend_periods(spend.clock(), site.zone)
            return _Ticket(request, kind, None, None, periods)
        waited = 0.0
        while True:
            now = spend.clock()
            ask = UserTurnAsk(self._trigger_id, now.timestamp()) if counts_turn else None
            price, result = await spend.on_thread(self._reserve_priced)(request, now, admitted, ask)
            if isinstance(result, Reservation):
                return _Ticket(request, kind, price, result, result.periods)
            if isinstance(result, UserTurnDecision):
                refusal = spend.user_turns_refusal(result, site=site)
            elif result.verdict is Verdict.WAIT and waited < spend.max_wait_s:
                await asyncio.sleep(spend.wait_poll_s)
                waited += spend.wait_poll_s
                continue
            else:
                refusal = spend.refusal(result, site=site, now=now)
            spend.refused(site=site, kind=kind, reason=refusal.reason)
            raise SpendRefused(refusal)

    def _reserve_priced(
        self, request: ModelRequest, now: dt.datetime, force: bool, ask: UserTurnAsk | None
    ) -> tuple[Price | None, Reservation | SpendDecision | UserTurnDecision]:
        """On the spend thread: the model's price, then `spend_reserve` of the call's bound."""
        price = self._spend.prices.price(request.model.name)
        bound = call_bound(
            prompt_tokens=self._prompt_estimate(request) if self.site.limited else 0,
            max_output_tokens=request.model.max_output_tokens,
            price=price,
        )
        reserved = spend_reserve(site=self.site, bound=bound, now=now, force=force, user_turn=ask)
        return price, reserved

    async def settle(
        self, ticket: object, *, completion: Completion | None, received: str
    ) -> CallCharge | None:
        """Count the call (module docstring): its charge is worked out now; the counters and
        the rollup take it on the spend thread in the background (the turn goes on at once).
        None when nothing came back (its reservation is released)."""
        assert isinstance(ticket, _Ticket)
        spend = self._spend
        if completion is None and not received:
            if ticket.reservation is not None:
                spend.background(spend_release, reservation=ticket.reservation)
            return None
        tokens = self._usage(ticket.request, completion, received)
        price = ticket.price
        if ticket.reservation is None:
            price = await spend.price(ticket.request.model.name)
        reported = completion.usage.cost if completion is not None else None
        cost = call_cost(tokens, price=price, reported_usd=reported)
        counted = Counted(ticket.kind, ticket.request.model.name, tokens, cost)
        spend.background(
            spend_settle,
            site=self.site,
            reservation=ticket.reservation,
            periods=ticket.periods,
            counted=counted,
        )
        return CallCharge(ticket.kind, tokens, cost.usd, cost.source)

    def _usage(
        self, request: ModelRequest, completion: Completion | None, received: str
    ) -> TokenUsage:
        """The provider's usage; when it reported none, the tokenizer's count of the request
        and of what came back (marked estimated)."""
        usage = completion.usage if completion is not None else None
        if usage is not None and usage.prompt_tokens is not None:
            return TokenUsage(
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens or 0,
                completion_tokens=usage.completion_tokens or 0,
            )
        counter = self._spend.token_counter
        written = completion.text if completion is not None and completion.text else received
        return TokenUsage(
            prompt_tokens=sum(counter.count(t) for t in request_texts(request))
            + IMAGE_PART_TOKENS * request_images(request),
            completion_tokens=counter.count(written),
            estimated=True,
        )

    def _prompt_estimate(self, request: ModelRequest) -> int:
        if self._prompt_tokens is not None:
            return self._prompt_tokens
        counter = self._spend.token_counter
        return sum(counter.count(t) for t in request_texts(request)) + (
            IMAGE_PART_TOKENS * request_images(request)
        )


def request_texts(request: ModelRequest) -> Iterable[str]:
    """Every text a request hands the model (message contents and text parts, or the
    prompt)."""
    if isinstance(request, TextCompletionRequest):
        yield request.prompt
        return
    assert isinstance(request, ChatRequest)
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]
        for call in message.get("tool_calls") or []:
            yield str(call.get("function", {}).get("arguments", ""))


def request_images(request: ModelRequest) -> int:
    """How many image parts a request carries."""
    if not isinstance(request, ChatRequest):
        return 0
    return sum(
        1
        for message in request.messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )


@dataclass
class Spend:
    """A process's spend and rate limits: the price book, the tokenizer an unreported call is
    counted with, the clock, how long a call waits for reservations in flight. Builds the
    meters of its runtime's turns; `chat.runtime` makes one per runtime."""

    prices: PriceBook = field(default_factory=lambda: PriceBook(recheck_s=PRICE_RECHECK_S))
    token_counter: TokenCounter = field(default_factory=default_token_counter)
    clock: Callable[[], dt.datetime] = timezone.now
    wait_poll_s: float = WAIT_POLL_S
    max_wait_s: float = WAIT_MAX_S
    own_thread: bool = False
    """Run the counters' statements on threads (and database connections) of their own, so a
    busy worker's turns never queue them behind their other database work: one thread lets
    calls in (`spend_reserve`, one at a time, so a worker's reservations never wait for each
    other's row locks), one settles them (the worker's runtime does; close it with
    `close`). False: the caller's sync thread for both."""
    _lanes: dict[str, ThreadPoolExecutor] = field(default_factory=dict, init=False, repr=False)
    _pending: set[asyncio.Task[Any]] = field(default_factory=set, init=False, repr=False)

    def on_thread(self, func: Callable[..., Any], *, lane: str = "reserve") -> Callable[..., Any]:
        """``func`` as a coroutine function run where the counters' statements of ``lane``
        (``reserve`` or ``settle``) run."""
        if not self.own_thread:
            return sync_to_async(func)
        executor = self._lanes.get(lane)
        if executor is None:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spend-{lane}")
            self._lanes[lane] = executor

        def counted(*args: Any, **kwargs: Any) -> Any:
            _counting_connection()
            return func(*args, **kwargs)

        return sync_to_async(counted, thread_sensitive=False, executor=executor)

    def background(self, func: Callable[..., Any], **kwargs: Any) -> None:
        """Run ``func(**kwargs)`` on the settle lane without waiting for it (`settled` waits
        for every such call; a failure is logged: the counts it carried are lost)."""
        task = asyncio.get_running_loop().create_task(self.on_thread(func, lane="settle")(**kwargs))
        self._pending.add(task)
        task.add_done_callback(self._settled_one)

    def _settled_one(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("a model call could not be counted", exc_info=task.exception())

    async def settled(self) -> None:
        """Wait until every call settled in the background is in the counters and rollups."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def price(self, model: str) -> Price | None:
        """``model``'s price, from the price book (a trip to the database only when it is due
        to check the table's stamp)."""
        if self.prices.fresh:
            return self.prices.price(model)
        return await self.on_thread(self.prices.price)(model)

    async def close(self) -> None:
        """Settle what is pending, then close the spend threads' database connections and
        the threads (nothing when it has none)."""
        await self.settled()
        lanes, self._lanes = self._lanes, {}
        for executor in lanes.values():
            await sync_to_async(connections.close_all, thread_sensitive=False, executor=executor)()
            executor.shutdown(wait=False)

    def meter(
        self, site: SpendSite, *, prompt_tokens: int | None = None, trigger_id: int | None = None
    ) -> SpendMeter:
        """The meter of one turn (planner step, memory task) of ``site``; ``trigger_id``, the
        message that caused it, is counted against ``user_turns`` by its first call."""
        return SpendMeter(self, site, prompt_tokens=prompt_tokens, trigger_id=trigger_id)

    def refusal(self, decision: SpendDecision, *, site: SpendSite, now: dt.datetime) -> Refusal:
        """The refusal ``decision`` makes: its sentence (`refusal_reason`) and when the budget
        that said no renews."""
        renews_at = spend_periods(now, site.zone).renews_at(
            decision.kind or BudgetKind.TOKENS_PER_DAY
        )
        reason = refusal_reason(decision, renews_at=renews_at, zone=site.zone)
        return Refusal(reason, renews_at if decision.verdict is Verdict.REFUSE else None)

    def refused(self, *, site: SpendSite, kind: CallKind | None, reason: str) -> None:
        """Every refusal by a limit passes here (a budget's, before a call of ``kind``; a
        user's turns, ``kind`` None): the one place it is logged."""
        logger.info(
            "refused in guild %s (channel %s, %s): %s",
            site.guild_id,
            site.channel_id,
            kind or "user turns",
            reason,
        )

    async def spent(self, site: SpendSite) -> Refusal | None:
        """Whether a budget of ``site`` is spent now (read without a reservation: what a
        background task asks before it prepares anything); None: a call could start."""
        if not site.limited:
            return None
        now = self.clock()
        decision = await self.on_thread(spend_state)(site=site, now=now)
        if decision.verdict is not Verdict.REFUSE:
            return None
        return self.refusal(decision, site=site, now=now)

    def user_turns_refusal(self, decision: UserTurnDecision, *, site: SpendSite) -> Refusal:
        """The refusal of a user past ``user_turns`` (``decision`` refused their trigger)."""
        assert site.user_turns is not None
        limit = site.user_turns
        retry = dt.timedelta(seconds=round(decision.retry_after or 0))
        return Refusal(
            f"this user's {limit.count} triggers every {limit.per_seconds} s are used up "
            f"(the next one in {retry})",
            limit="user_turns",
        )
