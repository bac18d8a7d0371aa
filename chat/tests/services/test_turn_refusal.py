"""Turns a limit refused, on the real database with the fake Discord and the fake model: a spent
budget's first trigger in a channel gets the notice (the guild's text or the default), the later
ones 💤, again a notice once a model was called there since; a user past ``user_turns`` gets ⏳;
memory extraction waits while the budget is spent. No model is asked for any of them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.pipeline.spend import CallCost, CallKind, TokenUsage
from chat.services.memory_extraction import last_extracted_message_id, memories_extract
from chat.services.spend import Counted, guild_site, spend_record
from chat.services.turns import turn_run
from chat.tests.conftest import CHANNEL, GUILD_ID, NOW, Bench
from chat.tests.factories import ALICE, BOB, message
from personas.models import DeliveryMode, GuildConfig

pytestmark = pytest.mark.django_db(transaction=True)


async def limit(**limits: object) -> GuildConfig:
    guild = await GuildConfig.objects.aget(guild_id=GUILD_ID)
    guild.limits = {"tokens_per_day": None, "usd_per_month": None, "user_turns": None, "notice": ""}
    guild.limits.update(limits)
    await guild.asave()
    return guild


async def spend(tokens: int) -> None:
    guild = await GuildConfig.objects.aget(guild_id=GUILD_ID)
    await sync_to_async(spend_record)(
        site=guild_site(guild=guild, channel_id=CHANNEL),
        now=timezone.now(),
        counted=Counted(CallKind.REPLY, "m", TokenUsage(tokens), CallCost(Decimal(0))),
    )


async def trigger(bench: Bench, n: int, *, author=ALICE) -> Turn:
    posted = bench.discord.post(message(n, f"tomori, question {n}", author=author))
    return await turn_run(runtime=bench.runtime, request=await bench.request(posted, bench.tomori))


@pytest.mark.parametrize("mode", [DeliveryMode.WHOLE, DeliveryMode.PARAGRAPHS])
async def test_a_spent_budget_sends_one_notice_then_rests_until_a_model_is_called(
    bench: Bench, mode: DeliveryMode
):
    bench.tomori.delivery_mode = mode
    await limit(tokens_per_day=1000)
    await spend(1000)

    first, second = await trigger(bench, 1), await trigger(bench, 2)

    assert (first.status, second.status) == (Turn.Status.REFUSED, Turn.Status.REFUSED)
    assert bench.llm.chat_bodies == []
    [(speaker, text, reply_to, _)] = bench.discord.delivered
    assert speaker.is_main and reply_to == first.trigger_message_id
    assert text.startswith("(Tomori is resting: this server's model budget is spent. It renews at")
    assert bench.discord.reactions == [(CHANNEL, second.trigger_message_id, "💤")]
    assert first.error.startswith("a limit said no: the guild's budget of 1,000 tokens a day")
    assert (first.reason_detail["notice"], second.reason_detail["notice"]) == (True, False)

    # An admin raises the limit: a turn calls the model; spent again, the notice is due again.
    await limit(tokens_per_day=1050)
    bench.llm.enqueue(Reply("Here.", prompt_tokens=100, completion_tokens=10))
    assert (await trigger(bench, 3)).status == Turn.Status.REPLIED
    fourth = await trigger(bench, 4)
    assert fourth.status == Turn.Status.REFUSED and fourth.reason_detail["notice"]
    assert len(bench.llm.chat_bodies) == 1


async def test_the_guilds_own_notice_names_the_persona_and_the_renewal(bench: Bench):
    await limit(
        tokens_per_day=10, notice="{persona} rests; the budget renews {renews}. Ask the admins."
    )
    await spend(10)

    await trigger(bench, 1)

    [(_, text, _, _)] = bench.discord.delivered
    renews = (timezone.now() + dt.timedelta(days=1)).strftime("%Y-%m-%d")
    assert text == f"Tomori rests; the budget renews at {renews} 00:00 UTC. Ask the admins."


async def test_a_user_past_their_turns_gets_a_reaction_and_another_user_a_reply(bench: Bench):
    await limit(user_turns={"count": 1, "per_seconds": 3600})
    bench.llm.enqueue(Reply("One."), Reply("Two."))

    answered, waiting = await trigger(bench, 1), await trigger(bench, 2)
    other = await trigger(bench, 3, author=BOB)

    assert [t.status for t in (answered, waiting, other)] == ["replied", "refused", "replied"]
    assert bench.discord.reactions == [(CHANNEL, waiting.trigger_message_id, "⏳")]
    assert "this user's 1 triggers every 3600 s are used up" in waiting.error
    assert len(bench.llm.chat_bodies) == 2


async def test_memory_extraction_waits_while_the_budget_is_spent(bench: Bench):
    for n in range(1, 5):
        bench.discord.post(
            message(n, f"I like tea number {n}", author=ALICE, at=NOW - dt.timedelta(minutes=9))
        )
    await limit(tokens_per_day=50)
    await spend(50)

    result = await memories_extract(runtime=bench.runtime, channel_id=CHANNEL, guild_id=GUILD_ID)

    assert (result.status, result.turn_id) == ("waiting", None)
    assert result.detail.startswith("the guild's budget of 50 tokens a day is spent")
    assert bench.llm.chat_bodies == []
    # A refused extraction read nothing: the next one starts where the last real one did.
    await Turn.objects.acreate(
        channel_id=CHANNEL,
        persona_name="Tomori",
        reason="extraction",
        status=Turn.Status.REFUSED,
        reason_detail={"window_newest_message_id": "999"},
    )
    assert await sync_to_async(last_extracted_message_id)(channel_id=CHANNEL) == 0
