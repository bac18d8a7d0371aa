"""The REST front door: injected 429s and 5xx, real rate limits, and the headers on every
response, as discord.py's own retry logic meets them."""

from __future__ import annotations

import asyncio

import aiohttp
import discord
import pytest

from chat.sandbox import RateLimitPolicy, SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RecordingClient, running, serve

GENERAL = DEMO_CHANNEL_IDS["general"]
SEND = ("POST", "/channels/{channel_id}/messages")
RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Reset-After",
    "X-RateLimit-Bucket",
}


def general(bot: RecordingClient) -> discord.TextChannel:
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_injected_429_is_retried_and_the_message_arrives_once(
    server: SandboxServer, bot: RecordingClient
) -> None:
    server.inject_fault("POST", "/channels/{channel_id}/messages", 429, retry_after=0.05)

    sent = await general(bot).send("patience")

    assert server.request_counts[SEND] == 2
    assert [m["id"] for m in server.sandbox.channel_messages(GENERAL)] == [str(sent.id)]
    echo = await bot.next_event("message")
    assert echo.id == sent.id
    server.sandbox.user_says(GENERAL, DEMO_USER_IDS["alice"], "marker")
    assert (await bot.next_event("message")).content == "marker"  # and no second echo before it


async def test_injected_500_is_retried(server: SandboxServer, bot: RecordingClient) -> None:
    server.inject_fault("POST", "/channels/*/messages", 500)

    sent = await general(bot).send("eventually")

    assert server.request_counts[SEND] == 2
    assert server.sandbox.message(GENERAL, sent.id)["content"] == "eventually"


async def test_injected_503_reaches_the_caller_as_a_server_error(
    server: SandboxServer, bot: RecordingClient
) -> None:
    """discord.py retries 500, 502, 504 and 524 only; a 503 is the caller's to handle."""
    server.inject_fault("*", "/channels/{channel_id}/messages", 503, count=2)

    with pytest.raises(discord.DiscordServerError) as raised:
        await general(bot).send("lost")

    assert raised.value.status == 503
    assert server.request_counts[SEND] == 1
    assert server.sandbox.channel_messages(GENERAL) == []


async def test_every_response_carries_rate_limit_headers(server: SandboxServer) -> None:
    server.inject_fault("GET", "/gateway", 429, retry_after=2.5, scope="shared")
    auth = {"Authorization": f"Bot {server.token}"}
    async with aiohttp.ClientSession() as session:
        for path, status in [
            ("/users/@me", 200),
            ("/channels/1", 404),
            ("/no/such/route", 404),
            ("/gateway", 429),
            ("/gateway", 200),
        ]:
            async with session.get(server.api_base + path, headers=auth) as response:
                assert response.status == status
                assert response.headers.keys() >= RATE_LIMIT_HEADERS
                if status == 429:
                    assert response.headers["Retry-After"] == "3"
                    assert response.headers["X-RateLimit-Scope"] == "shared"
                    assert (await response.json())["retry_after"] == 2.5


async def test_an_exhausted_bucket_answers_429_and_discord_py_waits_for_its_reset() -> None:
    async with serve(rate_limit=RateLimitPolicy(limit=2, window=0.3)) as server:
        auth = {"Authorization": f"Bot {server.token}"}
        url = f"{server.api_base}/channels/{GENERAL}"
        async with aiohttp.ClientSession() as session:
            answers = []
            for _ in range(3):
                async with session.get(url, headers=auth) as response:
                    answers.append((response.status, response.headers["X-RateLimit-Remaining"]))
        assert answers == [(200, "1"), (200, "0"), (429, "0")]

        async with running(RecordingClient(), server.token) as bot:
            for index in range(5):
                await general(bot).send(f"burst {index}")

        assert server.request_counts[SEND] == 5  # discord.py paced itself: no 429, no retry


async def test_a_send_repeated_with_its_nonce_is_answered_with_the_first_message(
    server: SandboxServer, bot: RecordingClient
) -> None:
    first = await general(bot).send("once", nonce="turn-7-piece-0")
    again = await general(bot).send("once", nonce="turn-7-piece-0")
    other = await general(bot).send("once", nonce="turn-7-piece-1")

    assert again.id == first.id  # discord.py sends enforce_nonce with every nonce
    assert other.id != first.id
    contents = [m["id"] for m in server.sandbox.channel_messages(GENERAL)]
    assert contents == [str(first.id), str(other.id)]


async def test_a_held_response_arrives_late_after_the_message_exists(
    server: SandboxServer, bot: RecordingClient
) -> None:
    server.hold_responses("POST", "/channels/{channel_id}/messages", 0.5)
    channel = general(bot)

    sending = asyncio.create_task(channel.send("slow answer"))
    echo = await bot.next_event("message")  # dispatched before the response is sent

    assert echo.content == "slow answer" and not sending.done()
    sent = await sending
    assert sent.id == echo.id


async def test_every_request_is_logged_with_its_arrival_time_in_order(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sent = await general(bot).send("first draft")
    await sent.edit(content="second draft")
    await sent.edit(content="final draft")

    edits = server.requests("PATCH", "/channels/{channel_id}/messages/{message_id}")
    assert [r.path for r in edits] == [f"/channels/{GENERAL}/messages/{sent.id}"] * 2
    [send] = server.requests(*SEND)
    assert send.at <= edits[0].at <= edits[1].at
    everything = server.requests()
    assert everything.index(send) < everything.index(edits[0])
