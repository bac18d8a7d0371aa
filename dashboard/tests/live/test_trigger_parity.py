"""One decision, three views: for the same messages, the worker (on the sandbox), the prompt
preview and the "why (not)?" page give the same answer to "who answers this, and why"."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.sandbox.demo import DEMO_USER_IDS
from chat.tests.e2e.conftest import ALICE, BOB, DEMO_BOT_ID, GENERAL, eventually
from chat.tests.privacy import user_privacy
from dashboard.tests.live.conftest import make_client
from personas.models import Block, Persona

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CAROL = DEMO_USER_IDS["carol"]
PERSONAS = ("Tomori", "Anon")


def _standing() -> None:
    """Alice is blocked by Tomori (and so is her proxied member, Lilya), Bob is muted for
    Anon, Carol chose full privacy."""
    tomori = Persona.objects.get(name="Tomori")
    anon = Persona.objects.get(name="Anon")
    Block.objects.create(guild=tomori.guild, persona=tomori, user_id=ALICE, type="block")
    Block.objects.create(guild=anon.guild, persona=anon, user_id=BOB, type="mute")
    user_privacy(CAROL, guild_id=tomori.guild.guild_id, level="full")


def _worker_answers(message_id: int) -> dict[str, str]:
    turns = Turn.objects.filter(trigger_message_id=message_id, status=Turn.Status.REPLIED)
    return {t.persona_name: t.reason for t in turns}


def _said_by(world, persona: str) -> list[dict]:
    """The persona's messages in #general (an alter persona speaks through a webhook)."""
    return [m for m in world.bot_messages(GENERAL) if m["author"]["username"] == persona]


async def test_the_worker_the_preview_and_the_why_page_agree(dashboard_on_world):
    world = dashboard_on_world
    sandbox = world.sandbox.sandbox
    await sync_to_async(_standing)()
    sandbox.add_proxy_member(ALICE, member_id="lilya", name="Lilya", prefix="l:")
    await world.start_worker(proxies=True)

    world.say("l: tomori and anon, it's lilya")
    proxied = await eventually(
        lambda: next((m for m in sandbox.channel_messages(GENERAL) if m.get("webhook_id")), None)
    )
    [anons_reply] = await eventually(lambda: _said_by(world, "Anon"))
    await world.drained()
    cases = {
        "proxied member of a blocked sender": (proxied, {"Anon": "trigger_word"}),
        "full-privacy author": (world.say("tomori and anon, are you there?", author=CAROL), {}),
        "blocked sender": (world.say("tomori and anon, hello"), {"Anon": "trigger_word"}),
        "muted sender": (world.say("anon and tomori, hi", author=BOB), {"Tomori": "trigger_word"}),
        "trigger word": (world.say("what is new, tomori?", author=BOB), {"Tomori": "trigger_word"}),
        "reply": (world.say("that was lovely", reply_to=int(anons_reply["id"])), {"Anon": "reply"}),
        "mention": (world.say(f"<@{DEMO_BOT_ID}> hi there", author=BOB), {"Tomori": "mention"}),
    }
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 6)
    await world.drained()
    client = await sync_to_async(make_client)("mo", moderator=True)

    for case, (message, expected) in cases.items():
        message_id = int(message["id"])
        worker = await sync_to_async(_worker_answers)(message_id)

        why = (
            await sync_to_async(client.get)("/why/", {"message": message_id, "format": "json"})
        ).json()
        why_replied = {a["persona"]: a["rule"] for a in why["answers"] if a["replied"]}
        why_decided = {
            a["persona"]: a["verdict"]["rule"] for a in why["answers"] if a["verdict"]["answers"]
        }

        previewed = {}
        for persona in PERSONAS:
            response = await sync_to_async(client.get)(
                f"/channels/{GENERAL}/preview/",
                {"persona": persona, "message": message_id, "format": "json"},
            )
            assert response.status_code == 200, (case, response.content)
            preview = response.json()
            assert preview["decision"]["message_id"] == str(message_id)
            if preview["triggered_by"]:
                previewed[persona] = preview["triggered_by"]

        assert worker == expected, case
        assert why_decided == expected, case
        assert set(why_replied) == set(expected), case
        assert previewed == expected, case


async def test_the_why_page_and_the_preview_say_why_not_in_the_same_words(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(_standing)()
    await world.start_worker()
    message = world.say("anon and tomori, hi", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()
    client = await sync_to_async(make_client)("mo", moderator=True)

    why = (
        await sync_to_async(client.get)("/why/", {"message": message["id"], "format": "json"})
    ).json()
    [anon] = [a for a in why["answers"] if a["persona"] == "Anon"]
    preview = (
        await sync_to_async(client.get)(
            f"/channels/{GENERAL}/preview/",
            {"persona": "Anon", "message": message["id"], "format": "json"},
        )
    ).json()
    assert anon["why"] == preview["decision"]["why"] == "The author is muted for Anon."
    assert preview["decision"]["answers"] == ["Tomori"]
    assert preview["triggered_by"] is None
