"""Spend and rate limits through the real worker (DESIGN §3b): a guild's day of tokens spent
refuses the next trigger with one notice and the later ones with 💤, across a restart, while
another guild goes on; a user past ``user_turns`` gets ⏳; the usage JSON adds up what the model
reported; the autonomous planner pauses at a spent budget and resumes when an admin raises it."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from prometheus_client import REGISTRY

from chat.llm.fake_server import Reply
from chat.models import PlannerStep, Turn, UsageDay
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, BOB, GENERAL, eventually
from dashboard.tests.submitted_form import submitted_form
from personas.config_version import config_version_bump
from personas.models import GuildConfig, ModelPrice
from personas.services import config_import

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROMPT, OUTPUT = 100, 20
"""What the fake model reports for every answer here: 120 tokens a call."""
OTHER_GUILD = 1191168914227200500
OTHER_CHANNEL = 1191168914227200510


def answer(text: str, **usage: object) -> Reply:
    counts = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT, **usage}
    return Reply(text, **counts)


async def limit(guild_id: int = DEMO_GUILD_ID, **limits: object) -> None:
    """Set a guild's limits as an admin's save stores them (before the worker starts)."""
    stored = {"tokens_per_day": None, "usd_per_month": None, "user_turns": None, "notice": ""}
    await GuildConfig.objects.filter(guild_id=guild_id).aupdate(limits={**stored, **limits})
    await sync_to_async(config_version_bump)(guild_id)


def reacted(world, channel_id: int, message: dict, emoji: str) -> bool:
    users = world.sandbox.sandbox.reaction_users(channel_id, int(message["id"]), emoji)
    return any(int(user["id"]) == DEMO_BOT_ID for user in users)


async def add_other_guild(world) -> None:
    """A second guild, with its own Tomori, in the sandbox and the configuration."""
    sandbox = world.sandbox.sandbox
    sandbox.add_guild("Elsewhere", guild_id=OTHER_GUILD)
    sandbox.add_text_channel(OTHER_GUILD, "lobby", channel_id=OTHER_CHANNEL)
    sandbox.add_member(OTHER_GUILD, ALICE)
    document = {
        "version": 1,
        "guilds": [
            {
                "id": str(OTHER_GUILD),
                "name": "Elsewhere",
                "personas": [{"name": "Tomori", "main": True, "triggers": ["tomori"]}],
                "limits": {"tokens_per_day": 240},
            }
        ],
    }
    await sync_to_async(config_import)(data=document)


def sample(name: str, **labels: str) -> float:
    """The worker's (this process's) Prometheus series ``name`` now."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_spent_day_refuses_with_one_notice_then_rests_and_holds_after_a_restart(world):
    refusals = sample("personabot_budget_refusals_total", limit="tokens_per_day")
    await add_other_guild(world)
    await limit(tokens_per_day=2 * (PROMPT + OUTPUT))
    world.llm.enqueue(answer("first answer"), answer("second answer"))
    await world.start_worker()

    for n in (1, 2):  # two calls fit the day's tokens
        world.say(f"tomori, question {n}")
        await eventually(lambda n=n: len(world.bot_messages(GENERAL)) == n)
        await world.drained()
    third = world.say("tomori, question 3")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()
    fourth = world.say("tomori, question 4")
    await world.drained()

    assert len(world.llm.chat_bodies) == 2  # the third and fourth called nothing
    notice = world.bot_messages(GENERAL)[2]
    assert notice["content"].startswith("(Tomori is resting: this server's model budget is spent")
    assert "renews at" in notice["content"] and "UTC" in notice["content"]
    assert notice["message_reference"]["message_id"] == third["id"]
    assert len(world.bot_messages(GENERAL)) == 3  # the fourth got no notice…
    assert reacted(world, GENERAL, fourth, "💤")  # …only the reaction
    assert not reacted(world, GENERAL, third, "💤")
    refused = [t async for t in Turn.objects.filter(status=Turn.Status.REFUSED).order_by("id")]
    assert [t.trigger_message_id for t in refused] == [int(third["id"]), int(fourth["id"])]
    assert "budget of 240 tokens a day is spent (240 used)" in refused[0].error
    assert (refused[0].reason_detail["notice"], refused[1].reason_detail["notice"]) == (
        True,
        False,
    )
    assert sample("personabot_budget_refusals_total", limit="tokens_per_day") - refusals == 2
    why = await sync_to_async(why_json)(third["id"])
    [tomori] = [a for a in why["answers"] if a["persona"] == "Tomori"]
    assert not tomori["replied"]
    assert tomori["why"].startswith("No model was asked: a limit said no: the guild's budget")

    # Another guild's budget is its own.
    world.llm.enqueue(answer("elsewhere answer"))
    world.say("tomori, are you there?", channel_id=OTHER_CHANNEL)
    await eventually(lambda: world.bot_messages(OTHER_CHANNEL))
    await world.drained()
    assert world.bot_messages(OTHER_CHANNEL)[0]["content"] == "elsewhere answer"

    # The budget holds across a worker restart.
    await world.stop_worker()
    await world.start_worker()
    fifth = world.say("tomori, question 5")
    await eventually(lambda: reacted(world, GENERAL, fifth, "💤"))
    await world.drained()
    assert len(world.llm.chat_bodies) == 3
    assert len(world.bot_messages(GENERAL)) == 3


