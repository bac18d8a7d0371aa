"""Spend and rate limits, counted in the database and shared by every worker (DESIGN §3b).

The rules are pure (`chat.pipeline.spend`); this module keeps the counts they read:

- `first_call_take`: a turn's first call, all or nothing: its trigger counted in the user's
  window (`user_turn_decision`, under the row's lock, in any process), its reservation row
  written, the counters and other processes' reservations read (on PostgreSQL: the window
  read, one statement for the rest, the commit; one statement when no trigger is counted).
  The call is judged on that plus what this process's calls in flight hold (`SpendLedger`, in
  memory: judged and held with no await in between, so a process never starts two calls on
  the same headroom). Two processes judging at the same instant may each start one call the
  other would have refused: a budget is overspent by at most one turn per process, whatever
  the concurrency. A persona turn begins this as it starts (`SpendMeter.admit_early`, judged
  on the context's whole budget), so the trip runs beside its prompt build and the first call
  finds it done; the call then holds its own bound in the ledger (its row keeps the larger
  one until it settles). The calls after a turn's first hold their bound without being
  judged.
- `spend_settle`: after the call, in the background, all or nothing (on PostgreSQL one
  statement: `_in_one_trip`): its reservation row goes, what it used is added to the day's
  rollup row (guild, channel, persona, user, kind, model) and to the counters (the guild's
  and the persona's, for the day and the month), then its hold is released. Integer sums
  (``INSERT … ON CONFLICT DO UPDATE``): exact on PostgreSQL and SQLite.

`SpendMeter` is the `chat.llm.metering.CallMeter` of one turn (or planner step, memory task): it
prices each call (`PriceBook`: the operator's table, kept while its stamp stands), lets it in
(or waits while only calls in flight fill a budget), and settles it with the provider's usage
(else the tokenizer's count, marked estimated). `Spend` builds meters for a runtime and answers
the question a background task asks before it prepares anything (is the budget spent?). Every
refusal goes through `Spend.refused`, the one place it is logged (and counted).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.utils import timezone

from chat import metrics
from chat.db_connections import connections_renewed
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

T = TypeVar("T")

RESERVATION_TTL = dt.timedelta(minutes=10)
"""A reservation a stopped process never settled lapses after this (a model call's own total
timeout is three minutes)."""
WAIT_POLL_S = 0.1
"""How often a call waiting for reservations in flight asks again."""
WAIT_MAX_S = 30.0
"""How long a call waits for reservations in flight before it is refused."""
RESERVE_THREADS = 4
"""Threads (each with its database connection) a worker's first calls are let in on: they
take no lock but a user's window row, so a burst's first calls go side by side."""
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


def budget_from_stored(*, stored: Mapping[str, Any] | None) -> BudgetLimits:
    """A stored budget (a guild's or a persona's ``limits``) as the rules read it."""
    if not stored:
        return BudgetLimits()
    usd = stored.get("usd_per_month")
    tokens = stored.get("tokens_per_day")
    return BudgetLimits(
        tokens_per_day=int(tokens) if tokens is not None else None,
        usd_per_month=Decimal(str(usd)) if usd is not None else None,
    )


def guild_limits_from_stored(*, stored: Mapping[str, Any] | None) -> GuildLimits:
    """A guild's stored ``limits`` (validated when it was saved) as the rules read them."""
    if not stored:
        return GuildLimits()
    turns = stored.get("user_turns")
    return GuildLimits(
        budget=budget_from_stored(stored=stored),
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
    limits = guild_limits_from_stored(stored=guild.limits)
    return SpendSite(
        guild_id=guild.guild_id,
        zone=ZoneInfo(guild.timezone),
        channel_id=channel_id,
        persona_id=persona.id if persona is not None else 0,
        persona_name=persona.name if persona is not None else "",
        user_id=user_id or NOBODY,
        guild_budget=limits.budget,
        persona_budget=budget_from_stored(stored=persona.limits)
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
    def read(self) -> bool:
        """Whether the table was read at least once."""
        return self._stamp is not None

    @property
    def fresh(self) -> bool:
        """Whether `price` would answer without reading the database now."""
        return time.monotonic() - self._checked < self._recheck_s

    def price(self, model: str) -> Price | None:
        """The price of ``model`` (its name exactly as requests send it); None: no price."""
        if not self.fresh:
            self.refresh()
        return self.cached(model)

    def refresh(self) -> None:
        """Read the table's stamp, and the table when it moved."""
        stamp = config_versions([PRICES_VERSION_KEY])[PRICES_VERSION_KEY]
        with self._lock:
            if stamp != self._stamp:
                self._prices = prices_table()
                self._stamp = stamp
            self._checked = time.monotonic()

    def cached(self, model: str) -> Price | None:
        """``model``'s price as last read (no database)."""
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


@dataclass(eq=False)
class Hold:
    """A call this process let in, its bound held against its guild's (and persona's)
    budgets until it settles; ``ticket`` names its reservation row (the usage page's
    "reserved"), ``periods`` the day and month it counts in (a call settles in the day it
    started)."""

    guild_id: int
    persona_id: int
    tokens: int
    usd: Decimal
    periods: SpendPeriods
    holder: str
    ticket: str = field(default_factory=lambda: uuid.uuid4().hex)


class SpendLedger:
    """The calls in flight of one process (one event loop), held against their budgets.

    A call is judged on what the counters say was used and what other processes' calls hold
    (their reservation rows, read from the database) plus these holds; a hold is released
    once its settlement is committed. A read of the counters that began before a release could
    miss the settlement, so until every such read has ended the released hold still counts
    (at its bound): no call is counted neither as used nor as held.
    """

    def __init__(self) -> None:
        self.holder = uuid.uuid4().hex
        """Names this process's reservation rows (its own calls count through the ledger)."""
        self._epoch = 0
        self._live: dict[int, set[Hold]] = {}
        self._released: list[tuple[int, Hold]] = []
        self._reading: collections.Counter[int] = collections.Counter()

    def read_started(self) -> int:
        """A read of the counters begins: returns its epoch for `held` and `read_done`."""
        self._reading[self._epoch] += 1
        return self._epoch

    def read_done(self, epoch: int) -> None:
        self._reading[epoch] -= 1
        if not self._reading[epoch]:
            del self._reading[epoch]
        self._prune()

    def held(self, guild_id: int, *, since: int) -> dict[int, tuple[int, Decimal]]:
        """What the guild's calls hold, summed per persona id (tokens, US dollars): the live
        holds, and those released after the read of epoch ``since`` began."""
        holds = [
            *self._live.get(guild_id, ()),
            *(
                hold
                for epoch, hold in self._released
                if epoch > since and hold.guild_id == guild_id
            ),
        ]
        sums: dict[int, tuple[int, Decimal]] = {}
        for hold in holds:
            tokens, usd = sums.get(hold.persona_id, (0, Decimal(0)))
            sums[hold.persona_id] = (tokens + hold.tokens, usd + hold.usd)
        return sums

    def hold(self, held: Hold) -> None:
        """Count ``held`` (a call just let in) against its budgets."""
        self._live.setdefault(held.guild_id, set()).add(held)

    def release(self, hold: Hold) -> None:
        """The hold's settlement is committed (or its call used nothing)."""
        self._live.get(hold.guild_id, set()).discard(hold)
        self._epoch += 1
        self._released.append((self._epoch, hold))
        self._prune()

    def _prune(self) -> None:
        oldest = min(self._reading, default=self._epoch)
        self._released = [(e, h) for e, h in self._released if e > oldest]


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


def spend_views(
    *,
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


Statement = tuple[str, list[Any]]
"""One SQL statement and its parameters."""


def _in_one_trip(
    writes: Sequence[Statement], read: Statement | None = None
) -> list[tuple[Any, ...]]:
    """Run ``writes`` in order, then ``read``, all or nothing, and return what ``read`` found.
    On PostgreSQL that is one statement, one trip to the server (the writes as data-modifying
    ``WITH`` parts: they run once, whole, and ``read`` sees the snapshot from before them); on
    SQLite, which has no such parts, one statement after another in a transaction."""
    if connection.vendor == "postgresql":
        leading, (last, params) = (writes, read) if read else (writes[:-1], writes[-1])
        parts = ", ".join(f"w{n} AS ({sql})" for n, (sql, _) in enumerate(leading))
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH {parts} {last}" if parts else last,
                [*(p for _, ps in leading for p in ps), *params],
            )
            return list(cursor.fetchall()) if read else []
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        for sql, params in writes:
            cursor.execute(sql, params)
        if read is None:
            return []
        cursor.execute(*read)
        return list(cursor.fetchall())


def _counting(*, locks: bool) -> contextlib.AbstractContextManager[Any]:
    """The transaction a counting step that ``locks`` a row runs in (committed without a disk
    flush); none for one that does not: its `_in_one_trip` is all or nothing by itself."""
    if not locks:
        return contextlib.nullcontext()
    return _unflushed_transaction()


@contextlib.contextmanager
def _unflushed_transaction() -> Iterator[None]:
    with transaction.atomic():
        _commit_without_flush()
        yield


@dataclass(frozen=True, slots=True)
class FirstCallView:
    """What a turn's first call is judged on: the trigger's count against ``user_turns``
    (None: not counted), the counters' use and other processes' reservations."""

    turn: UserTurnDecision | None
    used: dict[tuple[int, str], SpendCount]
    others: dict[int, tuple[int, Decimal]]


def first_call_take(
    *,
    site: SpendSite,
    hold: Hold,
    now: dt.datetime,
    trigger: int | None,
) -> FirstCallView:
    """A turn's first call, all or nothing: count its ``trigger`` in the user's window (under
    the row's lock; a user past ``user_turns`` stops here, nothing written), write the call's
    reservation row and read the counters and other processes' reservations (`_budget_read`).
    On PostgreSQL that is two statements and a commit with a trigger to count, one statement
    without. The caller judges on it with its own calls in flight, and gives the slot and the
    row back (`first_call_give_back`) when the budget says no."""
    counts = trigger is not None and site.user_turns is not None
    writes: list[Statement] = []
    turn = None
    with _counting(locks=counts):
        if counts:
            assert trigger is not None and site.user_turns is not None
            row_id, slots = _window_taken(site.guild_id, site.user_id)
            turn = user_turn_decision(
                slots=slots, message_id=trigger, now=now.timestamp(), limit=site.user_turns
            )
            if not turn.allowed:
                return FirstCallView(turn, {}, {})
            if turn.slots != slots:
                writes.append(_window_stored(row_id, turn.slots))
        if not site.limited:
            if writes:
                _in_one_trip(writes)
            return FirstCallView(turn, {}, {})
        writes.append(_reservation_inserted(hold, expires_at=now + RESERVATION_TTL))
        rows = _in_one_trip(writes, _budget_query(site, hold.periods, now, but=hold.holder))
    used, others = _budget_rows(site, hold.periods, rows)
    return FirstCallView(turn, used, others)


def _budget_query(
    site: SpendSite, periods: SpendPeriods, now: dt.datetime, *, but: str
) -> Statement:
    """What the call's counters used and what other holders' live reservations hold (per
    persona id), in one statement: one snapshot, so a settlement (its row gone and its use
    counted, at once) is seen whole or not at all."""
    reservations, counters = SpendReservation._meta.db_table, SpendCounter._meta.db_table
    owners = sorted({owner for _, owner, _, _ in _counter_keys(site, periods)})
    marks = ", ".join(["%s"] * len(owners))
    ops = connection.ops
    return (
        f"SELECT persona_id, NULL, NULL, SUM(tokens), SUM(usd_pico) FROM {reservations} "
        "WHERE guild_id = %s AND expires_at > %s AND holder <> %s GROUP BY persona_id "
        "UNION ALL "
        "SELECT persona_id, period, starts_on, prompt_tokens + completion_tokens, usd_pico "
        f"FROM {counters} WHERE guild_id = %s AND persona_id IN ({marks}) "
        "AND starts_on IN (%s, %s)",
        [
            site.guild_id,
            ops.adapt_datetimefield_value(now),
            but,
            site.guild_id,
            *owners,
            ops.adapt_datefield_value(periods.day),
            ops.adapt_datefield_value(periods.month),
        ],
    )


def _budget_rows(
    site: SpendSite, periods: SpendPeriods, rows: Iterable[Sequence[Any]]
) -> tuple[dict[tuple[int, str], SpendCount], dict[int, tuple[int, Decimal]]]:
    """`_budget_query`'s rows: what each counter used, by (persona id, period), and what the
    other holders hold, by persona id (tokens, US dollars)."""
    wanted = {(owner, period, start) for _, owner, period, start in _counter_keys(site, periods)}
    used: dict[tuple[int, str], SpendCount] = {}
    others: dict[int, tuple[int, Decimal]] = {}
    for owner, period, start, tokens, pico in rows:
        if period is None:
            others[int(owner)] = (int(tokens), Decimal(int(pico)) / PICO)
            continue
        if isinstance(start, str):  # SQLite gives the date as written
            start = dt.date.fromisoformat(start)
        if (int(owner), period, start) in wanted:
            used[(int(owner), period)] = SpendCount(int(tokens), Decimal(int(pico)) / PICO)
    return used, others


def _budget_read(
    site: SpendSite, periods: SpendPeriods, now: dt.datetime, *, but: str = ""
) -> tuple[dict[tuple[int, str], SpendCount], dict[int, tuple[int, Decimal]]]:
    """`_budget_rows` of `_budget_query`, read now (``but``: the holder whose reservations
    are left out; none when empty)."""
    with connection.cursor() as cursor:
        cursor.execute(*_budget_query(site, periods, now, but=but))
        return _budget_rows(site, periods, cursor.fetchall())


def first_call_give_back(*, site: SpendSite, hold: Hold | None, trigger: int | None) -> None:
    """A first call a budget kept out, or one admitted for a turn that made no call: its
    reservation row goes (``hold`` None: it wrote none) and its trigger's slot is given back
    (a refused trigger counts for nothing)."""
    counts = trigger is not None and site.user_turns is not None
    writes = [_reservation_deleted(hold.ticket)] if hold is not None else []
    with _counting(locks=counts):
        if counts:
            row_id, slots = _window_taken(site.guild_id, site.user_id)
            kept = tuple(slot for slot in slots if slot.message_id != trigger)
            if kept != slots:
                writes.append(_window_stored(row_id, kept))
        if writes:
            _in_one_trip(writes)


def reservation_record(*, hold: Hold, expires_at: dt.datetime) -> None:
    """Write a hold's reservation row: what other processes see of the call, and the usage
    page shows as reserved (a process that stops without settling it leaves it to lapse at
    ``expires_at``)."""
    _in_one_trip([_reservation_inserted(hold, expires_at=expires_at)])


def _reservation_inserted(hold: Hold, *, expires_at: dt.datetime) -> Statement:
    ops = connection.ops
    return (
        f"INSERT INTO {SpendReservation._meta.db_table} (ticket, holder, guild_id, persona_id, "
        "day, month, tokens, usd_pico, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            hold.ticket,
            hold.holder,
            hold.guild_id,
            hold.persona_id,
            ops.adapt_datefield_value(hold.periods.day),
            ops.adapt_datefield_value(hold.periods.month),
            hold.tokens,
            int(hold.usd * PICO),
            ops.adapt_datetimefield_value(expires_at),
        ],
    )


def _reservation_deleted(ticket: str) -> Statement:
    return (f"DELETE FROM {SpendReservation._meta.db_table} WHERE ticket = %s", [ticket])


@dataclass(frozen=True, slots=True)
class Counted:
    """One call to add: its kind, model, tokens and cost."""

    kind: CallKind
    model: str
    tokens: TokenUsage
    cost: CallCost


def spend_settle(
    *, site: SpendSite, hold: Hold | None, periods: SpendPeriods, counted: Counted
) -> None:
    """Settle one call, all or nothing (on PostgreSQL one statement): its reservation row
    goes, what it used is added to the day's rollup row and to the counters of ``periods``
    (the guild's, and the persona's when it has one)."""
    _in_one_trip(
        [
            *([_reservation_deleted(hold.ticket)] if hold is not None else []),
            _rollup_added(_rollup_key(site, periods.day, counted), _rollup_amounts(counted)),
            _counters_added(site, periods, counted),
        ]
    )


def spend_release(*, hold: Hold) -> None:
    """Drop the reservation row of a call that used nothing (it failed before any answer)."""
    _in_one_trip([_reservation_deleted(hold.ticket)])


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


def _counters_added(site: SpendSite, periods: SpendPeriods, counted: Counted) -> Statement:
    """Add a call to its counters (`_counter_keys`), each made when missing."""
    table = SpendCounter._meta.db_table
    keys = _counter_keys(site, periods)
    amounts = _amounts(counted)
    columns = (*_ADDED, "unpriced_calls")
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(keys))
    day = connection.ops.adapt_datefield_value
    return (
        f"INSERT INTO {table} (guild_id, persona_id, period, starts_on, {', '.join(columns)}) "
        f"VALUES {values} ON CONFLICT (guild_id, persona_id, period, starts_on) "
        f"DO UPDATE SET {_added(table, columns)}",
        [
            value
            for guild, owner, period, start in keys
            for value in (guild, owner, period, day(start), *amounts)
        ],
    )


