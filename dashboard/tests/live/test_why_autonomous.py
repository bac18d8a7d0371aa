""" "Why (not)?" in an autonomous channel, from the planner steps the worker records."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import EventQueue, PlannerStep, Turn
from chat.tests.e2e.conftest import AUTONOMOUS, GENERAL, eventually
from dashboard.tests.live.conftest import make_client

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _action(**fields) -> Reply:
    return Reply(json.dumps(fields))


async def test_each_persona_says_what_the_planner_did_with_the_message(dashboard_on_world):
    world = dashboard_on_world
    world.llm.enqueue(
        _action(action="read_unread_messages"),
        _action(action="send_message", persona="Anon"),
        Reply("hi there!"),
    )
    await world.start_worker()
    message = world.say("is anybody here?", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    steps = await sync_to_async(list)(PlannerStep.objects.order_by("iteration"))
    # A delivered send ends the loop (seed 003).
    assert [s.action["action"] for s in steps] == ["read_unread_messages", "send_message"]
    turn = await sync_to_async(Turn.objects.get)()

    client = await sync_to_async(make_client)("mo", moderator=True)
    html = (await sync_to_async(client.get)(f"/why/?message={message['id']}")).content.decode()
    assert "1 of 2 personas replied." in html
    assert "Replied (planner step 2: send_message)." in html
    assert f'href="/turns/{turn.pk}/"' in html
    assert "The planner did not choose Tomori." in html
    assert "2. send_message as Anon (Anon: replied)" in html

    page = (await sync_to_async(client.get)(f"/channels/{AUTONOMOUS}/")).content.decode()
    assert "send_message</strong> as Anon" in page


def _forget_events() -> None:
    """What the queue keeps of a consumed message: its key alone (its event is dropped)."""
    EventQueue.objects.update(event={})


async def test_once_only_the_key_is_kept_the_message_is_read_from_discord(dashboard_on_world):
    world = dashboard_on_world
    await world.start_worker()
    message = world.say("anon, say something")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()
    await sync_to_async(_forget_events)()

    client = await sync_to_async(make_client)("mo", moderator=True)
    html = (await sync_to_async(client.get)(f"/why/?message={message['id']}")).content.decode()
    assert "1 of 2 personas replied." in html
    assert "Replied (trigger_word (anon))." in html
    assert "No trigger rule fired" in html  # Tomori, judged on the message read over REST
