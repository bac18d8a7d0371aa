"""The prompt preview and the real turn agree: what the preview says the model would get for
"alice says X now" is what the model gets when alice says X in the sandbox."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import ChannelWindowAnchor, Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.services.memory_store import MemoryScope, memory_add
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from dashboard.tests.live.conftest import make_client
from personas.models import Persona

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _third_reply() -> Turn | None:
    replied = Turn.objects.filter(status=Turn.Status.REPLIED).order_by("id")
    return replied[2] if replied.count() >= 3 else None


async def _preview(client, **params) -> dict:
    response = await sync_to_async(client.get)(
        f"/channels/{GENERAL}/preview/", {**params, "format": "json"}
    )
    assert response.status_code == 200, response.content
    return response.json()


async def test_the_preview_of_a_message_is_the_request_the_model_gets_for_it(dashboard_on_world):
    world = dashboard_on_world
    await world.start_worker()
    # Some history first, answered by both personas (a webhook persona's reply included).
    world.say("good morning tomori")
    world.say("anon, what do you think?")
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 2)
    await world.drained()
    client = await sync_to_async(make_client)("mo", moderator=True)
    anchors_before = await sync_to_async(list)(ChannelWindowAnchor.objects.values())
    turns_before = await sync_to_async(Turn.objects.count)()
    requests_before = len(world.llm.chat_bodies)

    preview = await _preview(client, persona="Tomori", **{"as": str(ALICE)}, text="hello tomori")

    # A dry run: no model call, no turn, no anchor change.
    assert len(world.llm.chat_bodies) == requests_before
    assert await sync_to_async(Turn.objects.count)() == turns_before
    assert await sync_to_async(list)(ChannelWindowAnchor.objects.values()) == anchors_before
    assert preview["triggered_by"] == "trigger_word"

    world.say("hello tomori")
    turn = await eventually(sync_to_async(_third_reply))
    sent = world.llm.chat_bodies[-1]
    # Nothing differs: the prompt names messages by ref_N (never by their snowflake) and the
    # preview gave the hypothetical message the sandbox member's name. Only ``stream`` and
    # ``stream_options`` may differ (properties of the worker's attempt runner, not of the
    # prompt): the test worker runs with streaming off, the preview renders the production
    # default (on).
    assert sent["messages"] == preview["request"]["messages"]
    transport = {"stream", "stream_options"}
    assert {k: v for k, v in sent.items() if k not in transport} == {
        k: v for k, v in preview["request"].items() if k not in transport
    }
    assert turn.persona_name == "Tomori"


def _shrink_tomori() -> None:
    """Tomori's budget: floor((700 − 100) × 0.9) = 540 tokens."""
    rows_update(Persona.objects.filter(name="Tomori"), context_window=700, max_output_tokens=100)


async def test_the_preview_shows_sections_budget_truncation_and_the_cache_boundary(
    dashboard_on_world,
):
    world = dashboard_on_world
    await sync_to_async(_shrink_tomori)()
    for n in range(40):  # alternating authors: no merging, forty entries
        author = ALICE if n % 2 else BOB
        world.say(f"line {n}: the rehearsal runs late again and everyone is tired", author=author)
    client = await sync_to_async(make_client)("mo", moderator=True)

    preview = await _preview(client, persona="Tomori")

    assert set(preview) >= {"request", "items", "tokens", "cache_prefix_end", "tools"}
    tokens, items = preview["tokens"], preview["items"]
    assert tokens["budget"] == 540
    assert tokens["total"] == sum(item["tokens"] for item in items) <= 540
    assert sum(tokens["by_tag"].values()) == tokens["total"]
    assert items[0]["tag"] == "system_prompt" and items[0]["role"] == "system"
    assert preview["truncation"]["removed_entries"] > 0
    assert 0 < preview["cache_prefix_end"] <= len(items)
    # The newest message is the trigger and survives; the oldest were cut.
    assert "line 39:" in preview["request"]["messages"][-2]["content"]
    assert not any("line 0:" in m["content"] for m in preview["request"]["messages"])
    left_out = {row["reason"]: row["count"] for row in preview["window"]["left_out"]}
    assert left_out["removed by truncation to fit the token budget"] > 0

    html = (
        await sync_to_async(client.get)(f"/channels/{GENERAL}/preview/", {"persona": "Tomori"})
    ).content.decode()
    assert 'id="truncation-cut"' in html and "cacheable prefix ends here" in html
    assert 'class="budget-fill"' in html and "of 540 tokens" in html


def _remember_alices_cat() -> None:
    memory_add(
        scope=MemoryScope.personal(DEMO_GUILD_ID, ALICE, name="Alice"),
        text="Alice's cat is called Miso",
        source="admin",
    )


async def test_the_preview_and_the_turn_show_the_same_recalled_memories_with_scores(
    dashboard_on_world,
):
    world = dashboard_on_world
    await sync_to_async(_remember_alices_cat)()
    await world.start_worker()
    client = await sync_to_async(make_client)("mo", moderator=True)

    preview = await _preview(
        client, persona="Tomori", **{"as": str(ALICE)}, text="tomori, what is my cat called?"
    )
    [recalled] = preview["recalled"]
    assert recalled["line"] == "About Alice: Alice's cat is called Miso"
    assert recalled["score"] >= 0.3 and "who is in the window" in recalled["why"]

    world.say("tomori, what is my cat called?", author=ALICE)
    turn = await eventually(
        sync_to_async(lambda: Turn.objects.filter(status=Turn.Status.REPLIED).first())
    )
    assert world.llm.chat_bodies[-1]["messages"] == preview["request"]["messages"]
    # The same memories with the same scores, each set following its own trigger: the
    # preview's hypothetical message, the turn's real one (a one-message conversation).
    assert [{**m, "after": None} for m in turn.recalled] == [
        {**m, "after": None} for m in preview["recalled"]
    ]
    assert turn.recalled[0]["after"] == str(turn.trigger_message_id)
    assert preview["recalled"][0]["after"] == preview["decision"]["message_id"]
    page = await sync_to_async(client.get)(f"/turns/{turn.id}/")
    assert "About Alice: Alice&#x27;s cat is called Miso" in page.content.decode()