_ROLLUP_KEY = ("guild_id", "day", "channel_id", "persona_name", "user_id", "kind", "model")
_ROLLUP_AMOUNTS = (*_ADDED, "unpriced_calls", "estimated_calls")


def _rollup_key(site: SpendSite, day: dt.date, counted: Counted) -> list[Any]:
    return [
        site.guild_id,
        day,
        site.channel_id,
        site.persona_name,
        site.user_id,
        str(counted.kind),
        counted.model[:200],
    ]


def _rollup_amounts(counted: Counted) -> list[int]:
    return [*_amounts(counted), 1 if counted.tokens.estimated else 0]


def _rollup_added(key: Sequence[Any], amounts: Sequence[int]) -> Statement:
    """Add ``amounts`` (`_ROLLUP_AMOUNTS`) to the rollup row of ``key`` (`_ROLLUP_KEY`), made
    when missing."""
    table = UsageDay._meta.db_table
    columns = _ROLLUP_AMOUNTS
    key = list(key)
    key[1] = connection.ops.adapt_datefield_value(key[1])
    return (
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
        _in_one_trip([_rollup_added(key, [getattr(row, name) for name in _ROLLUP_AMOUNTS])])
    UsageDay.objects.filter(id__in=[row.id for row in rows]).delete()
    UserTurnWindow.objects.filter(guild_id=guild_id, user_id=user_id).delete()
    return len(rows)


def spend_record(*, site: SpendSite, now: dt.datetime, counted: Counted) -> None:
    """Count a call that held nothing (no budget applies, or a caller that waits for no
    budget): the counters and rollup, in the periods of ``now``."""
    spend_settle(site=site, hold=None, periods=spend_periods(now, site.zone), counted=counted)


def spend_state(*, site: SpendSite, now: dt.datetime) -> SpendDecision:
    """Whether a call of ``site`` could start now, read without reserving or locking (the
    question a background task asks before it prepares anything)."""
    used, reserved = _budget_read(site, spend_periods(now, site.zone), now)
    return spend_decision(spend_views(site=site, used=used, reserved=reserved))


def reservations_prune(*, now: dt.datetime) -> int:
    """Delete lapsed reservations (calls a stopped process never settled); returns how many."""
    return SpendReservation.objects.filter(expires_at__lte=now).delete()[0]


# --- A user's turns --------------------------------------------------------------------------


def user_turn_take(
    *, guild_id: int, user_id: int, message_id: int, now: float, limit: UserTurnsLimit
) -> UserTurnDecision:
    """Judge one trigger of ``user_id`` in ``guild_id`` against ``limit`` and count it when it
    is let in, under the lock of the user's window row (atomic across processes)."""
    with _unflushed_transaction():
        row_id, slots = _window_taken(guild_id, user_id)
        decision = user_turn_decision(slots=slots, message_id=message_id, now=now, limit=limit)
        if decision.slots != slots:
            _in_one_trip([_window_stored(row_id, decision.slots)])
    return decision


def _window_taken(guild_id: int, user_id: int) -> tuple[int, tuple[UserTurnSlot, ...]]:
    """The user's window row, locked until the transaction ends (made when missing): its id
    and its slots. On PostgreSQL the row is read ``FOR UPDATE``; SQLite's transactions here
    take its one write lock as they begin."""
    table = UserTurnWindow._meta.db_table
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, slots FROM {table} WHERE guild_id = %s AND user_id = %s{lock}",
            [guild_id, user_id],
        )
        found = cursor.fetchone()
        if found is None:  # a first trigger: two at once both come here, the second waits
            cursor.execute(
                f"INSERT INTO {table} (guild_id, user_id, slots) VALUES (%s, %s, %s) "
                f"ON CONFLICT (guild_id, user_id) DO UPDATE SET slots = {table}.slots "
                "RETURNING id, slots",
                [guild_id, user_id, "[]"],
            )
            found = cursor.fetchone()
    row_id, stored = found
    slots = UserTurnWindow._meta.get_field("slots")
    stored = slots.from_db_value(stored, None, connection)  # type: ignore[arg-type]
    return row_id, tuple(UserTurnSlot(int(m), float(at)) for m, at in stored or [])


