"""An admin has a persona greet a channel from the dashboard: posted as that persona on the
sandbox (the bot account for the main persona, its webhook for another), recorded as a turn, and
read by the persona's next turn as its own line."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from chat.models import MessageIndex, Turn
from chat.tests.e2e.conftest import BOB, DEMO_BOT_ID, GENERAL, eventually
from dashboard.tests.live.conftest import make_client
from personas.models import ConfigChange, GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

GREETING = "The lamp is lit. Sit, if you like."


def _greet(client, persona_name: str, text: str):
    persona = Persona.objects.get(name=persona_name)
    guild = GuildConfig.objects.get()
    return client.post(
        reverse("dashboard:persona_greet", args=[guild.guild_id, persona.pk]),
        {"channel_id": str(GENERAL), "text": text},
    )


async def test_a_persona_greets_a_channel_and_remembers_it_as_its_own_line(dashboard_on_world):
    world = dashboard_on_world
    admin = await sync_to_async(make_client)("ad", staff=True)

    response = await sync_to_async(_greet)(admin, "Tomori", GREETING)

    [turn] = await sync_to_async(list)(Turn.objects.all())
    assert response.status_code == 302 and response["Location"] == f"/turns/{turn.pk}/"
    assert (turn.reason, turn.status, turn.persona_name) == ("greeting", "replied", "Tomori")
    assert turn.reason_detail == {"by": "ad"}
    [posted] = world.bot_messages(GENERAL)
    assert posted["content"] == GREETING and int(posted["author"]["id"]) == DEMO_BOT_ID
    assert turn.delivered_message_ids == [posted["id"]]
    index = await sync_to_async(MessageIndex.objects.get)(message_id=int(posted["id"]))
    assert index.persona_id == turn.persona_id
    change = await sync_to_async(ConfigChange.objects.get)(kind="greeting")
    assert (change.action, change.object_label, change.actor_name) == ("posted", "Tomori", "ad")
    assert {"field": "greeting", "before": None, "after": GREETING} in change.changes
    assert {"field": "channel", "before": None, "after": str(GENERAL)} in change.changes

    await world.start_worker()
    world.say("tomori, thank you", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()
    [body] = world.llm.chat_bodies
    own = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
    assert any(c.startswith("Tomori: [ref_") and c.endswith(GREETING) for c in own), own


async def test_another_persona_greets_through_its_webhook(dashboard_on_world):
    world = dashboard_on_world
    admin = await sync_to_async(make_client)("ad", staff=True)

    await sync_to_async(_greet)(admin, "Anon", "Hiii! Anon is here!")

    [posted] = world.bot_messages(GENERAL)
    assert posted.get("webhook_id") and posted["author"]["username"] == "Anon"


async def test_a_blank_greeting_is_refused_and_nothing_is_posted(dashboard_on_world):
    world = dashboard_on_world
    admin = await sync_to_async(make_client)("ad", staff=True)

    response = await sync_to_async(_greet)(admin, "Tomori", "   ")

    assert response.status_code == 302
    assert not await sync_to_async(Turn.objects.exists)()
    assert world.bot_messages(GENERAL) == []


async def test_the_page_offers_the_first_message_and_posts_an_alternate(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(Persona.objects.filter(name="Tomori").update)(
        first_mes="...hello.", alternate_greetings=["Oh. You came back."]
    )
    admin = await sync_to_async(make_client)("ad", staff=True)
    persona = await sync_to_async(Persona.objects.get)(name="Tomori")
    guild = await sync_to_async(GuildConfig.objects.get)()
    page = await sync_to_async(admin.get)(
        reverse("dashboard:persona", args=[guild.guild_id, persona.pk])
    )
    html = page.content.decode()
    assert ">...hello.</textarea>" in html and "Post this alternate greeting" in html

    await sync_to_async(admin.post)(
        reverse("dashboard:persona_greet", args=[guild.guild_id, persona.pk]),
        {"channel_id": str(GENERAL), "text": "...hello.", "greeting": "Oh. You came back."},
    )

    [posted] = world.bot_messages(GENERAL)
    assert posted["content"] == "Oh. You came back."
