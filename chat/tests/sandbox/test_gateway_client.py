"""The gateway's recovery paths as the real discord.py client lives through them: abrupt
disconnects, RECONNECT, INVALID_SESSION, duplicate dispatches, and sharding."""

from __future__ import annotations

import discord

from chat.gateway.endpoints import configure_discord_endpoints
from chat.sandbox import GatewaySettings, SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RecordingClient, RecordingShardedClient, running, serve
from chat.tests.sandbox.test_gateway_protocol import two_guild_sandbox

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]
BOB = DEMO_USER_IDS["bob"]


async def messages_until(bot: RecordingClient, marker: str) -> list[str]:
    """The contents of every message the bot receives up to and including `marker`."""
    contents: list[str] = []
    while not contents or contents[-1] != marker:
        contents.append((await bot.next_event("message")).content)
    return contents


async def test_a_dropped_connection_resumes_and_gets_what_it_missed_exactly_once(
    server: SandboxServer, bot: RecordingClient
) -> None:
    (session_before,) = server.sessions()

    assert server.drop_connections() == 1
    server.sandbox.user_says(GENERAL, ALICE, "said while you were away")
    await bot.next_event("resumed")
    server.sandbox.user_says(GENERAL, BOB, "marker")

    assert await messages_until(bot, "marker") == ["said while you were away", "marker"]
    (session_after,) = server.sessions()
    assert session_after["session_id"] == session_before["session_id"]
    assert session_after["connected"]


async def test_reconnect_request_makes_the_client_resume(
    server: SandboxServer, bot: RecordingClient
) -> None:
    assert server.request_reconnect() == 1
    await bot.next_event("resumed")
    server.sandbox.user_says(GENERAL, ALICE, "still here")

    assert (await bot.next_event("message")).content == "still here"
    assert len(server.sessions()) == 1


async def test_an_expired_session_makes_the_client_identify_again() -> None:
    settings = GatewaySettings(heartbeat_interval_ms=250, resume_ttl=0)
    async with serve(gateway=settings) as server, running(RecordingClient(), server.token) as bot:
        (old_session,) = server.sessions()
        server.drop_connections()
        server.sandbox.user_says(GENERAL, ALICE, "lost with the old session")
        await bot.wait_for("ready", timeout=5)  # a fresh READY after INVALID_SESSION
        server.sandbox.user_says(GENERAL, ALICE, "new session")

        assert (await bot.next_event("message")).content == "new session"
        (new_session,) = [s for s in server.sessions() if s["connected"]]
        assert new_session["session_id"] != old_session["session_id"]


async def test_invalidated_sessions_make_the_client_identify_again_and_miss_the_gap(
    server: SandboxServer, bot: RecordingClient
) -> None:
    (old_session,) = server.sessions()

    assert server.invalidate_sessions() == 1
    server.sandbox.user_says(GENERAL, ALICE, "said while no session was open")
    await bot.wait_for("ready", timeout=5)  # a fresh READY, not RESUMED
    server.sandbox.user_says(GENERAL, ALICE, "new session")

    assert (await bot.next_event("message")).content == "new session"
    (new_session,) = server.sessions()
    assert new_session["session_id"] != old_session["session_id"]
    assert new_session["connected"]


async def test_replayed_dispatches_arrive_twice(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sent = server.sandbox.user_says(GENERAL, ALICE, "once, really")
    first = await bot.next_event("message")

    assert server.replay_last_dispatches(1) == 1
    second = await bot.next_event("message")

    assert first.id == second.id == int(sent["id"])


async def test_an_auto_sharded_client_gets_each_guild_on_its_shard() -> None:
    sandbox, even_guild, even_channel, odd_guild, odd_channel = two_guild_sandbox()
    async with serve(sandbox) as server:
        client = RecordingShardedClient(shard_count=2, shard_ids=[0, 1])
        async with running(client, server.token):
            assert sorted((s["shard"][0], s["connected"]) for s in server.sessions()) == [
                (0, True),
                (1, True),
            ]
            even, odd = client.get_guild(even_guild), client.get_guild(odd_guild)
            assert even is not None and even.shard_id == 0
            assert odd is not None and odd.shard_id == 1
            assert isinstance(client.get_channel(odd_channel), discord.TextChannel)

            sandbox.user_says(even_channel, sandbox.bot_user_id, "on shard 0")
            sandbox.user_says(odd_channel, sandbox.bot_user_id, "on shard 1")
            received = [await client.next_event("message") for _ in range(2)]

    assert sorted((m.guild.shard_id, m.content) for m in received) == [
        (0, "on shard 0"),
        (1, "on shard 1"),
    ]


async def test_without_a_gateway_url_an_auto_sharded_client_follows_gateway_bot() -> None:
    """`configure_discord_endpoints(gateway_url=None)`: only `GET /gateway/bot` names the
    sandbox's websocket, with the shard count it recommends."""
    sandbox, even_guild, _, odd_guild, _ = two_guild_sandbox()
    async with serve(sandbox, shards=2) as server:
        configure_discord_endpoints(api_base=server.api_base, gateway_url=None)
        async with running(RecordingShardedClient(), server.token) as client:
            assert client.shard_count == 2
            assert sorted(s["shard"] for s in server.sessions()) == [[0, 2], [1, 2]]
            assert {g.id for g in client.guilds} == {even_guild, odd_guild}
        assert server.request_counts[("GET", "/gateway/bot")] == 1
