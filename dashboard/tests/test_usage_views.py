"""The usage pages: a guild's rollups by day, persona, user, kind and model as a chart, tables,
JSON and CSV; its budgets' state; every guild's totals and the price table for operators; each
call's cost on the turn page."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone

from chat.models import DiscordName, Turn
from chat.pipeline.spend import CallCost, CallKind, CostSource, TokenUsage
from chat.services.spend import Counted, guild_site, spend_record
from dashboard.tests.submitted_form import submitted_form
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db

ALICE, HIDDEN = 1300000000000000001, 1300000000000000003  # the fixture gives HIDDEN full privacy
CHANNEL = 1200000000000000001


def record(
    guild: GuildConfig,
    *,
    persona=None,
    user_id=None,
    kind=CallKind.REPLY,
    usd="0.0001",
    prompt=100,
    cached=40,
    completion=10,
    model="gpt-4o-mini",
    days_ago=0,
) -> None:
    now = timezone.now() - dt.timedelta(days=days_ago)
    spend_record(
        site=guild_site(guild=guild, channel_id=CHANNEL, persona=persona, user_id=user_id),
        now=now,
        counted=Counted(
            kind,
            model,
            TokenUsage(prompt, cached, completion),
            CallCost(Decimal(usd) if usd is not None else None, CostSource.PRICES),
        ),
    )


@pytest.fixture
def used(guild) -> GuildConfig:
    """Alice's replies from Tomori and Anon today, a planner call, a call of someone with full
    privacy, and a call of a model without a price yesterday."""
    tomori = Persona.objects.get(name="Tomori")
    anon = Persona.objects.get(name="Anon")
    DiscordName.objects.create(kind="user", discord_id=ALICE, name="alice", guild_id=guild.guild_id)
    DiscordName.objects.create(kind="channel", discord_id=CHANNEL, name="general")
    record(guild, persona=tomori, user_id=ALICE)
    record(guild, persona=tomori, user_id=ALICE, kind=CallKind.TOOL)
    record(guild, persona=anon, user_id=ALICE)
    record(guild, kind=CallKind.PLANNER, usd="0.00002")
    record(guild, persona=tomori, user_id=HIDDEN)
    record(guild, persona=tomori, user_id=ALICE, usd=None, model="mystery-7b", days_ago=1)
    return guild


def usage_url(guild: GuildConfig, **query: str) -> str:
    url = reverse("dashboard:usage", args=[guild.guild_id])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_the_json_answers_days_personas_and_users_as_the_design_says(used, moderator_client):
    answer = moderator_client.get(usage_url(used, format="json")).json()

    today = timezone.now().astimezone(ZoneInfo(used.timezone)).date()
    assert len(answer["days"]) == 30 and answer["to"] == today.isoformat()
    [day] = [d for d in answer["days"] if d["date"] == today.isoformat()]
    assert set(day) == {
        "date",
        "calls",
        "prompt_tokens",
        "cached_prompt_tokens",
        "completion_tokens",
        "usd",
        "unpriced_calls",
    }
    assert (day["calls"], day["prompt_tokens"], day["cached_prompt_tokens"]) == (5, 500, 200)
    assert (day["completion_tokens"], Decimal(day["usd"])) == (50, Decimal("0.00042"))
    yesterday = next(d for d in answer["days"] if d["date"] == str(today - dt.timedelta(1)))
    assert (yesterday["calls"], yesterday["usd"], yesterday["unpriced_calls"]) == (1, None, 1)
    personas = {p["persona"]: p["calls"] for p in answer["personas"]}
    assert personas == {"Tomori": 4, "Anon": 1, "": 1}
    users = {u["name"]: (u["user_id"], u["calls"]) for u in answer["users"]}
    assert users["alice"] == (str(ALICE), 4)
    hidden = [name for name in users if "full privacy" in name]
    assert len(hidden) == 1 and users[hidden[0]] == (None, 1)  # one anonymous row, no id
    assert str(HIDDEN) not in moderator_client.get(usage_url(used, format="json")).content.decode()
    kinds = {k["kind"]: k["calls"] for k in answer["kinds"]}
    assert kinds == {"reply": 4, "tool": 1, "planner": 1}
    assert {m["model"]: m["unpriced_calls"] for m in answer["models"]} == {
        "gpt-4o-mini": 0,
        "mystery-7b": 1,
    }
    totals = answer["totals"]
    assert (totals["calls"], totals["unpriced_calls"], Decimal(totals["usd"])) == (
        6,
        1,
        Decimal("0.00042"),
    )


def test_the_budget_shows_spent_reserved_left_and_renewal(used, admin_client):
    answer = admin_client.get(usage_url(used, format="json")).json()

    budgets = {(b["scope"], b["budget"]): b for b in answer["budget"]}
    tokens = budgets[("guild", "tokens_per_day")]
    assert (tokens["limit"], tokens["used"], tokens["reserved"]) == (200000, 550, 0)
    assert tokens["left"] == 199450 and not tokens["spent"]
    zone = ZoneInfo("Asia/Tokyo")
    renews = dt.datetime.fromisoformat(tokens["renews_at"]).astimezone(zone)
    assert (renews.hour, renews.minute) == (0, 0)
    assert budgets[("guild", "usd_per_month")]["limit"] == "25"
    assert budgets[("Anon", "tokens_per_day")]["used"] == 110


def test_the_page_draws_the_chart_and_every_table(used, moderator_client):
    page = moderator_client.get(usage_url(used)).content.decode()

    assert page.count('<svg viewBox="0 0 720 200" role="img"') == 2
    assert 'class="uncached"' in page and 'class="cached"' in page and 'class="output"' in page
    for breakdown in ("personas", "users", "kinds", "models", "channels", "days"):
        assert f'data-breakdown="{breakdown}"' in page
    assert "alice" in page and "#general" in page
    assert "unknown" in page  # mystery-7b has no price: unknown, never $0
    assert "Change the limits" not in page  # moderators change nothing


def test_the_csv_has_one_line_per_rollup(used, admin_client):
    response = admin_client.get(usage_url(used, format="csv"))

    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 6
    assert {r["user"] for r in rows} == {"alice", "", "a user with full privacy"}
    [unpriced] = [r for r in rows if r["model"] == "mystery-7b"]
    assert (unpriced["usd"], unpriced["unpriced_calls"]) == ("", "1")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"from": "yesterday"}, "YYYY-MM-DD"),
        ({"from": "2026-05-10", "to": "2026-05-01"}, "before"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "at most 366 days"),
    ],
)
def test_a_bad_range_is_refused_saying_why(used, admin_client, query, says):
    response = admin_client.get(usage_url(used, format="json", **query))
    assert response.status_code == 400
    assert says in response.json()["error"]
    assert says in admin_client.get(usage_url(used, **query)).content.decode()


def test_a_range_of_the_past_shows_only_its_days(used, admin_client):
    yesterday = (timezone.now().astimezone(ZoneInfo(used.timezone)) - dt.timedelta(1)).date()
    answer = admin_client.get(
        usage_url(used, format="json", **{"from": str(yesterday), "to": str(yesterday)})
    ).json()
    assert [d["calls"] for d in answer["days"]] == [1]
    assert answer["totals"]["usd"] is None  # its only call had no price


def test_the_operators_page_counts_a_guild_whose_day_began_before_utcs(admin_client, guild):
    """Rollups are dated in each guild's time zone: a guild at UTC+14 has been on tomorrow's
    date since 10:00 UTC, and its calls of today are in the default range all the same."""
    ahead = GuildConfig.objects.create(
        guild_id=1100000000000000778, name="Line Islands", timezone="Pacific/Kiritimati"
    )
    record(ahead, usd="2")

    page = admin_client.get(reverse("dashboard:usage_all")).content.decode()

    row = page.split("Line Islands")[1].split("</tr>")[0]
    assert "<td>1</td>" in row and "$2" in row


def test_operators_see_every_guild_and_the_price_table(used, admin_client, moderator_client):
    other = GuildConfig.objects.create(guild_id=1100000000000000777, name="Elsewhere")
    record(other, usd="1")

    page = admin_client.get(reverse("dashboard:usage_all")).content.decode()

    assert "Hoshimi Lounge" in page and "Elsewhere" in page
    total = page.split('id="all-guilds-total"')[1].split("</tr>")[0]
    assert "<td>7</td>" in total and "$1.00042" in total  # both guilds' calls and known cost
    assert "gpt-4o-mini" in page and "0.075" in page  # the fixture's prices
    assert "<code>mystery-7b</code>: 1 calls" in page
    assert moderator_client.get(reverse("dashboard:usage_all")).status_code == 403


def test_the_turn_page_shows_each_calls_cost(guild, moderator_client):
    turn = Turn.objects.create(
        guild_id=guild.guild_id,
        channel_id=CHANNEL,
        persona_name="Tomori",
        reason="mention",
        attempts=[
            {
                "model": "gpt-4o-mini",
                "outcome": "server_error",
                "tool_round": 0,
                "latency_ms": 3,
                "usage": {"prompt_tokens": None},
            },
            {
                "model": "gpt-4o-mini",
                "outcome": "ok",
                "tool_round": 0,
                "latency_ms": 5,
                "kind": "reply",
                "usd": "0.000123000000",
                "cost_source": "prices",
                "estimated": False,
                "usage": {
                    "prompt_tokens": 700,
                    "cached_prompt_tokens": 200,
                    "completion_tokens": 30,
                },
            },
            {
                "model": "llava",
                "outcome": "ok",
                "tool_round": 1,
                "latency_ms": 9,
                "kind": "vision",
                "usd": None,
                "estimated": True,
                "usage": {"prompt_tokens": None},
            },
        ],
    )

    page = moderator_client.get(reverse("dashboard:turn", args=[turn.id])).content.decode()

    rows = page.split('<tr class="attempt">')[1:]
    assert "Nothing was counted" in rows[0]
    assert "$0.000123" in rows[1] and "700 / 200 / 30" in rows[1]
    assert "unknown" in rows[2] and "(estimated)" in rows[2] and "vision" in rows[2]


def test_an_admin_changes_the_limits_on_the_guild_page_and_bad_values_are_refused(
    guild, admin_client, moderator_client
):
    url = reverse("dashboard:guild", args=[guild.guild_id])
    posted = submitted_form(admin_client.get(url).content.decode())
    assert posted["limits_tokens_per_day"] == ["200000"]

    for field, value, says in [
        ("limits_tokens_per_day", "-5", "greater than or equal to 0"),
        ("limits_usd_per_month", "lots", "valid decimal"),
        ("limits_user_turns_per_seconds", "", "limits.user_turns.per_seconds: is required"),
    ]:
        response = admin_client.post(url, {**posted, field: [value]})
        page = response.content.decode()
        assert response.status_code == 400, field
        assert says in page, (field, page[page.find("errorlist") : page.find("errorlist") + 300])
        guild.refresh_from_db()
        assert guild.limits["tokens_per_day"] == 200000  # nothing saved

    response = admin_client.post(url, {**posted, "limits_tokens_per_day": ["300000"]})
    assert response.status_code == 302
    guild.refresh_from_db()
    assert guild.limits["tokens_per_day"] == 300000
    assert guild.limits["user_turns"] == {"count": 5, "per_seconds": 60}
    shown = moderator_client.get(url).content.decode()
    assert "Tokens a day: 300000" in shown and "Triggers per user: 5" in shown
