"""A persona on a text-completion endpoint holds a conversation through the real worker on the
sandbox: its prompt is the dialogue in its instruct template (``POST /v1/completions``), its
replies end at the next speaker's label, and its own lines come back as its turns."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

ASSISTANT = "<|start_header_id|>assistant<|end_header_id|>\n\n"
USER = "<|start_header_id|>user<|end_header_id|>\n\n"


def _on_completions() -> None:
    rows_update(
        Persona.objects.filter(name="Tomori"), llm_api="completions", instruct_template="llama3"
    )


async def test_a_persona_on_a_completions_endpoint_holds_a_conversation(world):
    await sync_to_async(_on_completions)()
    await world.start_worker()
    world.llm.enqueue(Reply("...the rain writes the poem.\nBob: wow"), Reply("Thank you, Bob."))

    world.say("tomori, a poem about rain?", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 1)
    await world.settle()
    world.say("tomori, that was lovely", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    assert world.llm.chat_bodies == []
    first, second = world.llm.completion_bodies
    assert first["prompt"].startswith(
        "<|start_header_id|>system<|end_header_id|>\n\nYou are Tomori"
    )
    assert f"{USER}Bob: tomori, a poem about rain?<|eot_id|>" in first["prompt"]
    assert first["prompt"].endswith(f"{ASSISTANT}Tomori:")
    assert "\nBob:" in first["stop"] and "<|eot_id|>" in first["stop"]
    # The fake server stops at "\nBob:", as a real one does: the reply is the persona's line.
    replies = [m["content"] for m in world.bot_messages(GENERAL)]
    assert replies == ["...the rain writes the poem.", "Thank you, Bob."]
    assert f"{ASSISTANT}Tomori: ...the rain writes the poem.<|eot_id|>" in second["prompt"]
    assert f"{USER}Bob: tomori, that was lovely<|eot_id|>" in second["prompt"]

    turns = await sync_to_async(list)(Turn.objects.order_by("id"))
    assert [turn.status for turn in turns] == [Turn.Status.REPLIED] * 2
    assert turns[1].request["prompt"] == second["prompt"]
