"""A persona on a text-completion endpoint holds a conversation through the real worker on the
sandbox: its prompt is the dialogue in its instruct template (``POST /v1/completions``), its
replies end at the next speaker's label, and its own lines come back as its turns."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.pipeline.tokens import default_token_counter
from chat.pipeline.truncation import context_budget
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
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


PLAIN = {
    "name": "plain",
    "input_suffix": "\n",
    "output_suffix": "\n",
    "system_suffix": "\n",
}
"""An instruct preset that marks no turn: one line per message."""


@pytest.mark.parametrize(
    ("template", "context_window", "chat_removed", "oldest_shown"),
    [
        # llama3's headers around every message (about 30 tokens a line, counted as text):
        # the chat items fit the budget, the prompt as sent does not.
        ("llama3", 989, 0, False),
        # No marks at all: the chat items' [ref_N] tags cost more than the prompt's lines, so
        # the chat items are cut by a stride batch, but the prompt as sent fits whole.
        (PLAIN, 767, 24, True),
    ],
    ids=["llama3", "plain"],
)
async def test_a_completion_prompt_is_counted_as_sent_and_fitted_to_the_budget(
    world, template, context_window, chat_removed, oldest_shown
):
    """The prompt's whole text is counted with the tokenizer, the template's sequences
    included, and the oldest history goes in stride batches until it fits; the chat items'
    own truncation does not decide it."""
    await Persona.objects.filter(name="Tomori").aupdate(
        llm_api="completions",
        instruct_template=template,
        context_window=context_window,
        max_output_tokens=100,
    )
    budget = context_budget(context_window, 100)
    for n in range(40):  # alternating authors: no merging, forty entries
        world.say(f"line {n}: the rehearsal runs late", author=BOB if n % 2 else ALICE)
    await world.start_worker()

    world.say("tomori, are you still awake?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.completion_bodies
    turn = await Turn.objects.aget()
    assert turn.truncation["removed_entries"] == chat_removed
    assert default_token_counter().count(body["prompt"]) <= budget
    assert "tomori, are you still awake?" in body["prompt"]
    assert ("line 0:" in body["prompt"]) is oldest_shown
    assert "line 39:" in body["prompt"]
    assert turn.request["prompt"] == body["prompt"]
