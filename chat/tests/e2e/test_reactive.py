"""Reactive channels end to end: trigger → reply, webhooks, echoes, duplicates, restarts."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from chat.llm.fake_server import Fault, FaultKind, Reply
from chat.models import MessageIndex, Turn
from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import BOB, DEMO_BOT_ID, GENERAL, eventually
from personas.models import ChannelConfig

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def turns(**filters) -> list[Turn]:
    return list(Turn.objects.filter(**filters).order_by("id"))


async def test_a_trigger_word_gets_exactly_one_reply_from_the_main_persona(world):
    await world.start_worker()
    trigger = world.say("hey tomori, how are you?")

    replies = await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert len(world.bot_messages(GENERAL)) == 1
    reply = replies[0]
    assert int(reply["author"]["id"]) == DEMO_BOT_ID
    assert reply["message_reference"]["message_id"] == trigger["id"]
    assert reply["content"] == (
        f"I am the fake model {settings.LLM_MODEL}. "
        "You said: Alice: [ref_1] hey tomori, how are you?"
    )
    [turn] = await sync_to_async(turns)()
    assert (turn.persona_name, turn.reason, turn.status) == ("Tomori", "trigger_word", "replied")
    assert turn.delivered_message_ids == [reply["id"]]
    assert turn.trigger_message_id == int(trigger["id"])
    [request] = world.llm.chat_bodies
    assert request["messages"][0] == {
        "role": "system",
        "content": "You are Tomori, a quiet girl who writes poetry. You answer briefly and kindly.",
    }
    assert {"role": "user", "content": "Alice: [ref_1] hey tomori, how are you?"} in request[
        "messages"
    ]
    assert request == turn.request


async def test_an_alter_persona_replies_through_a_webhook_and_its_echo_is_ignored(world):
    await world.start_worker()
    world.say("anon, sing something")

    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [reply] = world.bot_messages(GENERAL)
    assert reply["webhook_id"] is not None
    assert reply["author"]["username"] == "Anon"
    [turn] = await sync_to_async(turns)()
    assert turn.persona_name == "Anon" and turn.status == "replied"
    assert len(world.llm.chat_bodies) == 1  # the echo woke nobody


async def test_the_bot_never_triggers_itself(world):
    world.llm.enqueue()  # default answers
    await world.start_worker()
    world.say("tomori, please say the word tomori back to me")

    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert len(world.bot_messages(GENERAL)) == 1
    assert len(await sync_to_async(turns)()) == 1


def replies_to(world, trigger_id: str) -> list[dict]:
    return [
        m
        for m in world.bot_messages(GENERAL)
        if (m.get("message_reference") or {}).get("message_id") == trigger_id
    ]


async def test_duplicate_dispatches_and_a_resume_replay_give_one_reply_each(world):
    await world.start_worker()
    first = world.say("tomori, first question")
    await eventually(lambda: replies_to(world, first["id"]))
    await world.settle()

    world.sandbox.replay_last_dispatches(3)  # Discord sometimes sends an event twice
    world.sandbox.drop_connections()  # the client RESUMEs and the sandbox replays
    second = world.say("tomori, asked while the bot was reconnecting")
    await eventually(lambda: replies_to(world, second["id"]))
    world.sandbox.replay_last_dispatches(5)
    await world.drained()

    assert len(replies_to(world, first["id"])) == 1
    assert len(replies_to(world, second["id"])) == 1
    assert len(world.bot_messages(GENERAL)) == 2


async def test_a_busy_stretch_of_ten_turns_reads_history_over_rest_at_most_three_times(world):
    await world.start_worker()
    history_route = ("GET", "/channels/{channel_id}/messages")
    before = world.sandbox.request_counts.get(history_route, 0)

    triggers = [world.say(f"tomori, burst message {n}")["id"] for n in range(10)]
    await eventually(lambda: all(replies_to(world, t) for t in triggers), within=30)
    await world.settle()

    reads = world.sandbox.request_counts.get(history_route, 0) - before
    print(f"\nbusy stretch: 10 turns, {reads} REST history reads")
    assert reads <= 3
    assert all(len(replies_to(world, t)) == 1 for t in triggers)
    # Each queued turn's history ends at its own trigger.
    turns = await sync_to_async(turns_list)()
    assert [t.trigger_message_id for t in turns] == [int(t) for t in triggers]
    for turn, trigger in zip(turns, triggers, strict=True):
        newest = max(int(i) for item in turn.context_items for i in item["source_ids"])
        assert newest == int(trigger)


def turns_list() -> list[Turn]:
    return list(Turn.objects.order_by("id"))


async def test_a_queued_webhook_turn_sends_a_replying_to_notice_first(world):
    world.llm.enqueue(Fault(FaultKind.TIMEOUT, delay=0.5))  # the first answer comes slowly
    await world.start_worker()
    world.say("anon, first")
    await eventually(lambda: world.llm.chat_bodies)
    world.say("anon, second", author=BOB)  # waits for the first reply: a queued turn

    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    contents = [m["content"] for m in world.bot_messages(GENERAL)]
    assert contents[1] == "Replying to Bob…"
    assert len(contents) == 3  # the first reply came right below its trigger: no notice
    assert all(m["author"]["username"] == "Anon" for m in world.bot_messages(GENERAL))


async def test_a_message_posted_as_the_previous_reply_appears_gets_no_notice(world):
    """The ordinary conversation: the next message comes the moment the reply is there, in the
    same busy stretch; it did not wait, so its alter reply needs no "Replying to" notice."""
    loop = asyncio.get_running_loop()
    posted = []

    def answer_the_reply(event) -> None:
        author = event.data.get("author", {}) if event.name == "MESSAGE_CREATE" else {}
        if int(author.get("id", 0)) == DEMO_BOT_ID and not posted:
            posted.append(True)
            loop.call_soon(world.say, "anon, hi")

    world.sandbox.sandbox.subscribe(answer_the_reply)
    await world.start_worker()
    world.say("tomori, hello")

    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 2)
    await world.drained()

    contents = [m["content"] for m in world.bot_messages(GENERAL)]
    assert len(contents) == 2 and not any(c.startswith("Replying to") for c in contents)
    anon_turn = (await sync_to_async(turns)())[-1]
    assert anon_turn.persona_name == "Anon"
    assert "earlier message" not in str(anon_turn.request["messages"])


async def test_a_deleted_persona_webhook_is_recreated(world):
    await world.start_worker()
    world.say("anon, hello")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()
    [first_hook] = world.sandbox.sandbox.channel_webhooks(GENERAL)
    world.sandbox.sandbox.delete_webhook(int(first_hook["id"]))

    world.say("anon, are you still there?")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    [second_hook] = world.sandbox.sandbox.channel_webhooks(GENERAL)
    assert second_hook["id"] != first_hook["id"]
    assert world.bot_messages(GENERAL)[1]["webhook_id"] == second_hook["id"]
    assert await sync_to_async(turn_statuses)() == ["replied", "replied"]


async def test_co_responders_answer_the_same_message_without_a_replying_to_notice(world):
    await world.start_worker()
    world.say("tomori and anon, hello")
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 2)
    await world.drained()

    authors = [m["author"]["username"] for m in world.bot_messages(GENERAL)]
    assert authors == ["Tomori", "Anon"]  # both answer the same message: no queue, no notice
    anon_request = world.llm.chat_bodies[1]
    assert "earlier message" not in str(anon_request["messages"])


async def test_delivered_messages_are_indexed_as_the_personas(world):
    world.llm.enqueue(Fault(FaultKind.TIMEOUT, delay=0.5))  # Tomori answers slowly
    await world.start_worker()
    world.say("tomori, hello")
    await eventually(lambda: world.client.scheduler is not None and world.llm.chat_bodies)
    world.say("anon, and you?")  # arrives while Tomori's turn runs: a queued turn
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 3)
    await world.settle()

    authors = [m["author"]["username"] for m in world.bot_messages(GENERAL)]
    assert authors == ["Tomori", "Anon", "Anon"]  # Anon waited: a "Replying to" notice first
    assert world.bot_messages(GENERAL)[1]["content"] == "Replying to Alice…"

    rows = await sync_to_async(
        lambda: sorted(
            MessageIndex.objects.values_list("message_id", "persona__name", "webhook_id")
        )
    )()
    assert rows == sorted(
        (
            int(m["id"]),
            m["author"]["username"],
            int(m["webhook_id"]) if m.get("webhook_id") else None,
        )
        for m in world.bot_messages(GENERAL)
    )


def turn_statuses() -> list[str]:
    return list(Turn.objects.order_by("id").values_list("status", flat=True))


async def test_the_typing_indicator_shows_while_the_model_writes(world):
    await world.start_worker()
    world.say("tomori?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    assert world.sandbox.request_counts[("POST", "/channels/{channel_id}/typing")] >= 1


async def test_a_filename_with_macro_syntax_stays_literal_and_read_file_reads_it(world):
    filename = "{{if tool:read_file}}evil{{/if}}.txt"
    world.llm.enqueue(
        Reply.calling("read_file", {"media_id": "media_1"}),
        Reply("I read it."),
    )
    await world.start_worker()

    world.say("tomori, what is in this file?", attachments=[Upload(filename, b"the secret is 42")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    first, second = world.llm.chat_bodies
    prompt = "\n".join(str(m["content"]) for m in first["messages"])
    assert filename in prompt
    assert [tool["function"]["name"] for tool in first["tools"]] == ["read_file"]
    assert "the secret is 42" in str(second["messages"])
    [turn] = await sync_to_async(turns_list)()
    assert (turn.status, turn.reply_text) == ("replied", "I read it.")


async def test_the_worker_reads_its_channels_configurations_before_any_traffic(world):
    """A worker's first second of traffic costs what any other does: every configured
    channel's configuration is read at start, and the first pass of a channel reads none."""
    client = await world.start_worker()
    configurations = client.scheduler._runtime.configurations
    configured = await sync_to_async(ChannelConfig.objects.count)()
    assert configured >= 3 and configurations.reads == configured == len(configurations)

    world.say("tomori, are you there?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert configurations.reads == configured
