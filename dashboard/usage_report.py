"""What the usage pages show (DESIGN §3b), read from the rollups and counters the worker keeps
as calls happen (`chat.models_spend`), never from turns: per day, persona, user, kind, model
and channel, the calls, their tokens (uncached, cached, output), their known cost and how many
had none, and each budget's state.

Costs are whole picodollars in the database; here they become `Decimal` US dollars. A total
whose every call had no price is unknown (``usd`` None), never zero; a total with some priced
calls is their sum, with ``unpriced_calls`` saying how many more cost an unknown amount.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db.models import Q, QuerySet, Sum
from django.urls import reverse
from django.utils import timezone

from chat.models import DiscordName
from chat.models_spend import (
    ANONYMOUS,
    CALL_KIND_LABELS,
    NOBODY,
    PICO,
    SpendCounter,
    SpendReservation,
    UsageDay,
)
from chat.pipeline.spend import BudgetKind, BudgetLimits, CallKind, spend_periods
from chat.services.spend import budget_from_stored, guild_limits_from_stored
from dashboard.names import FULL_PRIVACY_LABEL, NameBook
from personas.models import GuildConfig, Persona

DEFAULT_DAYS = 30
"""Days a usage page shows unless asked for others (today included)."""
MAX_DAYS = 366
"""The longest range one page shows."""
_SUMMED = (
    "calls",
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "usd_pico",
    "unpriced_calls",
)


class RangeRefused(ValueError):
    """A requested range the page cannot show; the message says why, for the person."""


@dataclass(frozen=True)
class Totals:
    """Summed calls and tokens (``prompt_tokens`` includes the cached ones), their known cost
    in picodollars and how many calls had none."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    usd_pico: int = 0
    unpriced_calls: int = 0

    @classmethod
    def of(cls, row: Mapping[str, object]) -> Totals:
        return cls(**{name: int(row.get(name) or 0) for name in _SUMMED})

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(getattr(self, n) + getattr(other, n) for n in _SUMMED))

    @property
    def uncached_prompt_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cache_share(self) -> float | None:
        """The share of prompt tokens the provider read from its cache (None: no prompt)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def usd(self) -> Decimal | None:
        """The known cost in US dollars; None when every call had none (unknown)."""
        if self.calls and self.unpriced_calls == self.calls:
            return None
        return Decimal(self.usd_pico) / PICO

    def as_json(self) -> dict[str, object]:
        usd = self.usd
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "usd": format_usd(usd) if usd is not None else None,
            "unpriced_calls": self.unpriced_calls,
        }


def format_usd(usd: Decimal) -> str:
    """Dollars as a plain decimal string, trailing zeros dropped (``0.000369``)."""
    text = format(usd.normalize(), "f")
    return text if "." not in text else text.rstrip("0").rstrip(".") or "0"


@dataclass(frozen=True)
class Row:
    """One line of a breakdown: its ``key`` (a persona's name, a user id, a kind…), how it is
    shown (``label``) and its totals."""

    key: object
    label: str
    totals: Totals


@dataclass(frozen=True)
class BudgetState:
    """One budget now: whose (``scope``: ``guild`` or a persona's name), which, its limit, what
    it used and calls in flight hold, what is left, and when it renews."""

    scope: str
    kind: BudgetKind
    limit: Decimal
    used: Decimal
    reserved: Decimal
    renews_at: dt.datetime

    @property
    def left(self) -> Decimal:
        return max(Decimal(0), self.limit - self.used - self.reserved)

    @property
    def spent(self) -> bool:
        return self.used >= self.limit

    def as_json(self) -> dict[str, object]:
        def amount(value: Decimal) -> object:
            return int(value) if self.kind is BudgetKind.TOKENS_PER_DAY else format_usd(value)

        return {
            "scope": self.scope,
            "budget": str(self.kind),
            "limit": amount(self.limit),
            "used": amount(self.used),
            "reserved": amount(self.reserved),
            "left": amount(self.left),
            "spent": self.spent,
            "renews_at": self.renews_at.isoformat(),
        }


@dataclass(frozen=True)
class UsageReport:
    """One guild's usage over ``start``..``end`` (its time zone's days, both included)."""

    guild: GuildConfig
    start: dt.date
    end: dt.date
    days: list[Row]
    personas: list[Row]
    users: list[Row]
    kinds: list[Row]
    models: list[Row]
    channels: list[Row]
    total: Totals
    budgets: list[BudgetState] = field(default_factory=list)
    estimated_calls: int = 0

    def as_json(self) -> dict[str, object]:
        """DESIGN §3b's answer: ``days``, ``personas`` and ``users`` (and more breakdowns, the
        totals and the budgets)."""

        def rows(
            name: str, items: list[Row], key: Callable[[Row], object] = lambda row: row.key
        ) -> list[dict]:
            return [{name: key(row), **row.totals.as_json()} for row in items]

        users = [
            {
                "user_id": str(row.key) if row.key is not None else None,
                "name": row.label,
                **row.totals.as_json(),
            }
            for row in self.users
        ]
        return {
            "guild": str(self.guild.guild_id),
            "timezone": self.guild.timezone,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "days": rows("date", self.days, lambda row: row.key.isoformat()),
            "personas": rows("persona", self.personas),
            "users": users,
            "kinds": rows("kind", self.kinds),
            "models": rows("model", self.models),
            "channels": [
                {"channel_id": str(row.key), "name": row.label, **row.totals.as_json()}
                for row in self.channels
            ],
            "totals": {**self.total.as_json(), "estimated_calls": self.estimated_calls},
            "budget": [budget.as_json() for budget in self.budgets],
        }


def usage_range(
    *, zone: ZoneInfo, start: str | None, end: str | None, now: dt.datetime | None = None
) -> tuple[dt.date, dt.date]:
    """The days a page asked for (``from``/``to``, ISO dates), else the last `DEFAULT_DAYS`
    ending today in ``zone`` (the guild's time zone). Raises `RangeRefused` for a date that is
    not one, an end before its start, or more than `MAX_DAYS` days."""
    today = (now or timezone.now()).astimezone(zone).date()
    try:
        last = dt.date.fromisoformat(end) if end else today
        first = dt.date.fromisoformat(start) if start else last - dt.timedelta(DEFAULT_DAYS - 1)
    except ValueError:
        raise RangeRefused("from and to must be dates written YYYY-MM-DD") from None
    if last < first:
        raise RangeRefused(f"to ({last}) is before from ({first})")
    if (last - first).days + 1 > MAX_DAYS:
        raise RangeRefused(f"a page shows at most {MAX_DAYS} days; ask for fewer")
    return first, last


def usage_report(
    *,
    guild: GuildConfig,
    start: dt.date,
    end: dt.date,
    names: NameBook,
    now: dt.datetime | None = None,
) -> UsageReport:
    """The guild's usage over ``start``..``end``: one aggregate query per breakdown over its
    rollups (indexed by guild and day), every day of the range listed (zeros included), users
    by name with everyone with full privacy in one anonymous row, and its budgets now."""
    rows = UsageDay.objects.filter(guild_id=guild.guild_id, day__gte=start, day__lte=end)
    by_day = {r["day"]: Totals.of(r) for r in _grouped(rows, "day")}
    days = [
        Row(day, day.isoformat(), by_day.get(day, Totals()))
        for day in (start + dt.timedelta(n) for n in range((end - start).days + 1))
    ]
    personas = [
        Row(r["persona_name"], r["persona_name"] or "(no persona: the planner, embeddings)", t)
        for r, t in _sorted(_grouped(rows, "persona_name"))
    ]
    kinds = [
        Row(r["kind"], CALL_KIND_LABELS.get(CallKind(r["kind"]), r["kind"]), t)
        for r, t in _sorted(_grouped(rows, "kind"))
    ]
    models = [Row(r["model"], r["model"], t) for r, t in _sorted(_grouped(rows, "model"))]
    channels = [
        Row(r["channel_id"], names.channel(r["channel_id"]).text if r["channel_id"] else "—", t)
        for r, t in _sorted(_grouped(rows, "channel_id"))
    ]
    users = _user_rows(_grouped(rows, "user_id"), names)
    total = sum((row.totals for row in days), Totals())
    estimated = rows.aggregate(n=Sum("estimated_calls"))["n"] or 0
    return UsageReport(
        guild=guild,
        start=start,
        end=end,
        days=days,
        personas=personas,
        users=users,
        kinds=kinds,
        models=models,
        channels=channels,
        total=total,
        budgets=budget_states(guild=guild, now=now or timezone.now()),
        estimated_calls=int(estimated),
    )


def _grouped(rows: QuerySet[UsageDay], *keys: str) -> list[dict]:
    return list(rows.values(*keys).order_by().annotate(**{n: Sum(n) for n in _SUMMED}))


def _sorted(grouped: Iterable[dict]) -> list[tuple[dict, Totals]]:
    """Rows with their totals, the most tokens first."""
    pairs = [(row, Totals.of(row)) for row in grouped]
    return sorted(pairs, key=lambda pair: (-pair[1].tokens, -pair[1].calls))


def _user_rows(grouped: list[dict], names: NameBook) -> list[Row]:
    """Users by name; nobody's calls (background work) in a row of their own; every user with
    full privacy merged into one anonymous row (no id, no name)."""
    names.prefetch_users(r["user_id"] for r in grouped if r["user_id"] not in (NOBODY, ANONYMOUS))
    named: list[Row] = []
    hidden = Totals()
    for row, totals in _sorted(grouped):
        user_id = row["user_id"]
        if user_id == NOBODY:
            named.append(Row(None, "(no one: background work and the planner)", totals))
            continue
        if user_id == ANONYMOUS or names.user(user_id).hidden:
            hidden = hidden + totals
        else:
            named.append(Row(user_id, names.user(user_id).text, totals))
    if hidden.calls:
        named.append(Row(None, f"({FULL_PRIVACY_LABEL}: everyone, together)", hidden))
    return sorted(named, key=lambda row: (-row.totals.tokens, -row.totals.calls))


def budget_states(*, guild: GuildConfig, now: dt.datetime) -> list[BudgetState]:
    """Each budget of the guild and of its personas that have one: its limit, what it used in
    the current day or month, what calls in flight hold, and when it renews."""
    zone = ZoneInfo(guild.timezone)
    periods = spend_periods(now, zone)
    scopes: list[tuple[str, int, BudgetLimits]] = [
        ("guild", 0, guild_limits_from_stored(stored=guild.limits).budget)
    ]
    scopes += [
        (p.name, p.id, budget_from_stored(stored=p.limits))
        for p in Persona.objects.filter(guild=guild).exclude(limits=None).order_by("name")
    ]
    scopes = [s for s in scopes if s[2].limited]
    if not scopes:
        return []
    counters = {
        (c.persona_id, c.period): c
        for c in SpendCounter.objects.filter(
            Q(period=SpendCounter.Period.DAY, starts_on=periods.day)
            | Q(period=SpendCounter.Period.MONTH, starts_on=periods.month),
            guild_id=guild.guild_id,
            persona_id__in=[owner for _, owner, _ in scopes],
        )
    }
    live = SpendReservation.objects.filter(guild_id=guild.guild_id, expires_at__gt=now)
    held = {
        owner: (int(tokens or 0), Decimal(int(pico or 0)) / PICO)
        for owner, tokens, pico in live.values("persona_id")
        .order_by()
        .annotate(tokens=Sum("tokens"), pico=Sum("usd_pico"))
        .values_list("persona_id", "tokens", "pico")
    }
    states = []
    for scope, owner, limits in scopes:
        if owner:
            reserved_tokens, reserved_usd = held.get(owner, (0, Decimal(0)))
        else:
            reserved_tokens = sum(t for t, _ in held.values())
            reserved_usd = sum((u for _, u in held.values()), Decimal(0))
        if limits.tokens_per_day is not None:
            day = counters.get((owner, SpendCounter.Period.DAY))
            states.append(
                BudgetState(
                    scope,
                    BudgetKind.TOKENS_PER_DAY,
                    Decimal(limits.tokens_per_day),
                    Decimal(day.tokens if day else 0),
                    Decimal(reserved_tokens),
                    periods.day_renews_at,
                )
            )
        if limits.usd_per_month is not None:
            month = counters.get((owner, SpendCounter.Period.MONTH))
            states.append(
                BudgetState(
                    scope,
                    BudgetKind.USD_PER_MONTH,
                    limits.usd_per_month,
                    Decimal(month.usd_pico if month else 0) / PICO,
                    reserved_usd,
                    periods.month_renews_at,
                )
            )
    return states


@dataclass(frozen=True)
class GuildTotal:
    """One guild's totals over a range, for the operators' cross-guild view; ``url`` its usage
    page."""

    guild_id: int
    name: str
    totals: Totals
    url: str = ""


def all_guilds_usage(*, start: dt.date, end: dt.date) -> list[GuildTotal]:
    """Every guild's totals over ``start``..``end`` (each in its own time zone's days), the
    most tokens first: one aggregate over the guilds' daily counters."""
    rows = (
        SpendCounter.objects.filter(
            persona_id=0, period=SpendCounter.Period.DAY, starts_on__gte=start, starts_on__lte=end
        )
        .values("guild_id")
        .order_by()
        .annotate(**{n: Sum(n) for n in _SUMMED})
    )
    totals = [(row["guild_id"], Totals.of(row)) for row in rows]
    totals.sort(key=lambda pair: (-pair[1].tokens, pair[0]))
    ids = [guild_id for guild_id, _ in totals]
    # Every guild's name in two reads (what Discord calls it, else its configuration's name),
    # not one per guild.
    shown = dict(GuildConfig.objects.filter(guild_id__in=ids).values_list("guild_id", "name"))
    shown |= dict(
        DiscordName.objects.filter(kind=DiscordName.Kind.GUILD, discord_id__in=ids).values_list(
            "discord_id", "name"
        )
    )
    page = reverse("dashboard:usage", args=[0]).replace("/0/", "/{}/")  # one reversal, not 1,000
    return [
        GuildTotal(guild_id, shown.get(guild_id, str(guild_id)), t, page.format(guild_id))
        for guild_id, t in totals
    ]


