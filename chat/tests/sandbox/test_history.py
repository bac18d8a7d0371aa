"""`GET /channels/{id}/messages` paging: Discord's order (newest first) and anchors."""

from __future__ import annotations

import time

import discord
import pytest

from chat.pipeline.snowflakes import snowflake_from_ms
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RecordingClient, RestCaller

POETRY = DEMO_CHANNEL_IDS["poetry"]


def post_lines(server: SandboxServer, count: int) -> list[int]:
    """`count` messages "m0".."m{count-1}" in #poetry; their ids, oldest first."""
    carol = DEMO_USER_IDS["carol"]
    return [int(server.sandbox.user_says(POETRY, carol, f"m{i}")["id"]) for i in range(count)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("limit=3", [9, 8, 7]),
        ("", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
        ("before={4}&limit=3", [3, 2, 1]),
        ("before={1}", [0]),
        ("after={4}&limit=3", [7, 6, 5]),
        ("after={8}&limit=5", [9]),
        ("around={5}&limit=5", [7, 6, 5, 4, 3]),
        ("around={5}&limit=4", [7, 6, 5, 4]),
        ("around={0}&limit=3", [1, 0]),
        ("around={9}&limit=3", [9, 8]),
    ],
)
async def test_history_pages_like_discord(
    server: SandboxServer, rest: RestCaller, query: str, expected: list[int]
) -> None:
    ids = post_lines(server, 10)

    status, body = await rest("GET", f"/channels/{POETRY}/messages?" + query.format(*ids))

    assert status == 200
    assert [m["content"] for m in body] == [f"m{i}" for i in expected]


async def test_history_anchors_need_not_be_messages(
    server: SandboxServer, rest: RestCaller
) -> None:
    post_lines(server, 3)
    in_an_hour = snowflake_from_ms(int((time.time() + 3600) * 1000))

    _, before = await rest("GET", f"/channels/{POETRY}/messages?before={in_an_hour}&limit=2")
    _, after = await rest("GET", f"/channels/{POETRY}/messages?after=0&limit=2")

    assert [m["content"] for m in before] == ["m2", "m1"]
    assert [m["content"] for m in after] == ["m1", "m0"]


@pytest.mark.parametrize(
    ("limit", "code"),
    [("0", "NUMBER_TYPE_MIN"), ("101", "NUMBER_TYPE_MAX"), ("x", "NUMBER_TYPE_COERCE")],
)
async def test_history_limit_outside_1_to_100_is_an_invalid_form(
    rest: RestCaller, limit: str, code: str
) -> None:
    status, body = await rest("GET", f"/channels/{POETRY}/messages?limit={limit}")
    assert (status, body["code"]) == (400, 50035)
    assert body["errors"]["limit"]["_errors"][0]["code"] == code


async def test_discord_py_history_pages_through_every_message(
    server: SandboxServer, bot: RecordingClient
) -> None:
    ids = post_lines(server, 150)
    channel = bot.get_channel(POETRY)
    assert isinstance(channel, discord.TextChannel)

    newest_first = [m.id async for m in channel.history(limit=None)]
    oldest_first = [m.id async for m in channel.history(limit=None, oldest_first=True)]
    after = [m.id async for m in channel.history(limit=120, after=discord.Object(ids[9]))]
    around = [m.id async for m in channel.history(limit=5, around=discord.Object(ids[70]))]

    assert newest_first == ids[::-1]
    assert oldest_first == ids
    assert after == ids[10:130]
    assert around == ids[72:67:-1]
    assert server.request_counts[("GET", "/channels/{channel_id}/messages")] == 2 + 2 + 2 + 1
