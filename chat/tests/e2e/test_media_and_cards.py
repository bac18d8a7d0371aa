"""What the personas see of media and cards, through the real worker on the sandbox: an image
posted again is one picture (its bytes' hash, not its upload's URL, is its identity)."""

from __future__ import annotations

import pytest

from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import BOB, GENERAL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _image_urls(body: dict) -> list[str]:
    return [
        part["image_url"]["url"]
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


async def test_an_image_posted_again_counts_once_toward_the_image_limit(world):
    # The demo personas' model (gpt-4o-mini) takes images: the newest three messages that
    # carry a new picture show it. The cat is posted twice, each upload with its own URL.
    await world.start_worker()
    cat, dog, bird = PNG + b"cat", PNG + b"dog", PNG + b"bird"
    posted = [
        world.say("a bird", attachments=[Upload("bird.png", bird, "image/png")]),
        world.say("my cat", attachments=[Upload("cat.png", cat, "image/png")]),
        world.say("a dog", attachments=[Upload("dog.png", dog, "image/png")]),
        world.say("my cat again", attachments=[Upload("cat-again.png", cat, "image/png")]),
    ]
    first_cat, second_cat = posted[1]["attachments"][0]["url"], posted[3]["attachments"][0]["url"]
    assert first_cat.split("?")[0] != second_cat.split("?")[0]
    world.say("tomori, which one do you like?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    bird_url, dog_url = posted[0]["attachments"][0]["url"], posted[2]["attachments"][0]["url"]
    assert _image_urls(body) == [bird_url, dog_url, second_cat]
    text = _prompt_text(body)
    assert "omitted due to rendered-image limit" not in text
    assert "[System: 1 image(s) omitted here; shown again later]" in text