async def test_a_users_fifth_trigger_in_the_window_calls_nothing_and_another_user_is_answered(
    world,
):
    refusals = sample("personabot_budget_refusals_total", limit="user_turns")
    await limit(user_turns={"count": 4, "per_seconds": 600})
    world.llm.enqueue(*[answer(f"answer {n}") for n in range(1, 6)])
    await world.start_worker()

    for n in range(1, 5):
        world.say(f"tomori, question {n}")
        await eventually(lambda n=n: len(world.bot_messages(GENERAL)) == n)
        await world.drained()
    fifth = world.say("tomori, question 5")
    await eventually(lambda: reacted(world, GENERAL, fifth, "⏳"))
    await world.drained()

    assert len(world.llm.chat_bodies) == 4
    assert len(world.bot_messages(GENERAL)) == 4
    turn = await Turn.objects.aget(trigger_message_id=int(fifth["id"]))
    assert turn.status == Turn.Status.REFUSED
    assert "this user's 4 triggers every 600 s are used up" in turn.error
    assert turn.reason_detail["limit"] == "user_turns"
    assert sample("personabot_budget_refusals_total", limit="user_turns") - refusals == 1

    world.say("tomori, and me?", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 5)
    await world.drained()
    assert world.bot_messages(GENERAL)[4]["content"] == "answer 5"


def why_json(message_id: str) -> dict:
    """The why page's answer for a message, as a moderator asks it."""
    staff, _ = User.objects.get_or_create(username="operator", defaults={"is_staff": True})
    client = Client()
    client.force_login(staff)
    response = client.get(reverse("dashboard:why") + f"?message={message_id}&format=json")
    assert response.status_code == 200
    return response.json()


def usage_json(guild_id: int) -> dict:
    staff, _ = User.objects.get_or_create(username="operator", defaults={"is_staff": True})
    client = Client()
    client.force_login(staff)
    response = client.get(reverse("dashboard:usage", args=[guild_id]) + "?format=json")
    assert response.status_code == 200
    return response.json()


