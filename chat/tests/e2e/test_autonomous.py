"""Autonomous channels: the planner loop of seed 003, against the sandbox and the fake model."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Fault, FaultKind, Reply, StreamPace
from chat.loop.autonomous import MAX_CAPPED_LOOPS, MAX_LOOP_ITERATIONS
from chat.models import PlannerStep, Turn, UnreadEvent
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, BOB, eventually
from personas.models import GuildConfig, Persona

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def action(**fields) -> Reply:
    return Reply(json.dumps(fields))


def planner_requests(world) -> list[dict]:
    return [
        body
        for body in world.llm.chat_bodies
        if "You decide what happens next" in body["messages"][0]["content"]
    ]


def state_of(body: dict) -> str:
    """The planner prompt after its system message: conversation, actions, incoming events."""
    return "\n".join(message["content"] for message in body["messages"][1:])


async def test_after_five_steps_a_new_loop_follows_for_the_unread_messages(world):
    world.llm.enqueue(
        *[action(action="sleep", seconds=0.01)] * MAX_LOOP_ITERATIONS,
        action(action="continue"),
    )
    await world.start_worker()

    world.say("is anyone around?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(planner_requests(world)) > MAX_LOOP_ITERATIONS)
    await world.drained()

    requests = [state_of(body) for body in planner_requests(world)]
    assert len(requests) == MAX_LOOP_ITERATIONS + 1
    assert f"This is step {MAX_LOOP_ITERATIONS} of at most {MAX_LOOP_ITERATIONS}" in requests[-2]
    assert "4. sleep: ok: slept 0.01 s" in requests[-2]
    # The cap ended the first loop; the message still unread, a new loop began at step 1.
    assert f"This is step 1 of at most {MAX_LOOP_ITERATIONS}" in requests[-1]
    assert "You have 1 unread message." in requests[-1]
    assert world.bot_messages(AUTONOMOUS) == []


async def test_new_loops_after_the_cap_are_bounded(world):
    world.llm.enqueue(
        *[action(action="sleep", seconds=0.01)] * (MAX_LOOP_ITERATIONS * MAX_CAPPED_LOOPS + 3)
    )
    await world.start_worker()

    world.say("is anyone around?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(planner_requests(world)) >= MAX_LOOP_ITERATIONS * 3)
    await world.drained()

    assert len(planner_requests(world)) == MAX_LOOP_ITERATIONS * MAX_CAPPED_LOOPS


async def test_the_planner_names_mentioned_people_and_renders_persona_prompts(world):
    prompt = f"You are {{{{char}}}}, a friend of <@{BOB}>; you cheer {{{{user}}}} up."
    await Persona.objects.filter(name="Anon").aupdate(system_prompt=prompt)
    world.llm.enqueue(action(action="continue"))
    await world.start_worker()

    world.say(f"hey <@{BOB}>, look at this", channel_id=AUTONOMOUS)
    await eventually(lambda: planner_requests(world))
    await world.drained()

    [request] = planner_requests(world)
    assert (
        "- Anon: You are Anon, a friend of @Bob; you cheer Alice up."
        in (request["messages"][0]["content"])
    )
    assert "Alice: hey @Bob, look at this" in state_of(request)
    assert "unknown-user" not in json.dumps(request)


async def test_send_aborts_when_messages_arrive_during_generation_and_reads_first(world):
    world.llm.enqueue(
        action(action="read_unread_messages"),
        action(action="send_message", persona="Anon"),
        Fault(FaultKind.TIMEOUT, delay=1.0),  # Anon's first answer, slow: Bob writes meanwhile
        action(action="read_unread_messages"),
        action(action="send_message", persona="Anon"),
        Reply("hello, both of you!"),
        action(action="continue"),
        action(action="continue"),
    )
    await world.start_worker()

    world.say("anon, are you there?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.llm.chat_bodies) >= 3)
    world.say("me too, anon", channel_id=AUTONOMOUS, author=BOB)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.settle()

    [reply] = world.bot_messages(AUTONOMOUS)
    assert reply["content"] == "hello, both of you!"
    assert reply["author"]["username"] == "Anon"
    turns = await sync_to_async(lambda: list(Turn.objects.order_by("id")))()
    assert [(t.status, t.reason) for t in turns] == [("aborted", "planner"), ("replied", "planner")]
    assert "arrived" in turns[0].error
    assert turns[1].reason_detail["action"] == {
        "action": "send_message",
        "persona": "Anon",
        "reply_to": None,
    }
    third = state_of(planner_requests(world)[2])
    assert "send_message: failed: new messages arrived while writing" in third
    assert "You have 1 unread message." in third


async def test_the_planner_can_react_to_a_message_it_read(world):
    world.llm.enqueue(
        action(action="read_unread_messages"),
        action(action="react", message="ref_1", emoji="👍"),
        action(action="continue"),
    )
    await world.start_worker()

    message = world.say("I baked bread today", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.llm.chat_bodies) >= 3)
    await world.settle()

    [stored] = [
        m for m in world.sandbox.sandbox.channel_messages(AUTONOMOUS) if m["id"] == message["id"]
    ]
    assert [(r["emoji"]["name"], r["count"]) for r in stored["reactions"]] == [("👍", 1)]
    third = state_of(planner_requests(world)[2])
    assert "2. react: ok: reacted 👍 to ref_1" in third


async def test_a_worker_taking_a_channel_over_plans_on_from_the_recorded_actions(world):
    world.llm.enqueue(
        action(action="read_unread_messages"),
        action(action="react", message="ref_1", emoji="👍"),
        action(action="continue"),
    )
    await world.start_worker()
    world.say("I baked bread today", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.llm.chat_bodies) >= 3)
    await world.settle()
    await world.stop_worker()

    world.llm.enqueue(action(action="continue"))
    await world.start_worker()  # a new process: nothing of the planner's state in memory
    world.say("and a cake", channel_id=AUTONOMOUS)
    await eventually(lambda: len(planner_requests(world)) >= 4)
    await world.settle()

    fourth = state_of(planner_requests(world)[3])
    assert "1. read_unread_messages: ok: read 1 messages" in fourth
    assert "2. react: ok: reacted 👍 to ref_1" in fourth
    assert "3. continue: ok: stopped" in fourth


async def test_the_planner_sees_a_proxied_member_and_never_the_replaced_original(world):
    world.sandbox.sandbox.add_proxy_member(ALICE, member_id="lilya", name="Lilya", prefix="l:")
    world.llm.enqueue(
        action(action="send_message", persona="Anon"),
        Reply("hi Lilya!"),
        action(action="continue"),
    )
    await world.start_worker(proxies=True)

    world.say("l: hello everyone", channel_id=AUTONOMOUS)
    await eventually(
        lambda: [m for m in world.bot_messages(AUTONOMOUS) if "hi Lilya" in m["content"]]
    )
    await world.settle()

    first = state_of(planner_requests(world)[0])
    assert "You have 1 unread message." in first
    assert "Lilya" in first and "hello everyone" in first
    assert "l: hello" not in first
    [turn] = await sync_to_async(lambda: list(Turn.objects.filter(persona_name="Anon")))()
    assert turn.status == "replied"


async def test_the_planner_asks_the_guilds_planner_model(world):
    await GuildConfig.objects.aupdate(planner_model="small-planner")
    world.llm.enqueue(action(action="send_message", persona="Tomori"), Reply("hello"))
    await world.start_worker()

    world.say("hi there", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    [planner] = planner_requests(world)[:1]
    persona_turn = world.llm.chat_bodies[1]
    assert planner["model"] == "small-planner"
    assert persona_turn["model"] != "small-planner"


async def test_a_message_arriving_mid_stream_does_not_cut_the_reply_and_is_read_next(world):
    paragraphs = ["Once upon a time, a bassist.", "She practised every night.", "The end."]
    world.llm.enqueue(
        action(action="read_unread_messages"),
        action(action="send_message", persona="Anon"),
        Reply("\n\n".join(paragraphs), pace=StreamPace(first_token_s=0.1, words_per_s=5)),
        action(action="read_unread_messages"),
        action(action="continue"),
    )
    await world.start_worker(stream=True)

    world.say("anon, tell me a story", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))  # the first paragraph is out
    world.say("wow, go on", channel_id=AUTONOMOUS, author=BOB)
    await eventually(lambda: len(world.bot_messages(AUTONOMOUS)) == 3)
    await eventually(lambda: len(planner_requests(world)) >= 4)
    await world.settle()

    assert [m["content"] for m in world.bot_messages(AUTONOMOUS)] == paragraphs
    [turn] = await sync_to_async(lambda: list(Turn.objects.filter(persona_name="Anon")))()
    assert turn.status == "replied"
    after_send = state_of(planner_requests(world)[2])
    assert "send_message: ok" in after_send
    assert "You have 1 unread message." in after_send and "wow, go on" in after_send


async def test_a_message_whose_answer_was_cut_off_by_a_stop_stays_unread(world):
    # The planner sends; the persona's model call is still running when the worker stops.
    world.llm.enqueue(
        action(action="send_message", persona="Tomori"), Fault(FaultKind.TIMEOUT, delay=30)
    )
    await world.start_worker()
    said = world.say("is anyone around?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.llm.chat_bodies) == 2)

    await world.stop_worker()

    turn = await Turn.objects.aget()
    assert turn.status == Turn.Status.ABORTED
    # The worker that runs the channel next still finds it unread, and answers it.
    assert await UnreadEvent.objects.filter(message_id=int(said["id"])).aexists()


async def steps_recorded() -> list[tuple[str, bool, str, dict]]:
    """Every planner step: (action, success, result, ignored keys), oldest first."""
    rows = PlannerStep.objects.order_by("id").values_list("action", "success", "result", "ignored")
    return [
        (a.get("action", "invalid"), ok, result, ignored) async for a, ok, result, ignored in rows
    ]


async def test_seed_003s_own_read_action_costs_no_extra_step(world):
    """``{"action": "read_unread_messages", "channelId": "…"}`` as seed 003 writes it reads
    the messages in one step; a key the action does not have is left out and recorded."""
    world.llm.enqueue(
        Reply(json.dumps({"action": "read_unread_messages", "channelId": str(AUTONOMOUS)})),
        action(action="send_message", persona="Tomori", mood="cheerful"),
    )
    await world.start_worker()

    world.say("tomori, are you there?", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    assert await steps_recorded() == [
        ("read_unread_messages", True, "read 1 messages", {}),
        ("send_message", True, "Tomori: replied", {"mood": "cheerful"}),
    ]
    assert len(planner_requests(world)) == 2


async def test_a_channel_id_naming_another_channel_is_refused_with_the_reason(world):
    world.llm.enqueue(
        Reply(json.dumps({"action": "read_unread_messages", "channelId": "general"})),
        action(action="continue"),
    )
    await world.start_worker()

    world.say("is anyone around?", channel_id=AUTONOMOUS)
    await eventually(lambda: len(planner_requests(world)) == 2)
    await world.drained()

    [(name, ok, result, _), _] = await steps_recorded()
    assert (name, ok) == ("invalid", False)
    assert "'general' is not this channel: you act only in #autonomous" in result
    assert "is not this channel" in state_of(planner_requests(world)[1])
