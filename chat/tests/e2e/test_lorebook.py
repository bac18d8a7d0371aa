"""Lorebooks through the real worker on the sandbox: a key word brings its entry into the
model's request, the turn record says which entry fired on which key, and a guild's book is
shared by its personas."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

TOMORI_BOOK = {
    "name": "Poetry club",
    "scan_depth": 2,
    "entries": [
        {
            "id": 1,
            "keys": ["haiku"],
            "content": "{char} once won a haiku contest with a poem about rain.",
        },
        {
            "id": 2,
            "keys": ["/rooftops?/i"],
            "content": "The club meets on the school rooftop.",
            "position": "at_depth",
            "depth": 0,
            "role": "system",
        },
        {"id": 3, "keys": [], "constant": True, "content": "Tomori keeps a notebook."},
    ],
}
GUILD_BOOK = {"entries": [{"keys": ["café"], "content": "The café opens at nine."}]}


def _store_books(**book) -> None:
    rows_update(Persona.objects.filter(name="Tomori"), lorebook={**TOMORI_BOOK, **book})
    rows_update(GuildConfig.objects.all(), lorebook=GUILD_BOOK)


def _turns() -> list[Turn]:
    return list(Turn.objects.order_by("id"))


def _contents(body: dict) -> list[str]:
    return [str(message["content"]) for message in body["messages"]]


async def test_a_key_word_brings_its_entry_into_the_models_request(world):
    await sync_to_async(_store_books)()
    await world.start_worker()

    world.say("tomori, could you write a haiku about the café?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    system = body["messages"][0]["content"]
    assert system.startswith("Tomori keeps a notebook.\n\nYou are Tomori")  # constant: before_char
    contents = _contents(body)
    assert "[System: Tomori once won a haiku contest with a poem about rain.]" in contents
    assert "[System: The café opens at nine.]" in contents
    assert "[System: The club meets on the school rooftop.]" not in contents

    [turn] = await sync_to_async(_turns)()
    fired = {(hit["uid"], hit["key"]) for hit in turn.lorebook["inserted"]}
    assert fired == {("1", "haiku"), ("3", None), ("#0", "café")}
    assert {hit["book"] for hit in turn.lorebook["inserted"]} == {
        "Poetry club",
        "the guild's lorebook",
    }
    lore_items = [item for item in turn.context_items if item["tag"] == "lorebook"]
    assert len(lore_items) == 3


async def test_an_entry_fires_only_while_its_key_is_within_the_scan_depth(world):
    # Depth 1: the trigger's entry alone (the persona's reply, which quotes the key, and
    # Bob's first message are older).
    await sync_to_async(_store_books)(scan_depth=1)
    await world.start_worker()

    world.say("tomori, let's meet on the Rooftop", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 1)
    await world.settle()
    world.say("it is windy", author=BOB)
    world.say("tomori, what do you think?", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    first, second = world.llm.chat_bodies
    # Depth 0: after the newest message, as a note.
    contents = _contents(first)
    lore = contents.index("[System: The club meets on the school rooftop.]")
    trigger = next(i for i, text in enumerate(contents) if "meet on the Rooftop" in text)
    assert lore > trigger
    assert "[System: The club meets on the school rooftop.]" not in _contents(second)
    turns = await sync_to_async(_turns)()
    assert [hit["key"] for hit in turns[0].lorebook["inserted"] if hit["uid"] == "2"] == [
        "/rooftops?/i"
    ]
