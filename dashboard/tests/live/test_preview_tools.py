"""The prompt preview offers the tools a real turn would: the sticker tool in an autonomous
channel of a guild with stickers, the video tool with a transcript service, the vision tools
with a vision model; its runtime has every capability the worker's has."""

from __future__ import annotations

import dataclasses

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.models import Turn
from chat.runtime import TurnCapabilities, discord_rest_port, dry_run_runtime
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.services.memory_store import default_embedding_model
from chat.services.turn_request import TurnRuntime
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, GENERAL, eventually
from dashboard.tests.live.conftest import make_client

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


async def _tools(client, channel_id: int, text: str) -> list[str]:
    response = await sync_to_async(client.get)(
        f"/channels/{channel_id}/preview/",
        {"persona": "Tomori", "as": str(ALICE), "text": text, "format": "json"},
    )
    assert response.status_code == 200, response.content
    return [tool["function"]["name"] for tool in response.json()["request"].get("tools", [])]


async def test_the_preview_offers_the_sticker_tool_where_a_turn_would(dashboard_on_world):
    world = dashboard_on_world
    world.sandbox.sandbox.add_guild_sticker(DEMO_GUILD_ID, "wave")
    client = await sync_to_async(make_client)("mo", moderator=True)

    assert await _tools(client, AUTONOMOUS, "hello everyone") == ["send_sticker"]
    assert "send_sticker" not in await _tools(client, GENERAL, "tomori, hello")


async def test_the_preview_offers_the_video_tool_with_a_transcript_service(
    dashboard_on_world, settings
):
    client = await sync_to_async(make_client)("mo", moderator=True)
    link = "tomori, look https://youtu.be/dQw4w9WgXcQ"

    assert "process_youtube_video" not in await _tools(client, GENERAL, link)
    settings.YOUTUBE_TRANSCRIPT_URL = dashboard_on_world.sandbox.youtube_transcript_url
    assert await _tools(client, GENERAL, link) == ["process_youtube_video"]


PROCESS_OWN = {"port", "windows", "llm", "clock", "caches", "fence", "configurations", "spend"}
"""`TurnRuntime` fields each process has its own of (its Discord port and windows, its model
runner and the meter its calls are counted through, its clock and caches, its lease, how it
reads configurations): everything else is a
capability the settings give, and must be the same in the worker and the preview."""


def _capability(value: object) -> object:
    """What a capability is, whichever client it is asked through: its kind and what names
    it (a model, a service's address, a tokenizer's name)."""
    if value is None:
        return None
    for attribute in ("model", "base_url", "name"):
        if hasattr(value, attribute):
            return (type(value).__name__, getattr(value, attribute))
    return type(value).__name__


@pytest.fixture
def every_capability_configured(dashboard_on_world, settings):
    """A vision model, a transcript service, an embedding model and a moderation service, all
    from the settings."""
    settings.LLM_VISION_MODEL = "llava:13b"
    settings.MODERATION_BASE_URL = dashboard_on_world.llm.base_url
    settings.YOUTUBE_TRANSCRIPT_URL = dashboard_on_world.sandbox.youtube_transcript_url
    settings.LLM_EMBEDDING_MODEL = "nomic-embed-text"
    default_embedding_model.cache_clear()
    yield dashboard_on_world
    default_embedding_model.cache_clear()


async def test_the_preview_runtime_has_every_capability_the_workers_has(
    every_capability_configured,
):
    world = every_capability_configured
    client = await world.start_worker()  # its capabilities from the settings, as runbot's
    worker = client.scheduler._runtime

    async with discord_rest_port() as port:
        preview = dry_run_runtime(port=port, now=timezone.now())

    capabilities = {f.name for f in dataclasses.fields(TurnRuntime)} - PROCESS_OWN
    assert capabilities == {f.name for f in dataclasses.fields(TurnCapabilities)}
    for name in sorted(capabilities):
        assert _capability(getattr(worker, name)) is not None, name
        assert _capability(getattr(preview, name)) == _capability(getattr(worker, name)), name


async def test_with_a_vision_model_the_preview_offers_what_the_turn_offers(
    every_capability_configured,
):
    world = every_capability_configured
    await world.start_worker()
    client = await sync_to_async(make_client)("mo", moderator=True)
    text = "tomori, look at this picture and the gif"

    response = await sync_to_async(client.get)(
        f"/channels/{GENERAL}/preview/",
        {"persona": "Tomori", "as": str(ALICE), "text": text, "format": "json"},
    )
    preview = response.json()["request"]
    world.say(text)
    turn = await eventually(
        sync_to_async(lambda: Turn.objects.filter(status=Turn.Status.REPLIED).first())
    )

    sent = world.llm.chat_bodies[0]
    assert [t["function"]["name"] for t in preview["tools"]] == ["analyze_image", "process_gif"]
    assert sent["tools"] == preview["tools"]
    assert sent["messages"] == preview["messages"]
    assert turn.tool_allowlist == ["analyze_image", "process_gif"]
