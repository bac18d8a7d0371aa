"""The preview says which lorebook entries a turn inserts, on which key, and which it leaves
out; its rolls are the turn's own (seeded with the trigger), so a preview equals its turn."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import Turn
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from dashboard.tests.live.conftest import make_client
from personas.models import Persona

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
