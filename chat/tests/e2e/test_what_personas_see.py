"""What the personas see, through the real worker on the sandbox: images by the model's
capabilities, their own past after a restart, threads, privacy, co-responders."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _set_persona(name: str, **fields) -> None:
    Persona.objects.filter(name=name).update(**fields)


def _turns() -> list[Turn]:
    return list(Turn.objects.order_by("id"))


def _image_parts(body: dict) -> list[dict]:
    return [
        part
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def _prompt_text(body: dict) -> str:
    texts = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            texts += [part["text"] for part in content if part.get("type") == "text"]
        else:
            texts.append(str(content))
    return "\n".join(texts)


async def test_a_vision_model_gets_the_newest_three_images_as_image_parts(world):
    # The demo personas name no model: LLM_MODEL's default, gpt-4o-mini, takes images.
    await world.start_worker()
    posted = [
        world.say(f"picture {n}", attachments=[Upload(f"p{n}.png", PNG + bytes([n]), "image/png")])
        for n in range(4)
    ]
    world.say("tomori, which one do you like?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    parts = _image_parts(body)
    newest_three = [message["attachments"][0]["url"] for message in posted[1:]]
    assert [part["image_url"]["url"] for part in parts] == newest_three
    assert all(set(part) == {"type", "image_url"} for part in parts)
    shown = [m for m in body["messages"] if isinstance(m["content"], list)]
    assert all(m["content"][0]["type"] == "text" for m in shown)
    text = _prompt_text(body)
    assert "1 image(s) omitted due to rendered-image limit" in text
    assert "cannot be shown to you" not in text


async def test_a_blind_model_gets_a_notice_and_asks_the_vision_model(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="llama3:8b")
    world.llm.enqueue(
        Reply.calling("analyze_image", {"media_id": "media_1"}),
        Reply("a red square"),  # the vision model's answer
        Reply("It is a red square."),
    )
    await world.start_worker(vision_model="llava:13b")
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    first, vision, second = world.llm.chat_bodies
    assert first["model"] == "llama3:8b"
    assert _image_parts(first) == []
    assert "[System: you cannot see media_1 directly; call analyze_image with media_1.]" in (
        _prompt_text(first)
    )
    assert [tool["function"]["name"] for tool in first["tools"]] == ["analyze_image"]
    assert vision["model"] == "llava:13b"
    assert len(_image_parts(vision)) == 1
    assert "a red square" in str(second["messages"])
    [turn] = await sync_to_async(_turns)()
    assert (turn.status, turn.reply_text) == ("replied", "It is a red square.")


async def test_without_a_vision_model_a_blind_model_is_told_the_image_cannot_be_shown(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="llama3:8b")
    await world.start_worker()
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    assert "[System: media_1 cannot be shown to you.]" in _prompt_text(body)
    assert "tools" not in body


async def test_the_persona_setting_overrides_the_capability_by_name(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="my-local-model", llm_vision=True)
    await world.start_worker()
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    assert len(_image_parts(body)) == 1
