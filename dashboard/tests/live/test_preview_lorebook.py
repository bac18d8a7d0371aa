"""The preview says which lorebook entries a turn inserts, on which key, and which it leaves
out; its rolls are the turn's own (seeded with the trigger), so a preview equals its turn. With a
SillyTavern preset it shows the prompt in the preset's order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from dashboard.tests.live.conftest import make_client
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

BOOK = {
    "token_budget": 40,
    "entries": [
        {"id": n, "keys": ["haiku"], "content": f"Haiku fact number {n}.", "probability": 50}
        for n in range(30)
    ],
}


def _replied() -> Turn | None:
    return Turn.objects.filter(status=Turn.Status.REPLIED).first()


async def test_the_preview_of_a_turns_trigger_lists_what_the_turn_inserted(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(Persona.objects.filter(name="Tomori").update)(lorebook=BOOK)
    await world.start_worker()
    posted = world.say("tomori, one haiku please", author=BOB)
    turn = await eventually(sync_to_async(_replied))
    await world.drained()
    client = await sync_to_async(make_client)("mo", moderator=True)

    response = await sync_to_async(client.get)(
        f"/channels/{GENERAL}/preview/",
        {"persona": "Tomori", "message": posted["id"], "format": "json"},
    )

    preview = response.json()["lorebook"]
    assert preview == turn.lorebook
    outcomes = {hit["outcome"] for hit in preview["left_out"]}
    assert preview["inserted"] and outcomes == {"unlucky", "over_budget"}
    assert {hit["key"] for hit in preview["inserted"]} == {"haiku"}
    sent = "\n".join(str(m["content"]) for m in world.llm.chat_bodies[-1]["messages"])
    for hit in preview["inserted"]:
        assert f"Haiku fact number {hit['uid']}." in sent
    for hit in preview["left_out"]:
        assert f"Haiku fact number {hit['uid']}." not in sent


async def test_the_preview_shows_the_prompt_in_the_presets_order(dashboard_on_world):
    preset = json.loads(
        (
            Path(__file__).parents[3] / "chat" / "tests" / "fixtures" / "st_chat_preset.json"
        ).read_text()
    )
    world = dashboard_on_world
    await sync_to_async(GuildConfig.objects.update)(chat_preset=preset)
    world.say("tomori, good evening", author=BOB)
    client = await sync_to_async(make_client)("mo", moderator=True)

    response = await sync_to_async(client.get)(
        f"/channels/{GENERAL}/preview/", {"persona": "Tomori", "format": "json"}
    )

    preview = response.json()
    assert preview["chat_preset"]["order"][:3] == ["worldInfoBefore", "main", "charDescription"]
    tags = [item["tag"] for item in preview["items"]]
    assert tags[:2] == ["preset_prompt", "system_prompt"]
    assert any(
        m["role"] == "system" and m["content"].startswith("Stay in character")
        for m in preview["request"]["messages"][1:]
    )
