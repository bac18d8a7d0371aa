"""Bad input and faults: the worker logs and handles them, never dies, loses nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Fault, FaultKind, Reply
from chat.models import Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.selectors.event_queue import unread_channel_ids
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, BOB, GENERAL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def turn_statuses() -> list[str]:
    return list(Turn.objects.order_by("id").values_list("status", flat=True))


async def test_messages_in_a_guild_without_configuration_get_no_reply(world):
    sandbox = world.sandbox.sandbox
    other_guild = sandbox.add_guild("Unconfigured")
    other_channel = sandbox.add_text_channel(other_guild, "lobby")
    sandbox.add_member(other_guild, ALICE)
    await world.start_worker()

    world.say("tomori, are you here too?", channel_id=other_channel)
    trigger = world.say("tomori, and here?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert world.bot_messages(other_channel) == []
    assert [m["message_reference"]["message_id"] for m in world.bot_messages(GENERAL)] == [
        trigger["id"]
    ]
    assert await sync_to_async(unread_channel_ids)() == []


async def test_a_long_answer_is_split_into_discord_sized_messages(world):
    long_answer = "\n".join(f"Line {n}: " + "la " * 60 for n in range(40))
    world.llm.enqueue(Reply(long_answer))
    await world.start_worker()

    trigger = world.say("tomori " + "please sing " * 160)  # near Discord's 2,000 characters
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 4)
    await world.settle()

    pieces = world.bot_messages(GENERAL)
    assert len(long_answer) > 7000 and len(pieces) == 4
    assert all(len(p["content"]) <= 2000 for p in pieces)
    assert pieces[0]["message_reference"]["message_id"] == trigger["id"]
    assert " ".join(p["content"] for p in pieces).split() == long_answer.split()


async def test_macro_syntax_typed_by_users_reaches_the_model_literally(world):
    await world.start_worker()
    text = "tomori, fill in {user} and {{if tool:read_file}}this{{else}}that{{/if}} for me"

    world.say(text)
    await eventually(lambda: world.bot_messages(GENERAL))

    [request] = world.llm.chat_bodies
    assert {"role": "user", "content": f"Alice: [ref_1] {text}"} in request["messages"]


async def test_model_failures_send_one_short_notice_per_burst(world):
    world.llm.enqueue(*[Fault(FaultKind.HTTP_ERROR, status=401)] * 2)
    await world.start_worker()

    world.say("tomori, one")
    world.say("tomori, two", author=BOB)
    await eventually(lambda: len(world.llm.chat_bodies) >= 2)
    await world.settle()

    assert await sync_to_async(turn_statuses)() == ["failed", "failed"]
    [notice] = world.bot_messages(GENERAL)
    assert notice["content"] == "(Tomori could not answer just now; the model did not respond.)"

    world.say("tomori, three")  # the model answers again
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()
    assert (await sync_to_async(turn_statuses)())[-1] == "replied"


async def test_a_rate_limited_send_is_retried_and_delivered_once(world):
    await world.start_worker()
    world.sandbox.inject_fault("POST", "/channels/{channel_id}/messages", 429, retry_after=0.2)

    world.say("tomori?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert len(world.bot_messages(GENERAL)) == 1
    assert world.sandbox.request_counts[("POST", "/channels/{channel_id}/messages")] == 2
    assert await sync_to_async(turn_statuses)() == ["replied"]


async def test_a_server_error_on_a_webhook_send_is_retried(world):
    await world.start_worker()
    world.sandbox.inject_fault("POST", "/webhooks/{webhook_id}/{webhook_token}", 502)

    world.say("anon?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [reply] = world.bot_messages(GENERAL)
    assert reply["author"]["username"] == "Anon"
    assert await sync_to_async(turn_statuses)() == ["replied"]


async def test_invalid_planner_output_becomes_a_readable_result_not_a_crash(world):
    world.llm.enqueue(
        Reply("I think someone should say hi!"),
        Reply('{"action": "dance"}'),
        Reply('{"action": "continue"}'),
    )
    await world.start_worker()

    world.say("hello?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.llm.chat_bodies) >= 3)
    await world.settle()

    third = world.llm.chat_bodies[2]["messages"][1]["content"]
    assert "1. invalid: failed: your last answer was not a valid action: expected one JSON" in third
    assert (
        "2. invalid: failed: your last answer was not a valid action: not a valid action" in third
    )
    world.say("tomori, still alive?")
    await eventually(lambda: world.bot_messages(GENERAL))


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("MESSAGE_CREATE", {"id": "not-a-snowflake", "channel_id": str(GENERAL)}),
        ("MESSAGE_CREATE", {"channel_id": str(GENERAL), "content": "tomori, no author"}),
        ("MESSAGE_DELETE", {"channel_id": "x"}),
        ("SOMETHING_NEW_FROM_DISCORD", {"anything": [1, 2, 3]}),
    ],
)
async def test_malformed_or_unknown_gateway_payloads_do_not_stop_the_worker(world, name, data):
    await world.start_worker()

    world.sandbox.sandbox.dispatch_raw(name, data, guild_id=DEMO_GUILD_ID)
    trigger = world.say("tomori, are you still fine?")

    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()
    [reply] = world.bot_messages(GENERAL)
    assert reply["message_reference"]["message_id"] == trigger["id"]