def _window_stored(row_id: int, slots: Sequence[UserTurnSlot]) -> Statement:
    return (
        f"UPDATE {UserTurnWindow._meta.db_table} SET slots = %s WHERE id = %s",
        [json.dumps([[s.message_id, s.at] for s in slots]), row_id],
    )


# --- The meter ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Ticket:
    request: ModelRequest
    kind: CallKind
    price: Price | None
    hold: Hold | None
    periods: SpendPeriods


@dataclass(frozen=True, slots=True)
class _Admission:
    """How a turn's first call was judged: its ``hold`` (None: no budget applies), or the
    ``refusal`` and the ``limit`` that made it."""

    hold: Hold | None
    refusal: Refusal | None = None
    limit: str = ""


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
        self._early: asyncio.Future[_Admission] | None = None
        self._closed = False

    def count_prompt(self, tokens: int) -> None:
        """The prompt's count, once the turn's context is built (a first call holds it)."""
        self._prompt_tokens = tokens

    def admit_early(self, *, prompt_tokens: int, model: str, max_output_tokens: int) -> None:
        """Begin the turn's first-call admission now, while its prompt is still being built
        (`turn_run` calls this as the turn starts), so the trip to the database runs beside
        the build instead of in front of the call. It is judged on an upper bound: the whole
        ``prompt_tokens`` budget of the context and ``model``'s ``max_output_tokens``; the
        first call then holds its own bound instead (`reserve`). Nothing happens when no
        limit applies. Whatever the admission took is given back by `close` when the turn
        makes no call."""
        site = self.site
        counts_trigger = self._trigger_id is not None and site.counts_user_turns
        if self._early is not None or not (site.limited or counts_trigger):
            return
        self._early = self._spend.tracked(
            self._first_admission(
                model=model, prompt_tokens=prompt_tokens, max_output_tokens=max_output_tokens
            )
        )

    async def reserve(self, request: ModelRequest, *, kind: CallKind, admitted: bool) -> object:
        """Let the call start (module docstring): a turn's first call (``admitted`` False)
        counts its trigger against the guild's ``user_turns`` and, when a budget applies, is
        judged on the counters, other processes' reservations and this process's calls in
        flight (`first_call_take`: one trip to the database, begun ahead by `admit_early`
        when the turn asked for it); a user past their turns or a spent budget refuses it,
        one held by calls in flight makes it wait for them (refused after `WAIT_MAX_S`). A
        call under a budget then holds its bound until it settles. Raises `SpendRefused`. A
        call no limit applies to costs no trip to the database."""
        spend, site = self._spend, self.site
        now = spend.clock()
        periods = spend_periods(now, site.zone)
        first = not admitted and self._trigger_id is not None and site.counts_user_turns
        if not site.limited and not first:
            return _Ticket(request, kind, None, None, periods)
        price = await spend.price(request.model.name) if site.limited else None
        bound = call_bound(
            prompt_tokens=self._prompt_estimate(request) if site.limited else 0,
            max_output_tokens=request.model.max_output_tokens,
            price=price,
        )
        if admitted:
            hold = self._hold(bound, periods)
            spend.ledger.hold(hold)
            spend.background(reservation_record, hold=hold, expires_at=now + RESERVATION_TTL)
            return _Ticket(request, kind, price, hold, periods)
        early, self._early = self._early, None
        admission = await (early if early is not None else self._admission(bound, now))
        if admission.refusal is not None:
            spend.refused(
                site=site, kind=kind, reason=admission.refusal.reason, limit=admission.limit
            )
            raise SpendRefused(admission.refusal)
        held = admission.hold
        if held is None:
            return _Ticket(request, kind, None, None, periods)
        # Admitted early on the context's whole budget, the call holds its own bound in this
        # process; its row keeps the larger one (what other processes see, until it settles).
        held.tokens, held.usd = bound.tokens, bound.usd or Decimal(0)
        return _Ticket(request, kind, price, held, held.periods)

    def close(self) -> None:
        """The turn is over: a first-call admission begun by `admit_early` that no call used
        gives back what it took (its reservation and its trigger's slot: a turn that asked
        nothing counts for nothing), once it has ended; one still waiting for calls in flight
        stops waiting."""
        self._closed = True
        early, self._early = self._early, None
        if early is None:
            return
        if early.done():
            self._give_back(early)
        else:
            early.add_done_callback(self._give_back)

    def _give_back(self, early: asyncio.Future[_Admission]) -> None:
        if early.cancelled() or early.exception() is not None:
            return
        admission = early.result()
        if admission.refusal is not None:
            return  # a refused admission gave back its slot and row already
        hold = admission.hold
        self._spend.background(
            first_call_give_back,
            site=self.site,
            hold=hold,
            trigger=self._trigger_id,
            then_release=hold,
        )

    async def _first_admission(
        self, *, model: str, prompt_tokens: int, max_output_tokens: int
    ) -> _Admission:
        spend, site = self._spend, self.site
        price = await spend.price(model) if site.limited else None
        bound = call_bound(
            prompt_tokens=prompt_tokens if site.limited else 0,
            max_output_tokens=max_output_tokens,
            price=price,
        )
        return await self._admission(bound, spend.clock())

    async def _admission(self, bound: CallBound, now: dt.datetime) -> _Admission:
        """The first call's admission on ``bound``: the trigger counted, the budget judged,
        waiting while calls in flight hold it (at most `WAIT_MAX_S`); a hold when a budget
        applies, or the refusal and the limit that made it."""
        spend, site = self._spend, self.site
        trigger = (
            self._trigger_id if self._trigger_id is not None and site.counts_user_turns else None
        )
        periods = spend_periods(now, site.zone)
        waited = 0.0
        while True:
            hold = self._hold(bound, periods)
            epoch = spend.ledger.read_started()
            try:
                view = await spend.on_thread(first_call_take)(
                    site=site, hold=hold, now=now, trigger=trigger
                )
                held = spend.ledger.held(site.guild_id, since=epoch)
            finally:
                spend.ledger.read_done(epoch)
            if view.turn is not None and not view.turn.allowed:
                return _Admission(
                    None, spend.user_turns_refusal(view.turn, site=site), "user_turns"
                )
            if not site.limited:
                return _Admission(None)
            for owner, (tokens, usd) in view.others.items():
                mine_tokens, mine_usd = held.get(owner, (0, Decimal(0)))
                held[owner] = (mine_tokens + tokens, mine_usd + usd)
            decision = spend_decision(spend_views(site=site, used=view.used, reserved=held))
            if decision.verdict is Verdict.ALLOW:
                spend.ledger.hold(hold)
                return _Admission(hold)
            if decision.verdict is Verdict.WAIT and waited < spend.max_wait_s:
                # The trigger keeps its slot; this try's row goes, the next writes its own.
                spend.background(spend_release, hold=hold)
                if self._closed:
                    return _Admission(None)  # its turn ended: `close` gives the slot back
                await asyncio.sleep(spend.wait_poll_s)
                waited += spend.wait_poll_s
                now = spend.clock()
                periods = spend_periods(now, site.zone)
                continue
            spend.background(first_call_give_back, site=site, hold=hold, trigger=trigger)
            refusal = spend.refusal(decision, site=site, now=now)
            return _Admission(None, refusal, str(decision.kind or BudgetKind.TOKENS_PER_DAY))

    def _hold(self, bound: CallBound, periods: SpendPeriods) -> Hold:
        return Hold(
            self.site.guild_id,
            self.site.persona_id,
            bound.tokens,
            bound.usd or Decimal(0),
            periods,
            self._spend.ledger.holder,
        )

    async def settle(
        self, ticket: object, *, completion: Completion | None, received: str
    ) -> CallCharge | None:
        """Count the call (module docstring): its charge is worked out now; the counters and
        the rollup take it on the spend thread in the background (the turn goes on at once),
        and its hold is released once they have. None when nothing came back."""
        assert isinstance(ticket, _Ticket)
        spend = self._spend
        if completion is None and not received:
            if ticket.hold is not None:
                spend.background(spend_release, hold=ticket.hold, then_release=ticket.hold)
            return None
        tokens = self._usage(ticket.request, completion, received)
        price = ticket.price
        if ticket.hold is None:
            price = await spend.price(ticket.request.model.name)
        reported = completion.usage.cost if completion is not None else None
        cost = call_cost(tokens, price=price, reported_usd=reported)
        if cost.usd is not None:
            metrics.model_cost_counted(model=ticket.request.model.name, usd=float(cost.usd))
        counted = Counted(ticket.kind, ticket.request.model.name, tokens, cost)
        spend.background(
            spend_settle,
            site=self.site,
            hold=ticket.hold,
            periods=ticket.periods,
            counted=counted,
            then_release=ticket.hold,
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
            prompt_tokens=sum(counter.count(t) for t in request_texts(request=request))
            + IMAGE_PART_TOKENS * request_images(request=request),
            completion_tokens=counter.count(written),
            estimated=True,
        )

    def _prompt_estimate(self, request: ModelRequest) -> int:
        if self._prompt_tokens is not None:
            return self._prompt_tokens
        counter = self._spend.token_counter
        return sum(counter.count(t) for t in request_texts(request=request)) + (
            IMAGE_PART_TOKENS * request_images(request=request)
        )


