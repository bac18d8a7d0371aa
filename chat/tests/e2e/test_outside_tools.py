"""Tools offered exactly when the seeds say, through the real worker on the sandbox:
``process_youtube_video`` only with a transcript service (DESIGN §5), ``send_sticker`` only in
autonomous channels of a guild with stickers (seed 000's autonomous sticker tool)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import MessageIndex, Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import AUTONOMOUS, GENERAL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIDEO = "https://www.youtube.com/watch?v=dQw4w9WgXcQ"


def offered(body: dict) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def tool_results(body: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def persona_bodies(world) -> list[dict]:
    """The persona turns' requests (not the planner's)."""
    return [
        body
        for body in world.llm.chat_bodies
        if "You decide what happens next" not in str(body["messages"][0]["content"])
    ]


@pytest.mark.parametrize("configured", [False, True])
async def test_a_youtube_link_offers_the_video_tool_exactly_when_a_transcript_service_is_set(
    world, configured
):
    world.sandbox.videos["dQw4w9WgXcQ"] = {
        "title": "Never Gonna Give You Up",
        "channel": "Rick Astley",
        "duration_seconds": 213,
        "transcript": "We're no strangers to love",
    }
    if configured:
        world.llm.enqueue(
            Reply.calling("process_youtube_video", {"link": VIDEO}),
            Reply("It's a love song."),
        )
    await world.start_worker(videos=configured)
    world.say(f"tomori, what is this about? {VIDEO}")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    first = world.llm.chat_bodies[0]
    if not configured:
        assert "process_youtube_video" not in offered(first)
        assert len(world.llm.chat_bodies) == 1 and world.sandbox.video_lookups == []
        return
    assert offered(first) == ["process_youtube_video"]
    assert world.sandbox.video_lookups == ["dQw4w9WgXcQ"]
    [result] = tool_results(world.llm.chat_bodies[1])
    assert result == {
        "title": "Never Gonna Give You Up",
        "channel": "Rick Astley",
        "transcript": "We're no strangers to love",
        "duration_seconds": 213,
    }
    assert world.bot_messages(GENERAL)[-1]["content"] == "It's a love song."


async def test_an_unknown_video_comes_back_as_an_error_the_model_reads(world):
    world.llm.enqueue(
        Reply.calling("process_youtube_video", {"link": "https://youtu.be/nosuchvideo"}),
        Reply("I could not watch it."),
    )
    await world.start_worker(videos=True)
    world.say("tomori, watch https://youtu.be/nosuchvideo")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    [result] = tool_results(world.llm.chat_bodies[1])
    assert result == {
        "error": "the video could not be processed: no such video, or it has no transcript"
    }


def action(**fields) -> Reply:
    return Reply(json.dumps(fields))


async def test_in_an_autonomous_channel_the_main_persona_may_send_a_guild_sticker(world):
    sandbox = world.sandbox.sandbox
    wave = sandbox.add_guild_sticker(DEMO_GUILD_ID, "wave")
    sandbox.add_guild_sticker(DEMO_GUILD_ID, "party")
    world.llm.enqueue(
        action(action="send_message", persona="Tomori"),
        Reply.calling("send_sticker", {"name": "wave"}),
        Reply("Hi there!"),
        action(action="continue"),
    )
    await world.start_worker()
    world.say("hello everyone", channel_id=AUTONOMOUS)
    await eventually(lambda: len(world.bot_messages(AUTONOMOUS)) >= 2)
    await world.drained()

    first = persona_bodies(world)[0]
    assert offered(first) == ["send_sticker"]
    [definition] = first["tools"]
    assert definition["function"]["parameters"]["properties"]["name"]["enum"] == ["wave", "party"]
    sticker, reply = world.bot_messages(AUTONOMOUS)
    assert [item["id"] for item in sticker["sticker_items"]] == [str(wave)]
    assert reply["content"] == "Hi there!"
    assert tool_results(persona_bodies(world)[1]) == [{"sent": "wave"}]
    # The sticker is the persona's own message, as its reply is.
    [turn] = await sync_to_async(list)(Turn.objects.filter(persona_name="Tomori"))
    indexed = await MessageIndex.objects.filter(message_id=int(sticker["id"])).afirst()
    assert indexed is not None and indexed.persona_id == turn.persona_id


async def test_the_sticker_tool_is_never_offered_outside_autonomous_channels(world):
    world.sandbox.sandbox.add_guild_sticker(DEMO_GUILD_ID, "wave")
    await world.start_worker()
    world.say("tomori, send a sticker please")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert "send_sticker" not in offered(world.llm.chat_bodies[0])


async def test_without_guild_stickers_the_sticker_tool_is_not_offered(world):
    world.llm.enqueue(action(action="send_message", persona="Tomori"), Reply("Hi!"))
    await world.start_worker()
    world.say("hello everyone", channel_id=AUTONOMOUS)
    await eventually(lambda: world.bot_messages(AUTONOMOUS))
    await world.drained()

    assert "send_sticker" not in offered(persona_bodies(world)[0])
