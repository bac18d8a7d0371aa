"""The spend store: calls settled into counters and rollups exactly, reservations judged under
the counters' lock, a user's triggers in their window, the price book, and the meter that counts
what a provider did not report."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.base import ChatRequest, Completion, ModelSpec, Usage
from chat.llm.metering import SpendRefused
from chat.models import SpendCounter, SpendReservation, UsageDay, UserTurnWindow
from chat.pipeline.spend import (
    BudgetLimits,
    CallCost,
    CallKind,
    CostSource,
    TokenUsage,
    UserTurnsLimit,
    Verdict,
)
from chat.services.spend import (
    RESERVATION_TTL,
    Counted,
    PriceBook,
    Spend,
    SpendSite,
    reservations_prune,
    spend_record,
    spend_state,
    user_turn_take,
)
from personas.models import ModelPrice

pytestmark = pytest.mark.django_db(transaction=True)

GUILD = 1100000000000000001
NOW = dt.datetime(2026, 5, 3, 12, 0, tzinfo=dt.UTC)
UTC = ZoneInfo("UTC")


@pytest.fixture(autouse=True)
async def _close_thread_connections():
    """The services' database work ran on sync_to_async's thread: close its connection there,
    so the test database can be flushed and dropped."""
    yield
    await sync_to_async(connections.close_all)()


def site(
    tokens_per_day=None, usd_per_month=None, *, persona_budget=None, user_turns=None, **fields
) -> SpendSite:
    return SpendSite(
        guild_id=GUILD,
        zone=fields.pop("zone", UTC),
        channel_id=fields.pop("channel_id", 5),
        persona_id=fields.pop("persona_id", 7),
        persona_name=fields.pop("persona_name", "Tomori"),
        user_id=fields.pop("user_id", 42),
        guild_budget=BudgetLimits(
            tokens_per_day=tokens_per_day,
            usd_per_month=Decimal(usd_per_month) if usd_per_month else None,
        ),
        persona_budget=persona_budget or BudgetLimits(),
        user_turns=user_turns,
    )


def counted(prompt=100, cached=40, completion=20, usd="0.000123", kind=CallKind.REPLY):
    return Counted(
        kind=kind,
        model="gpt-4o-mini",
        tokens=TokenUsage(prompt, cached, completion),
        cost=CallCost(Decimal(usd) if usd is not None else None, CostSource.PRICES),
    )


def counter(period: str, persona_id: int = 0) -> SpendCounter:
    return SpendCounter.objects.get(guild_id=GUILD, persona_id=persona_id, period=period)


def test_settled_calls_add_up_exactly_in_counters_and_rollups():
    for _ in range(3):
        spend_record(site=site(), now=NOW, counted=counted())
    spend_record(site=site(), now=NOW, counted=counted(usd=None))

    day, month = counter("day"), counter("month")
    assert (day.starts_on, month.starts_on) == (dt.date(2026, 5, 3), dt.date(2026, 5, 1))
    for row in (day, month, counter("day", 7), counter("month", 7)):
        assert (row.calls, row.prompt_tokens, row.cached_prompt_tokens) == (4, 400, 160)
        assert (row.completion_tokens, row.usd_pico, row.unpriced_calls) == (80, 369 * 10**6, 1)
    [rollup] = UsageDay.objects.all()
    assert (rollup.channel_id, rollup.persona_name, rollup.user_id) == (5, "Tomori", 42)
    assert (rollup.kind, rollup.model, rollup.calls) == ("reply", "gpt-4o-mini", 4)
    assert rollup.usd_pico == 369_000_000  # $0.000369, exactly
    assert rollup.unpriced_calls == 1


def test_a_call_counts_in_its_guilds_day_not_utcs():
    paris = site(zone=ZoneInfo("Pacific/Kiritimati"))  # UTC+14: already May 4th
    spend_record(site=paris, now=NOW, counted=counted())
    assert UsageDay.objects.get().day == dt.date(2026, 5, 4)


def test_kinds_users_and_channels_are_rows_of_their_own():
    spend_record(site=site(), now=NOW, counted=counted())
    spend_record(site=site(user_id=43), now=NOW, counted=counted())
    spend_record(site=site(channel_id=6), now=NOW, counted=counted())
    spend_record(
        site=site(persona_id=0, persona_name="", user_id=0),
        now=NOW,
        counted=counted(kind=CallKind.PLANNER),
    )
    assert UsageDay.objects.count() == 4
    assert counter("day").calls == 4
    assert counter("day", 7).calls == 3  # the planner's call is the guild's only


async def reserve(meter, text="hello", *, admitted=False, max_output=50):
    return await meter.reserve(
        request_of(text, max_output=max_output), kind=CallKind.REPLY, admitted=admitted
    )


async def record(prompt: int, completion: int = 0, **site_fields) -> None:
    await sync_to_async(spend_record)(
        site=site(**site_fields),
        now=NOW,
        counted=counted(prompt=prompt, cached=0, completion=completion),
    )


async def test_a_spent_budget_refuses_a_first_call_and_names_itself():
    await record(900, 100)
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site(tokens_per_day=1000))

    with pytest.raises(SpendRefused) as refused:
        await reserve(meter)
    await spend.settled()

    assert refused.value.refusal.reason == (
        "the guild's budget of 1,000 tokens a day is spent (1,000 used); "
        "it renews at 2026-05-04 00:00 UTC"
    )
    assert refused.value.refusal.renews_at == dt.datetime(2026, 5, 4, tzinfo=dt.UTC)
    assert not await SpendReservation.objects.aexists()


async def test_calls_in_flight_make_the_next_wait_until_they_settle():
    spend = Spend(clock=lambda: NOW, wait_poll_s=0.01, max_wait_s=0.05)
    first = await reserve(spend.meter(site(tokens_per_day=1000)), max_output=999)
    await spend.settled()
    assert await SpendReservation.objects.acount() == 1  # the page's "reserved"

    with pytest.raises(SpendRefused) as held:  # 1 + 999 held of 1,000: it waited, then gave up
        await reserve(spend.meter(site(tokens_per_day=1000)))
    assert "is held by calls in flight (0 used, 1,000 reserved)" in held.value.refusal.reason

    await spend.meter(site(tokens_per_day=1000)).settle(
        first, completion=Completion("hi", usage=Usage(10, 5, 0)), received="hi"
    )
    await spend.settled()
    await reserve(spend.meter(site(tokens_per_day=1000)))  # 15 used: room again
    assert await sync_to_async(lambda: counter("day").tokens)() == 15


async def test_a_call_of_a_turn_let_in_is_never_refused():
    await record(5000)
    meter = Spend(clock=lambda: NOW).meter(site(tokens_per_day=10))
    await reserve(meter, admitted=True)


async def test_a_personas_budget_refuses_it_alone():
    tight = BudgetLimits(tokens_per_day=100)
    await record(120, persona_budget=tight)
    spend = Spend(clock=lambda: NOW)

    with pytest.raises(SpendRefused) as refused:
        await reserve(spend.meter(site(persona_budget=tight)))
    await reserve(spend.meter(site(persona_id=8, persona_name="Anon", persona_budget=tight)))

    assert refused.value.refusal.reason.startswith("Tomori's budget of 100 tokens a day")


def test_a_monthly_dollar_budget_counts_the_whole_month():
    for day in (1, 2, 3):
        spend_record(site=site(), now=NOW.replace(day=day), counted=counted(usd="4.00"))
    assert spend_state(site=site(usd_per_month="12"), now=NOW).verdict is Verdict.REFUSE
    assert spend_state(site=site(usd_per_month="12.01"), now=NOW).verdict is Verdict.ALLOW
    next_month = NOW.replace(month=6, day=1)
    assert spend_state(site=site(usd_per_month="12"), now=next_month).verdict is Verdict.ALLOW


def test_a_lapsed_reservation_is_pruned_and_a_live_one_kept():
    for n, expires_at in enumerate((NOW - dt.timedelta(seconds=1), NOW + RESERVATION_TTL)):
        SpendReservation.objects.create(
            ticket=f"t{n}",
            holder="h",
            guild_id=GUILD,
            day=NOW.date(),
            month=NOW.date(),
            tokens=5,
            expires_at=expires_at,
        )
    assert reservations_prune(now=NOW) == 1
    assert list(SpendReservation.objects.values_list("ticket", flat=True)) == ["t1"]


def test_a_users_fifth_trigger_is_refused_and_another_user_is_not():
    limit = UserTurnsLimit(count=4, per_seconds=60)
    now = NOW.timestamp()
    for message_id in range(1, 5):
        assert user_turn_take(
            guild_id=GUILD, user_id=42, message_id=message_id, now=now, limit=limit
        ).allowed
    fifth = user_turn_take(guild_id=GUILD, user_id=42, message_id=5, now=now + 1, limit=limit)
    other = user_turn_take(guild_id=GUILD, user_id=43, message_id=6, now=now + 1, limit=limit)

    assert not fifth.allowed and other.allowed
    assert len(UserTurnWindow.objects.get(user_id=42).slots) == 4
    assert user_turn_take(
        guild_id=GUILD, user_id=42, message_id=5, now=now + 61, limit=limit
    ).allowed


def test_the_price_book_reads_a_changed_price():
    book = PriceBook()
    assert book.price("gpt-4o-mini") is None
    ModelPrice.objects.create(model="gpt-4o-mini", input="0.15", cached_input="0.075", output="0.6")
    assert book.price("gpt-4o-mini").output == Decimal("0.6")
    ModelPrice.objects.filter(model="gpt-4o-mini").delete()
    assert book.price("gpt-4o-mini") is None


async def test_a_due_price_check_never_keeps_a_call_waiting():
    """Past its recheck interval, the book starts one check on a spend thread and the call is
    priced with the table as last read; the change applies to the calls after the check."""
    spend = Spend(prices=PriceBook(recheck_s=0), clock=lambda: NOW)
    assert await spend.price("gpt-4o-mini") is None  # the book's first read is waited for
    await ModelPrice.objects.acreate(model="gpt-4o-mini", input="1", output="2")

    assert await spend.price("gpt-4o-mini") is None  # as last read: the check runs beside it
    await spend.close()  # waits for the check
    assert spend.prices.cached("gpt-4o-mini").output == Decimal("2")


def request_of(text: str, max_output: int = 50) -> ChatRequest:
    return ChatRequest(
        model=ModelSpec("gpt-4o-mini", max_output_tokens=max_output),
        messages=[{"role": "user", "content": text}],
    )


async def test_the_meter_counts_what_the_provider_reported_and_prices_it():
    await ModelPrice.objects.acreate(model="gpt-4o-mini", input="1", cached_input="0.5", output="2")
    reported = Usage(prompt_tokens=1000, completion_tokens=100, cached_prompt_tokens=400)
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site())
    ticket = await meter.reserve(request_of("hello"), kind=CallKind.REPLY, admitted=False)
    charge = await meter.settle(ticket, completion=Completion("hi", usage=reported), received="hi")
    await spend.settled()

    assert charge.usd == Decimal("0.001000000000")  # 600 × 1 + 400 × 0.5 + 100 × 2, per million
    assert charge.source is CostSource.PRICES and not charge.tokens.estimated
    assert (await UsageDay.objects.aget()).usd_pico == 10**9


async def test_a_reported_cost_wins_over_the_price_table():
    await ModelPrice.objects.acreate(model="gpt-4o-mini", input="1", output="2")
    meter = Spend(clock=lambda: NOW).meter(site())
    ticket = await meter.reserve(request_of("hello"), kind=CallKind.REPLY, admitted=False)
    reported = Usage(prompt_tokens=10, completion_tokens=1, cost=Decimal("0.25"))

    charge = await meter.settle(ticket, completion=Completion("hi", usage=reported), received="hi")

    assert (charge.usd, charge.source) == (Decimal("0.25"), CostSource.PROVIDER)


async def test_a_call_without_reported_usage_is_counted_by_the_tokenizer_and_marked():
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site())
    request = request_of("the quick brown fox jumps over the lazy dog")
    ticket = await meter.reserve(request, kind=CallKind.REPLY, admitted=False)

    charge = await meter.settle(ticket, completion=Completion("a short answer"), received="")
    await spend.settled()

    counter = spend.token_counter
    assert charge.tokens.estimated
    assert charge.tokens.prompt_tokens == counter.count(request.messages[0]["content"])
    assert charge.tokens.completion_tokens == counter.count("a short answer")
    assert charge.usd is None  # no price: unknown, never zero
    rollup = await UsageDay.objects.aget()
    assert (rollup.estimated_calls, rollup.unpriced_calls, rollup.usd_pico) == (1, 1, 0)


async def test_a_failed_call_releases_its_reservation_and_counts_nothing():
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site(tokens_per_day=10_000))
    ticket = await meter.reserve(request_of("hello"), kind=CallKind.REPLY, admitted=False)
    await spend.settled()
    assert await SpendReservation.objects.acount() == 1
    assert spend.ledger.held(GUILD, since=0)

    assert await meter.settle(ticket, completion=None, received="") is None
    await spend.settled()
    assert not spend.ledger.held(GUILD, since=0)
    assert not await SpendReservation.objects.aexists()
    assert not await UsageDay.objects.aexists()


@pytest.mark.parametrize("processes", [1, 2])
async def test_concurrent_first_calls_overspend_by_at_most_one_call_per_process(processes):
    """60 turns of one guild start at once in ``processes`` processes (each its own ledger):
    each first call waits its turn, uses its whole bound, settles. The guild ends within one
    call per process of its budget, and every call past it was refused."""
    limit, bound = 5_000, 300
    spends = [Spend(clock=lambda: NOW, wait_poll_s=0.005) for _ in range(processes)]
    started = refused = 0

    async def turn(n: int) -> None:
        nonlocal started, refused
        spend = spends[n % processes]
        meter = spend.meter(site(tokens_per_day=limit), prompt_tokens=bound - 1)
        try:
            ticket = await meter.reserve(
                request_of("hi", max_output=1), kind=CallKind.REPLY, admitted=False
            )
        except SpendRefused:
            refused += 1
            return
        started += 1
        await asyncio.sleep(0.01)
        usage = Usage(prompt_tokens=bound - 1, completion_tokens=1)
        await meter.settle(ticket, completion=Completion("ok", usage=usage), received="ok")

    await asyncio.gather(*(turn(n) for n in range(60)))
    for spend in spends:
        await spend.settled()

    used = await sync_to_async(lambda: counter("day").tokens)()
    assert used == started * bound
    assert limit <= used <= limit + processes * bound
    assert started + refused == 60 and refused >= 60 - (limit // bound + processes)
    assert not await SpendReservation.objects.aexists()


async def test_a_first_call_counts_its_trigger_unless_a_budget_keeps_it_out():
    turns = UserTurnsLimit(count=1, per_seconds=60)
    await record(100, tokens_per_day=100, user_turns=turns)
    spend = Spend(clock=lambda: NOW)

    spent = spend.meter(site(tokens_per_day=100, user_turns=turns), trigger_id=11)
    with pytest.raises(SpendRefused) as budget:
        await reserve(spent)
    await spend.settled()
    assert budget.value.refusal.limit == "budget"
    assert (await UserTurnWindow.objects.aget()).slots == []  # a refused trigger takes no slot

    await reserve(spend.meter(site(user_turns=turns), trigger_id=11))
    with pytest.raises(SpendRefused) as past:
        await reserve(spend.meter(site(user_turns=turns), trigger_id=12))
    assert past.value.refusal.limit == "user_turns"
    assert past.value.refusal.reason.startswith("this user's 1 triggers every 60 s are used up")
    await reserve(spend.meter(site(user_turns=turns), trigger_id=11))  # a co-responder's turn


async def test_an_early_admission_holds_the_first_call_at_its_own_bound_in_its_process():
    """`admit_early` judges the turn's first call on the context's whole budget while the
    prompt is built: the trigger's slot and the reservation are taken before the call asks;
    the call then waits for nothing and holds its own, smaller bound in this process; its row,
    what other processes see, keeps the larger one until it settles."""
    turns = UserTurnsLimit(count=5, per_seconds=60)
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site(tokens_per_day=100_000, user_turns=turns), trigger_id=11)

    meter.admit_early(prompt_tokens=7_000, model="gpt-4o-mini", max_output_tokens=500)
    await spend.settled()  # the admission ran on its own, before any call
    assert (await SpendReservation.objects.aget()).tokens == 7_500
    assert [slot[0] for slot in (await UserTurnWindow.objects.aget()).slots] == [11]

    meter.count_prompt(40)
    ticket = await reserve(meter, max_output=50)
    await spend.settled()
    assert ticket.hold.tokens == 90
    assert spend.ledger.held(GUILD, since=0)[7][0] == 90  # what this process judges on
    assert (await SpendReservation.objects.aget()).tokens == 7_500  # what the others see
    assert [slot[0] for slot in (await UserTurnWindow.objects.aget()).slots] == [11]


async def test_a_turn_that_asks_nothing_gives_back_its_early_admission():
    turns = UserTurnsLimit(count=1, per_seconds=60)
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site(tokens_per_day=100_000, user_turns=turns), trigger_id=11)

    meter.admit_early(prompt_tokens=7_000, model="gpt-4o-mini", max_output_tokens=500)
    meter.close()  # the turn ended before its admission did: given back once it has
    await spend.settled()

    assert not await SpendReservation.objects.aexists()
    assert (await UserTurnWindow.objects.aget()).slots == []
    assert spend.ledger.held(GUILD, since=0) == {}
    await reserve(spend.meter(site(user_turns=turns), trigger_id=12))  # the slot is free


async def test_an_early_refusal_refuses_the_first_call():
    await record(100)
    spend = Spend(clock=lambda: NOW)
    meter = spend.meter(site(tokens_per_day=100))

    meter.admit_early(prompt_tokens=7_000, model="gpt-4o-mini", max_output_tokens=500)
    await spend.settled()
    with pytest.raises(SpendRefused) as refused:
        await reserve(meter)

    assert "is spent (100 used)" in refused.value.refusal.reason
    meter.close()
    await spend.settled()
    assert not await SpendReservation.objects.aexists()


async def test_an_early_admission_waiting_for_calls_in_flight_stops_when_its_turn_ends():
    turns = UserTurnsLimit(count=5, per_seconds=60)
    spend = Spend(clock=lambda: NOW, wait_poll_s=0.01, max_wait_s=600)
    await reserve(spend.meter(site(tokens_per_day=1000)), max_output=999)  # holds the budget
    meter = spend.meter(site(tokens_per_day=1000, user_turns=turns), trigger_id=11)

    meter.admit_early(prompt_tokens=100, model="gpt-4o-mini", max_output_tokens=50)
    await asyncio.sleep(0.05)  # it judged at least once: held by the call in flight, it waits
    meter.close()
    await asyncio.wait_for(spend.settled(), timeout=10)  # not the ten minutes it may wait

    assert (await UserTurnWindow.objects.aget()).slots == []
    assert await SpendReservation.objects.acount() == 1  # the call in flight's alone
