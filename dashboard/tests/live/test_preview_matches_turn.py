"""The prompt preview and the real turn agree: what the preview says the model would get for
"alice says X now" is what the model gets when alice says X in the sandbox."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import ChannelWindowAnchor, Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.services.memory_store import MemoryScope, memory_add
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.e2e.test_commands import MANAGE_GUILD, moderator, run
from chat.tests.e2e.test_ledger import (
    DEMO_SHARD,
    LOUNGE,
    OTHER_GUILD,
    a_guild_on_the_other_shard,
)
from chat.worker import WorkerConfig, build_client
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


def _replies_to(world, message: dict) -> list[dict]:
    return [
        m
        for m in world.bot_messages(GENERAL)
        if (m.get("message_reference") or {}).get("message_id") == message["id"]
    ]


async def _answered(world, content: str) -> Turn:
    """Say ``content`` as alice, wait for Tomori's reply and for the worker to be drained;
    the turn that replied."""
    said = world.say(content)
    await eventually(lambda: _replies_to(world, said))
    await world.drained()
    return await Turn.objects.filter(
        trigger_message_id=int(said["id"]), status=Turn.Status.REPLIED
    ).aget()


async def test_in_a_long_conversation_the_preview_and_replay_are_the_requests_the_model_gets(
    dashboard_on_world,
):
    """More history than the fetch limit and a turn a moment ago: the worker keeps its stored
    anchor while the window grows, and the preview and replay read that same anchor."""
    world = dashboard_on_world
    for n in range(90):
        world.say(f"history line {n}: the rehearsal room smells of coffee", author=BOB)
    await world.start_worker()
    first = await _answered(world, "tomori, what did everyone say?")
    for n in range(12):
        world.say(f"later line {n}: the drummer is late again", author=BOB)
    await world.drained()
    client = await sync_to_async(make_client)("mo", moderator=True)

    preview = await _preview(
        client, persona="Tomori", **{"as": str(ALICE)}, text="tomori, and now?"
    )
    turn = await _answered(world, "tomori, and now?")

    sent = world.llm.chat_bodies[-1]
    assert turn.window["reanchor_reason"] is None  # the worker kept its anchor
    assert len(sent["messages"]) == len(preview["request"]["messages"])
    for received, previewed in zip(sent["messages"], preview["request"]["messages"], strict=True):
        assert received == previewed
    # The same window; only the trigger's id differs (the hypothetical message's own).
    assert preview["window"]["message_ids"][:-1] == turn.window["message_ids"][:-1]
    assert len(preview["window"]["message_ids"]) == len(turn.window["message_ids"]) == 70

    replay = await sync_to_async(client.post)(f"/turns/{turn.id}/replay/", {"persona": "Tomori"})
    assert replay.status_code == 200
    assert "(the request is the same)" in replay.content.decode()

    # Once the channel's anchor has moved on (the window would pass the limit), a replay
    # still reads each turn's window from that turn's own anchor.
    for n in range(12):
        world.say(f"even later line {n}: the bassist brought snacks", author=BOB)
    third = await _answered(world, "tomori, one more?")
    assert third.window["anchor_message_id"] != turn.window["anchor_message_id"]
    for replayed in (turn, first):
        replay = await sync_to_async(client.post)(
            f"/turns/{replayed.id}/replay/", {"persona": "Tomori"}
        )
        assert replay.status_code == 200
        assert "(the request is the same)" in replay.content.decode(), replayed.id


async def _long_conversation(world, channel_id: int, *, lines: int = 60) -> None:
    """``lines`` lines of bob's, then a turn of Tomori's: the window is re-anchored to the
    newest 56 messages (limit 80 less a stride of 24), so a kept and a new anchor differ."""
    for n in range(lines):
        world.say(f"line {n}: the set list is still too long", author=BOB, channel_id=channel_id)
    said = world.say("tomori, what do you think?", channel_id=channel_id)
    await eventually(
        lambda: any(
            (m.get("message_reference") or {}).get("message_id") == said["id"]
            for m in world.bot_messages(channel_id)
        )
    )


async def _preview_then_turn(world, client, channel_id: int, text: str) -> tuple[dict, Turn]:
    """The preview of alice saying ``text`` in the channel, then the turn when she does."""
    response = await sync_to_async(client.get)(
        f"/channels/{channel_id}/preview/",
        {"persona": "Tomori", "as": str(ALICE), "text": text, "format": "json"},
    )
    assert response.status_code == 200, response.content
    said = world.say(text, channel_id=channel_id)
    turn = await eventually(
        sync_to_async(
            lambda: Turn.objects.filter(
                trigger_message_id=int(said["id"]), status=Turn.Status.REPLIED
            ).first()
        )
    )
    return response.json(), turn


async def test_a_workers_reconnect_reanchors_its_own_channels_in_the_preview_too(
    dashboard_on_world,
):
    """Two workers, one shard each. The one serving #lounge reconnects: its next turn there
    re-anchors, and so does the preview; #general's worker kept its connection, and its
    preview keeps the anchor as its next turn does."""
    world = dashboard_on_world
    await a_guild_on_the_other_shard(world)
    world.sandbox.sandbox.add_member(OTHER_GUILD, BOB)
    await world.start_worker(shard_ids=[DEMO_SHARD], shard_count=2)
    other_shard = 1 - DEMO_SHARD
    config = WorkerConfig(
        token=world.sandbox.token,
        api_base=world.sandbox.api_base,
        gateway_url=world.sandbox.gateway_url,
        shard_ids=[other_shard],
        shard_count=2,
    )
    async with OpenAICompatibleClient(base_url=world.llm.base_url, api_key="test") as llm:
        other = build_client(
            config, llm=llm, runner=AttemptRunner(client=llm, policy=RetryPolicy(), stream=False)
        )
        running = asyncio.create_task(other.start(config.token))
        try:
            await eventually(lambda: other.scheduler is not None and other.is_ready())
            await _long_conversation(world, GENERAL)
            await _long_conversation(world, LOUNGE)
            await world.drained()

            assert world.sandbox.drop_shard(other_shard, 2, hold=True) == 1
            await eventually(lambda: other.windows.disconnected_shards == {other_shard})
            assert world.sandbox.release_shard(other_shard, 2) == 1
            await eventually(lambda: not other.windows.disconnected_shards)
            await other.handlers_settled()
            for channel_id in (GENERAL, LOUNGE):
                for n in range(4):
                    world.say(f"and line {n}", author=BOB, channel_id=channel_id)
            await world.drained()
            client = await sync_to_async(make_client)("mo", moderator=True)

            for channel_id, reanchor, count in ((GENERAL, None, 62), (LOUNGE, "forced", 56)):
                preview, turn = await _preview_then_turn(
                    world, client, channel_id, "tomori, still with us?"
                )
                sent = next(
                    body
                    for body in reversed(world.llm.chat_bodies)
                    if "still with us?" in json.dumps(body["messages"][-2:])
                )
                assert preview["window"]["reanchor_reason"] == reanchor, channel_id
                assert turn.window["reanchor_reason"] == reanchor, channel_id
                assert turn.window["message_count"] == count
                assert sent["messages"] == preview["request"]["messages"], channel_id
        finally:
            await other.close()
            await asyncio.gather(running, return_exceptions=True)


async def test_prompt_the_preview_and_the_why_page_read_the_same_anchor_and_leave_it(
    dashboard_on_world,
):
    """Every inspection reads the channel's stored anchor as the worker's next turn will, and
    none moves it: ``/prompt`` (a dry run in the worker), the preview and the why page."""
    world = dashboard_on_world
    await world.start_worker()
    await _long_conversation(world, GENERAL, lines=90)
    for n in range(12):
        world.say(f"later line {n}: the drummer is late again", author=BOB)
    newest = world.say("and the singer too", author=BOB)
    await world.drained()
    anchors = await sync_to_async(list)(ChannelWindowAnchor.objects.values())
    moderator(world, ALICE, MANAGE_GUILD)
    client = await sync_to_async(make_client)("mo", moderator=True)

    record = await run(world, "prompt", {"persona": "Tomori"})
    preview = await _preview(client, persona="Tomori")
    why = await sync_to_async(client.get)("/why/", {"message": newest["id"]})

    assert why.status_code == 200
    [file] = record.files
    assert json.loads(file.data)["messages"] == preview["request"]["messages"]
    assert preview["window"]["reanchor_reason"] is None
    assert len(preview["window"]["message_ids"]) == 56 + 1 + 13
    assert await sync_to_async(list)(ChannelWindowAnchor.objects.values()) == anchors
