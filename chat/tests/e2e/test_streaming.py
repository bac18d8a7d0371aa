"""Replies appear as they are written: the worker streams the model's reply to the sandbox
paragraph by paragraph (or by edits, or whole), within the reply cap, and a failure mid-stream
leaves the delivered pieces standing."""

from __future__ import annotations

import itertools

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Fault, FaultKind, Reply, StreamPace
from chat.models import MessageIndex, Turn
from chat.pipeline.reply_pieces import CUT_MARKER
from chat.services.reply_stream import CUT_NOTICE
from chat.tests.e2e.conftest import GENERAL, eventually
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

PARAGRAPHS = [
    "The first part says hello and sets the scene for what follows.",
    "The second part goes on a little longer with a few more words.",
    "The third part ends it.",
]
REPLY = "\n\n".join(PARAGRAPHS)
HUMAN_PACE = StreamPace(first_token_s=0.2, words_per_s=20)
SEND = ("POST", "/channels/{channel_id}/messages")
EDIT = ("PATCH", "/channels/{channel_id}/messages/{message_id}")
TYPING = ("POST", "/channels/{channel_id}/typing")
HISTORY_READ = ("GET", "/channels/{channel_id}/messages")
WEBHOOK_SEND = ("POST", "/webhooks/{webhook_id}/{webhook_token}")


async def set_delivery_mode(name: str, mode: str) -> None:
    await Persona.objects.filter(name=name).aupdate(delivery_mode=mode)


async def turn_of(trigger_id: str) -> Turn:
    return await Turn.objects.aget(trigger_message_id=int(trigger_id))


async def test_each_paragraph_goes_out_as_soon_as_it_is_written(world):
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    messages = world.bot_messages(GENERAL)
    assert [m["content"] for m in messages] == PARAGRAPHS
    assert [(m.get("message_reference") or {}).get("message_id") for m in messages] == [
        trigger,
        None,
        None,
    ]
    # The first paragraph was out while the model was still writing the rest (about 1.5 s
    # at 20 words a second), and the indicator was typing before it.
    sends = world.sandbox.requests(*SEND)[-3:]
    assert sends[2].at - sends[0].at > 0.8
    assert world.sandbox.requests(*TYPING)[0].at < sends[0].at
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.error == ""
    assert turn.delivered_message_ids == [m["id"] for m in messages]
    indexed = await sync_to_async(
        lambda: set(MessageIndex.objects.values_list("message_id", "persona__name"))
    )()
    assert {(int(m["id"]), "Tomori") for m in messages} <= indexed


async def test_a_streamed_reply_types_from_the_start_of_its_turn(world):
    """The indicator is on before the turn reads its history and builds its prompt, not only
    once the model is asked."""
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    world.say("tomori, tell me a story")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    [history_read] = world.sandbox.requests(*HISTORY_READ)  # the worker's first turn reads
    assert world.sandbox.requests(*TYPING)[0].at < history_read.at


async def test_whole_delivery_sends_the_reply_once_it_is_written(world):
    await set_delivery_mode("Tomori", "whole")
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    world.say("tomori, tell me a story")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [REPLY]


async def test_edit_delivery_edits_one_message_at_most_once_a_second(world):
    await set_delivery_mode("Tomori", "edit")
    text = " ".join(f"word{n}" for n in range(70))  # 3.5 s at 20 words a second
    world.llm.enqueue(Reply(text, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    trigger = world.say("tomori, think aloud")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    first_shown = world.bot_messages(GENERAL)[0]["content"]
    await eventually(lambda: world.bot_messages(GENERAL)[0]["content"] == text)
    await world.drained()

    [message] = world.bot_messages(GENERAL)
    assert first_shown != text and text.startswith(first_shown)  # it grew in place
    edits = [r.at for r in world.sandbox.requests(*EDIT)]
    assert len(edits) >= 3
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(edits))
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.delivered_message_ids == [message["id"]]


async def test_the_stream_is_cut_at_the_cap_and_the_model_call_cancelled(world):
    long_paragraph = " ".join(f"word{n}" for n in range(600))  # ~4,500 characters
    text = "One.\n\nTwo.\n\nThree.\n\n" + long_paragraph + "\n\nNever sent."
    world.llm.enqueue(Reply(text, pace=StreamPace(words_per_s=300)))
    await world.start_worker(stream=True)

    trigger = world.say("tomori, go on and on")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 4)
    await world.drained()

    contents = [m["content"] for m in world.bot_messages(GENERAL)]
    assert contents[:3] == ["One.", "Two.", "Three."]
    assert contents[3].endswith(" " + CUT_MARKER) and len(contents[3]) <= 2000
    assert world.llm.abandoned == [0]  # the model stopped writing
    turn = await turn_of(trigger)
    assert turn.status == "replied"
    assert any("cap of 4 messages" in warning for warning in turn.warnings)
    assert turn.attempts[-1]["outcome"] == "stopped"


async def test_a_failure_mid_stream_keeps_what_was_sent_and_says_the_reply_was_cut(world):
    # Half of the answer is written, then the connection drops: the first paragraph is out.
    world.llm.enqueue(Fault(FaultKind.CUT_STREAM, text=REPLY, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.drained()

    contents = [m["content"] for m in world.bot_messages(GENERAL)]
    assert contents == [PARAGRAPHS[0], CUT_NOTICE]
    assert len(world.llm.chat_bodies) == 1  # no retry, no fallback once something was sent
    turn = await turn_of(trigger)
    assert turn.status == "replied"
    assert turn.error.startswith("the reply was cut after 1 of its messages")
    assert turn.delivered_message_ids == [m["id"] for m in world.bot_messages(GENERAL)]


async def test_a_queued_reply_by_webhook_sends_its_notice_before_the_first_piece(world):
    world.llm.enqueue(
        Reply("Tomori: Just a moment.", pace=StreamPace(first_token_s=1.0)),
        Reply("Anon: " + REPLY, pace=HUMAN_PACE),
    )
    await world.start_worker(stream=True)

    world.say("tomori, you first")
    anon_trigger = world.say("anon, and you?")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 5)
    await world.drained()

    anon = [m for m in world.bot_messages(GENERAL) if m["author"]["username"] == "Anon"]
    assert [m["content"] for m in anon] == ["Replying to Alice…", *PARAGRAPHS]
    assert len(world.sandbox.requests(*WEBHOOK_SEND)) == 4
    turn = await turn_of(anon_trigger)
    assert turn.status == "replied"
    assert turn.delivered_message_ids == [m["id"] for m in anon]


async def test_a_webhook_persona_edits_its_own_message(world):
    await set_delivery_mode("Anon", "edit")
    text = " ".join(f"note{n}" for n in range(40))  # 2 s at 20 words a second
    world.llm.enqueue(Reply(text, pace=HUMAN_PACE))
    await world.start_worker(stream=True)

    world.say("anon, hum something")
    await eventually(lambda: world.bot_messages(GENERAL))
    await eventually(lambda: world.bot_messages(GENERAL)[0]["content"] == text)
    await world.drained()

    [message] = world.bot_messages(GENERAL)
    assert message["author"]["username"] == "Anon"
    edits = world.sandbox.requests(
        "PATCH", "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}"
    )
    assert len(edits) >= 2