def _price_check_done(check: asyncio.Future[Any]) -> None:
    """A price book's check failed (the call it began for was priced as last read; the next
    call past the recheck interval tries again): logged."""
    if not check.cancelled() and check.exception() is not None:
        logger.warning("could not read the price table", exc_info=check.exception())


def request_texts(*, request: ModelRequest) -> Iterable[str]:
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


def request_images(*, request: ModelRequest) -> int:
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
    busy worker's turns never queue them behind their other database work:
    `RESERVE_THREADS` let first calls in, one settles calls in the background (the worker's
    runtime does; close it with `close`). False: the caller's sync thread for both."""
    ledger: SpendLedger = field(default_factory=SpendLedger)
    """This process's calls in flight."""
    _lanes: dict[str, ThreadPoolExecutor] = field(default_factory=dict, init=False, repr=False)
    _pending: set[asyncio.Task[Any]] = field(default_factory=set, init=False, repr=False)
    _refreshing: asyncio.Future[Any] | None = field(default=None, init=False, repr=False)

    def on_thread(self, func: Callable[..., Any], *, lane: str = "reserve") -> Callable[..., Any]:
        """``func`` as a coroutine function run where the counters' statements of ``lane``
        (``reserve`` or ``settle``) run."""
        if not self.own_thread:
            return sync_to_async(func)
        executor = self._lanes.get(lane)
        if executor is None:
            threads = RESERVE_THREADS if lane == "reserve" else 1
            executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"spend-{lane}")
            self._lanes[lane] = executor

        def counted(*args: Any, **kwargs: Any) -> Any:
            connections_renewed()  # one an outage broke is replaced, not reused
            _counting_connection()
            return func(*args, **kwargs)

        return sync_to_async(counted, thread_sensitive=False, executor=executor)

    def background(
        self, func: Callable[..., Any], *, then_release: Hold | None = None, **kwargs: Any
    ) -> None:
        """Run ``func(**kwargs)`` on the settle lane without waiting for it, then release the
        hold ``then_release`` (`settled` waits for every such call; a failure is logged: the
        counts it carried are lost, the hold is released all the same)."""

        async def run() -> None:
            try:
                await self.on_thread(func, lane="settle")(**kwargs)
            finally:
                if then_release is not None:
                    self.ledger.release(then_release)

        self.tracked(run())

    def tracked(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """``work`` as a task `settled` waits for (a failure is logged)."""
        task = asyncio.get_running_loop().create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._settled_one)
        return task

    def _settled_one(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("a model call could not be counted", exc_info=task.exception())

    async def settled(self) -> None:
        """Wait until every call settled in the background is in the counters and rollups."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def price(self, model: str) -> Price | None:
        """``model``'s price, from the price book. When the book is due to check the table's
        stamp, one check starts on a spend thread and the call is priced with the table as last
        read: a changed price applies once the check has read it (within about
        `PRICE_RECHECK_S` and a trip), and no turn waits for it. Only a call before the book's
        first read waits, for that read."""
        if not self.prices.fresh:
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.ensure_future(self.on_thread(self.prices.refresh)())
                self._refreshing.add_done_callback(_price_check_done)
            if not self.prices.read:
                await asyncio.shield(self._refreshing)
        return self.prices.cached(model)

    async def close(self) -> None:
        """Settle what is pending, then close the spend threads' database connections and
        the threads (nothing when it has none)."""
        await self.settled()
        if self._refreshing is not None:
            await asyncio.gather(self._refreshing, return_exceptions=True)
        lanes, self._lanes = self._lanes, {}
        for executor in lanes.values():
            threads = executor._max_workers
            # One close per thread: the barrier keeps each on a thread of its own.
            barrier = threading.Barrier(threads)

            def close_this_thread(barrier: threading.Barrier = barrier) -> None:
                barrier.wait(timeout=10)
                connections.close_all()

            closing = sync_to_async(close_this_thread, thread_sensitive=False, executor=executor)
            await asyncio.gather(*(closing() for _ in range(threads)))
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

    def refused(self, *, site: SpendSite, kind: CallKind | None, reason: str, limit: str) -> None:
        """Every refusal by a limit (``limit``: ``tokens_per_day``, ``usd_per_month`` or
        ``user_turns``) of a call of ``kind`` passes here: the one place it is logged and
        counted (`chat.metrics.BUDGET_REFUSALS`)."""
        metrics.budget_refusal_counted(limit=limit)
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