def unpriced_models(*, start: dt.date, end: dt.date) -> list[tuple[str, int]]:
    """Models called over the range with no cost known (no price, no reported cost), and how
    many such calls: what the operator's price table misses."""
    rows = (
        UsageDay.objects.filter(day__gte=start, day__lte=end, unpriced_calls__gt=0)
        .values("model")
        .order_by()
        .annotate(n=Sum("unpriced_calls"))
        .order_by("-n", "model")
    )
    return [(row["model"], int(row["n"])) for row in rows]


def usage_csv_rows(
    *, guild: GuildConfig, start: dt.date, end: dt.date, names: NameBook
) -> Iterator[list[object]]:
    """The guild's rollups over the range, one line each (header first), for a spreadsheet:
    users by name, everyone with full privacy as one anonymous name."""
    yield [
        "date",
        "channel",
        "persona",
        "user",
        "kind",
        "model",
        "calls",
        "prompt_tokens",
        "cached_prompt_tokens",
        "completion_tokens",
        "usd",
        "unpriced_calls",
        "estimated_calls",
    ]
    rows = UsageDay.objects.filter(guild_id=guild.guild_id, day__gte=start, day__lte=end).order_by(
        "day", "channel_id", "persona_name", "user_id", "kind", "model"
    )
    names.prefetch_users({r.user_id for r in rows if r.user_id not in (NOBODY, ANONYMOUS)})
    for row in rows:
        if row.user_id == NOBODY:
            user = ""
        elif row.user_id == ANONYMOUS:
            user = FULL_PRIVACY_LABEL
        else:
            shown = names.user(row.user_id)
            user = FULL_PRIVACY_LABEL if shown.hidden else shown.text
        usd = Totals(calls=row.calls, usd_pico=row.usd_pico, unpriced_calls=row.unpriced_calls).usd
        yield [
            row.day.isoformat(),
            names.channel(row.channel_id).text if row.channel_id else "",
            row.persona_name,
            user,
            row.kind,
            row.model,
            row.calls,
            row.prompt_tokens,
            row.cached_prompt_tokens,
            row.completion_tokens,
            format_usd(usd) if usd is not None else "",
            row.unpriced_calls,
            row.estimated_calls,
        ]
