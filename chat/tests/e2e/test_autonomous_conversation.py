"""Autonomous channels that are cheap and remember: a reply in two model calls, a conversation
kept across planner loops, the channel by name, and every planner step on record."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import PlannerStep, Turn
from chat.pipeline.types import Author, HistoryMessage
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.services.event_queue import event_ingest_many
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, BOB, eventually
from personas.models import Block, GuildConfig, UserPrivacy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RAW_ID = re.compile(r"\d{15,}")
CAROL = DEMO_USER_IDS["carol"]


def action(**fields) -> Reply:
    return Reply(json.dumps(fields))


def planner_requests(world) -> list[dict]:
    return [
        body
        for body in world.llm.chat_bodies
        if "You decide what happens next" in body["messages"][0]["content"]
    ]


def queued_while_down(world, payload: dict) -> None:
    """What the gateway ingress had written for ``payload`` before the worker went down: the
    worker resumes it at start (the burst is then all in the unread pool at once)."""
    author = payload["author"]
    message = HistoryMessage(
        id=int(payload["id"]),
        channel_id=int(payload["channel_id"]),
        author=Author(
            id=int(author["id"]), display_name=author["global_name"] or author["username"]
        ),
        content=payload["content"],
        created_at=dt.datetime.fromisoformat(payload["timestamp"]),
    )
    event_ingest_many(batch=[(message, DEMO_GUILD_ID)])


async def burst(world, *lines: tuple[int, str]) -> None:
    for author, content in lines:
        payload = world.say(content, channel_id=AUTONOMOUS, author=author)
        await sync_to_async(queued_while_down)(world, payload)


async def test_a_burst_gets_a_reply_in_two_model_calls(world):
    await burst(
        world,
        (ALICE, "who is coming on Saturday?"),
        (BOB, "I am, with the drums"),
        (ALICE, "tomori, are you?"),
    )
    world.llm.enqueue(
        action(action="send_message", persona="Tomori", reply_to="ref_3"),
        Reply("yes, I'll bring my notebook."),
    )
    await world.start_worker()

    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    [reply] = world.bot_messages(AUTONOMOUS)
    assert reply["content"] == "yes, I'll bring my notebook."
    assert len(world.llm.chat_bodies) == 2  # planner + persona turn, per delivered reply
    [planner] = planner_requests(world)
    incoming = planner["messages"][-1]["content"]
    assert incoming.startswith("Incoming events:\nYou have 3 unread messages.")
    for line in ("who is coming on Saturday?", "I am, with the drums", "tomori, are you?"):
        assert line in incoming
    turn = await Turn.objects.aget(status=Turn.Status.REPLIED)
    step = await PlannerStep.objects.aget(id=turn.reason_detail["planner_step_id"])
    assert step.prompt == planner["messages"]
    assert json.loads(step.decision) == {
        "action": "send_message",
        "persona": "Tomori",
        "reply_to": "ref_3",
    }
    assert (step.success, step.result, step.turn_id) == (True, "Tomori: replied", turn.id)
    assert turn.reason_detail["action"]["reply_to"] == "ref_3"


async def test_the_second_loop_still_sees_the_first_loops_conversation(world):
    world.llm.enqueue(
        action(action="send_message", persona="Anon"),
        Reply("ANON IS HERE, obviously."),
        action(action="continue"),
    )
    await world.start_worker()

    world.say("anon, the set list is ready", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()
    assert len(world.llm.chat_bodies) == 2
    world.say("see you all at six", channel_id=AUTONOMOUS, author=BOB)
    await eventually(lambda: len(planner_requests(world)) == 2)
    await world.drained()

    second = planner_requests(world)[1]["messages"]
    conversation, incoming = second[1]["content"], second[2]["content"]
    assert "anon, the set list is ready" in conversation
    assert "Anon: ANON IS HERE, obviously." in conversation
    assert "1. send_message: ok: Anon: replied" in conversation
    assert "see you all at six" in incoming and "see you all at six" not in conversation
    steps = await sync_to_async(list)(PlannerStep.objects.order_by("id"))
    assert [(s.iteration, s.action.get("action"), s.success) for s in steps] == [
        (1, "send_message", True),
        (1, "continue", True),
    ]
    assert steps[0].loop_id != steps[1].loop_id


async def test_no_planner_prompt_holds_a_raw_id_and_the_channel_is_named(world):
    world.llm.enqueue(
        action(action="read_unread_messages"),
        action(action="react", message="ref_1", emoji="👍"),
        action(action="send_message", persona="Tomori", reply_to="ref_1"),
        Reply(f"I'll look at <#{AUTONOMOUS}> later."),
        action(action="continue"),
    )
    await world.start_worker()

    world.say(f"tomori, <@{BOB}> posted in <#{AUTONOMOUS}>", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    world.say("thanks!", channel_id=AUTONOMOUS, author=BOB)
    await eventually(lambda: len(planner_requests(world)) == 4)
    await world.drained()

    prompts = planner_requests(world)
    assert len(prompts) == 4
    for body in prompts:
        assert "#autonomous" in body["messages"][0]["content"]
        for message in body["messages"]:
            assert not RAW_ID.search(message["content"]), message["content"]


async def test_full_privacy_and_users_blocked_by_every_persona_never_reach_the_planner(world):
    guild = await GuildConfig.objects.aget(guild_id=DEMO_GUILD_ID)
    await UserPrivacy.objects.acreate(guild=guild, user_id=CAROL, level="full")
    await Block.objects.acreate(guild=guild, persona=None, user_id=BOB, type="block")
    world.llm.enqueue(action(action="continue"))
    await world.start_worker()

    world.say("carol's private words", channel_id=AUTONOMOUS, author=CAROL)
    world.say("bob's blocked words", channel_id=AUTONOMOUS, author=BOB)
    world.say("alice is here", channel_id=AUTONOMOUS)
    await eventually(lambda: planner_requests(world))
    await world.drained()

    prompts = json.dumps([body["messages"] for body in planner_requests(world)])
    assert "alice is here" in prompts
    assert "private words" not in prompts and "blocked words" not in prompts


async def test_a_reset_clears_what_the_planner_remembers_of_the_channel(world):
    world.llm.enqueue(action(action="read_unread_messages"), action(action="sleep"))
    await world.start_worker()
    world.say("the password is swordfish", channel_id=AUTONOMOUS, author=BOB)
    await eventually(lambda: planner_requests(world))
    await world.drained()
    assert "swordfish" in json.dumps(planner_requests(world)[0])

    record = world.sandbox.sandbox.interactions.run(AUTONOMOUS, ALICE, "reset")  # a moderator
    await eventually(lambda: record.answered)
    world.llm.enqueue(action(action="read_unread_messages"), action(action="sleep"))
    world.say("anything new?", channel_id=AUTONOMOUS, author=BOB)

    def after_reset() -> list[str]:
        bodies = [json.dumps(b) for b in planner_requests(world)]
        return [b for b in bodies if "anything new?" in b]

    seen = await eventually(after_reset)
    await world.drained()
    assert all("swordfish" not in body for body in after_reset()), seen


async def test_a_reaction_a_stopped_worker_made_but_never_recorded_is_not_made_again(world):
    payload = world.say("what do you all think about the new song?", channel_id=AUTONOMOUS)
    message_id = int(payload["id"])
    await sync_to_async(queued_while_down)(world, payload)
    # The previous worker recorded the step and reacted, then stopped before finishing it.
    world.sandbox.sandbox.add_reaction(AUTONOMOUS, message_id, "👍", user_id=DEMO_BOT_ID)
    await PlannerStep.objects.acreate(
        channel_id=AUTONOMOUS,
        guild_id=DEMO_GUILD_ID,
        loop_id="stopped",
        iteration=1,
        action={"action": "react", "message": "ref_1", "emoji": "👍", "message_id": message_id},
    )
    world.llm.enqueue(
        action(action="send_message", persona="Tomori", reply_to="ref_1"),
        Reply("I like the bridge."),
        action(action="continue"),
    )
    await world.start_worker()

    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    conversation = planner_requests(world)[0]["messages"][1]["content"]
    assert "1. react: ok: reacted 👍 to ref_1" in conversation
    step = await PlannerStep.objects.aget(loop_id="stopped")
    assert (step.success, step.result) == (True, "reacted 👍 to ref_1")
    reactions = [r for r in world.sandbox.requests("PUT") if "/reactions/" in r.route]
    assert reactions == []
