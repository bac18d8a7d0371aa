"""The prompt preview offers the tools a real turn would: the sticker tool in an autonomous
channel of a guild with stickers, the video tool with a transcript service."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, AUTONOMOUS, GENERAL
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