async def test_the_usage_json_adds_up_what_the_model_reported_and_prices_it(world):
    model = "gpt-4o-mini"
    await ModelPrice.objects.acreate(model=model, input="0.15", cached_input="0.075", output="0.6")
    counted = sample("personabot_model_cost_usd_total", model=model)
    world.llm.enqueue(
        answer("one", prompt_tokens=1200, cached_prompt_tokens=800, completion_tokens=40),
        answer("two", prompt_tokens=900, cached_prompt_tokens=0, completion_tokens=75),
        answer("three", prompt_tokens=3000, cached_prompt_tokens=2900, completion_tokens=5),
        answer("four (a provider that reports its cost)", cost=0.0125),
    )
    await world.start_worker()
    for n, (author, channel) in enumerate(
        [(ALICE, GENERAL), (BOB, GENERAL), (ALICE, GENERAL), (BOB, GENERAL)], start=1
    ):
        world.say(f"tomori, number {n}", author=author, channel_id=channel)
        await eventually(lambda n=n: len(world.bot_messages(GENERAL)) == n)
        await world.drained()

    usage = await sync_to_async(usage_json)(DEMO_GUILD_ID)

    reported = world.llm.reported_usage
    assert len(reported) == 4 and {body["model"] for body in world.llm.chat_bodies} == {model}
    totals = usage["totals"]
    assert totals["calls"] == 4
    assert totals["prompt_tokens"] == sum(u["prompt_tokens"] for u in reported)
    assert totals["completion_tokens"] == sum(u["completion_tokens"] for u in reported)
    assert totals["cached_prompt_tokens"] == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in reported
    )
    price = {"input": Decimal("0.15"), "cached": Decimal("0.075"), "output": Decimal("0.6")}

    def cost(u: dict) -> Decimal:
        if "cost" in u:
            return Decimal(str(u["cost"]))
        cached = u["prompt_tokens_details"]["cached_tokens"]
        uncached = u["prompt_tokens"] - cached
        return (
            uncached * price["input"]
            + cached * price["cached"]
            + u["completion_tokens"] * price["output"]
        ) / 1_000_000

    assert Decimal(totals["usd"]) == sum(cost(u) for u in reported)
    [today] = [day for day in usage["days"] if day["calls"]]
    assert Decimal(today["usd"]) == Decimal(totals["usd"])
    users = {u["user_id"]: u["calls"] for u in usage["users"]}
    assert users == {str(ALICE): 2, str(BOB): 2}
    assert [(p["persona"], p["calls"]) for p in usage["personas"]] == [("Tomori", 4)]
    # Each call's cost is on its turn too.
    turns = [t async for t in Turn.objects.order_by("id")]
    assert [Decimal(t.attempts[0]["usd"]) for t in turns] == [cost(u) for u in reported]
    assert turns[3].attempts[0]["cost_source"] == "provider"
    added = sample("personabot_model_cost_usd_total", model=model) - counted
    assert abs(Decimal(str(added)) - Decimal(totals["usd"])) < Decimal("1e-9")


def raise_limit(guild_id: int, tokens_per_day: int) -> None:
    """An admin raises the guild's tokens a day on its page, the form otherwise unchanged."""
    admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True})
    client = Client()
    client.force_login(admin)
    url = reverse("dashboard:guild", args=[guild_id])
    posted = submitted_form(client.get(url).content.decode())
    posted["limits_tokens_per_day"] = [str(tokens_per_day)]
    response = client.post(url, posted)
    assert response.status_code == 302, response.content.decode()[:2000]


def send(persona: str) -> Reply:
    return answer(json.dumps({"action": "send_message", "persona": persona}))


async def test_the_planner_pauses_at_a_spent_budget_and_resumes_when_an_admin_raises_it(world):
    await limit(tokens_per_day=2 * (PROMPT + OUTPUT))
    world.llm.enqueue(send("Tomori"), answer("hello from the lounge"))
    await world.start_worker()

    world.say("anyone here?", channel_id=AUTONOMOUS)  # the planner, then Tomori: 240 tokens
    await eventually(lambda: len(world.bot_messages(AUTONOMOUS)) == 1)
    await world.drained()
    paused = world.say("hello?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.bot_messages(AUTONOMOUS)) == 2)
    await world.drained()
    world.say("still there?", channel_id=AUTONOMOUS)
    await world.drained()

    assert len(world.llm.chat_bodies) == 2  # paused: no planner call since
    notice = world.bot_messages(AUTONOMOUS)[1]
    assert "model budget is spent" in notice["content"]
    assert notice["message_reference"]["message_id"] == paused["id"]
    assert len(world.bot_messages(AUTONOMOUS)) == 2  # one notice only
    steps = [s async for s in PlannerStep.objects.filter(channel_id=AUTONOMOUS).order_by("id")]
    assert [s.action.get("action") for s in steps[-2:]] == ["paused", "paused"]
    assert "budget of 240 tokens a day is spent" in steps[-1].result

    await sync_to_async(raise_limit)(DEMO_GUILD_ID, 100_000)
    world.llm.enqueue(send("Tomori"), answer("back again"))
    world.say("and now?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.bot_messages(AUTONOMOUS)) == 3)
    await world.drained()

    assert world.bot_messages(AUTONOMOUS)[2]["content"] == "back again"
    assert len(world.llm.chat_bodies) == 4
    planner = await UsageDay.objects.aget(guild_id=DEMO_GUILD_ID, kind="planner")
    assert planner.calls == 2  # the paused steps asked no model
