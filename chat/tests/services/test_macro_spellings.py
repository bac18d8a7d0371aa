"""SillyTavern's macro spellings in what an admin types reach the model resolved, through a
real turn (fake Discord, the fake model over HTTP)."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.services.turns import turn_run
from chat.tests.conftest import CHANNEL, NOW, Bench
from chat.tests.factories import message
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)


def _configure(persona: Persona) -> None:
    persona.system_prompt = "You are {{char}}, talking with <USER>. {{char}} = <BOT>."
    persona.sample_dialogue = [
        {"role": "user", "content": "{{user}}: do you play?"},
        {"role": "assistant", "content": "<BOT>: bass, {{User}}."},
    ]
    persona.context_note = "Be kind to {{user}}."
    persona.context_note_depth = 0
    persona.save()


async def test_card_macro_spellings_reach_the_model_as_names(bench: Bench):
    await sync_to_async(_configure)(bench.tomori)
    await sync_to_async(bench.tomori.refresh_from_db)()
    trigger = bench.discord.post(
        message(
            1,
            "tomori, {{user}} is literal here",
            channel_id=CHANNEL,
            at=NOW - dt.timedelta(minutes=1),
        )
    )

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))

    assert turn.status == Turn.Status.REPLIED
    texts = [str(m["content"]) for m in bench.llm.chat_bodies[-1]["messages"]]
    prompt = "\n".join(texts)
    assert texts[0].startswith("You are Tomori, talking with Alice. Tomori = Tomori.")
    assert "Alice: do you play?" in prompt and "Tomori: bass, Alice." in prompt
    assert "Be kind to Alice." in prompt
    assert "<USER>" not in prompt and "<BOT>" not in prompt
    # A message body keeps what its author typed (seed 002, "Macro preservation").
    assert "tomori, {{user}} is literal here" in prompt
