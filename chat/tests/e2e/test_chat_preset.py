"""A SillyTavern Chat Completion preset reorders a persona's prompt through the real worker on
the sandbox: its main prompt, the character's definitions, the chat, its post-history
instructions last, an in-chat prompt at its depth; a guild's preset serves its personas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

PRESET = json.loads((Path(__file__).parents[1] / "fixtures" / "st_chat_preset.json").read_text())


async def test_a_guild_preset_reorders_the_prompt_the_model_gets(world):
    await sync_to_async(GuildConfig.objects.update)(chat_preset=PRESET)
    await world.start_worker()

    world.say("tomori, good evening", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    messages = body["messages"]
    system = messages[0]
    assert system["role"] == "system"
    assert system["content"].startswith("Write Tomori's next reply to Bob. It is ")
    assert "\n\nYou are Tomori, a quiet girl" in system["content"]
    assert system["content"].index("Use what you know about Tomori.") > system["content"].index(
        "You are Tomori"
    )
    trigger = next(i for i, m in enumerate(messages) if "tomori, good evening" in str(m["content"]))
    assert messages[trigger - 1] == {
        "role": "user",
        "content": "(Keep replies under three sentences.)",
    }
    post_history = [i for i, m in enumerate(messages) if m["role"] == "system" and i > 0]
    assert len(post_history) == 1 and post_history[0] > trigger
    assert messages[post_history[0]]["content"].startswith("Stay in character as Tomori. Mood: ")
    [turn] = await sync_to_async(list)(Turn.objects.all())
    tags = [item["tag"] for item in turn.context_items]
    assert tags[0] == "preset_prompt" and tags[1] == "system_prompt"


async def test_a_personas_own_preset_wins_over_the_guilds(world):
    own = {
        "prompts": [
            {"identifier": "main", "content": "Persona preset first."},
            {"identifier": "chatHistory", "marker": True},
        ],
        "prompt_order": [
            {
                "character_id": 100001,
                "order": [{"identifier": "main"}, {"identifier": "chatHistory"}],
            }
        ],
    }
    await sync_to_async(GuildConfig.objects.update)(chat_preset=PRESET)
    await sync_to_async(Persona.objects.filter(name="Tomori").update)(chat_preset=own)
    await world.start_worker()

    world.say("tomori, hello", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    assert body["messages"][0] == {"role": "system", "content": "Persona preset first."}
    assert not any("You are Tomori" in str(m["content"]) for m in body["messages"])
