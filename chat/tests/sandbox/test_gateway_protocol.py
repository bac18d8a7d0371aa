"""The gateway protocol frame by frame, with a bare websocket client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from chat.sandbox import GatewaySettings, Sandbox, SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox
from chat.sandbox.session_starts import SessionStarts
from chat.tests.sandbox.conftest import EVENT_TIMEOUT

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]
ALL_INTENTS = (1 << 0) | (1 << 1) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 15)


class RawGateway:
    """One websocket to the sandbox gateway, speaking raw frames."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, hello: dict[str, Any]) -> None:
        self.ws = ws
        self.hello = hello

    async def send(self, op: int, data: Any = None) -> None:
        await self.ws.send_str(json.dumps({"op": op, "d": data}))

    async def receive(self) -> dict[str, Any]:
        message = await self.ws.receive(timeout=EVENT_TIMEOUT)
        assert message.type is aiohttp.WSMsgType.TEXT, message
        return json.loads(message.data)

    async def close_code(self) -> int | None:
        """Wait for the server to close the socket; its close code."""
        message = await self.ws.receive(timeout=EVENT_TIMEOUT)
        assert message.type is aiohttp.WSMsgType.CLOSE, message
        return self.ws.close_code

    async def identify(self, token: str, *, shard: list[int] | None = None) -> list[dict[str, Any]]:
        """IDENTIFY; the READY and GUILD_CREATE frames that follow."""
        data: dict[str, Any] = {"token": token, "intents": ALL_INTENTS, "properties": {}}
        if shard is not None:
            data["shard"] = shard
        await self.send(2, data)
        ready = await self.receive()
        assert ready["t"] == "READY"
        frames = [ready]
        for _ in ready["d"]["guilds"]:
            frames.append(await self.receive())
        return frames


@contextlib.asynccontextmanager
async def raw_gateway(
    server: SandboxServer, query: str = "v=10&encoding=json"
) -> AsyncIterator[RawGateway]:
    url = f"{server.gateway_url}?{query}"
    async with aiohttp.ClientSession() as session, session.ws_connect(url, autoclose=False) as ws:
        hello = json.loads((await ws.receive(timeout=EVENT_TIMEOUT)).data)
        yield RawGateway(ws, hello)


async def test_hello_then_every_heartbeat_is_acknowledged(server: SandboxServer) -> None:
    async with raw_gateway(server, "v=10&encoding=json&compress=zlib-stream") as gateway:
        assert gateway.hello == {"op": 10, "d": {"heartbeat_interval": 250}, "s": None, "t": None}
        for seq in (None, 3):
            await gateway.send(1, seq)
            assert (await gateway.receive())["op"] == 11


async def test_identify_is_answered_with_ready_then_each_guild(server: SandboxServer) -> None:
    async with raw_gateway(server) as gateway:
        ready, guild_create = await gateway.identify(server.token)

    assert (ready["s"], guild_create["s"]) == (1, 2)
    data = ready["d"]
    assert data["v"] == 10
    assert data["guilds"] == [{"id": str(DEMO_GUILD_ID), "unavailable": True}]
    assert data["resume_gateway_url"] == server.gateway_url
    assert data["shard"] == [0, 1]
    assert data["application"]["id"] == data["user"]["id"]
    assert guild_create["t"] == "GUILD_CREATE"
    channels = guild_create["d"]["channels"]
    assert [c["name"] for c in channels] == ["general", "poetry", "autonomous", "after-dark"]
    assert [c["nsfw"] for c in channels] == [False, False, False, True]
    assert guild_create["d"]["member_count"] == 4
    assert [m["user"]["id"] for m in guild_create["d"]["members"]] == [data["user"]["id"]]


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (["not json"], 4002),
        ([{"op": 99}], 4001),
        ([{"op": 8, "d": {"guild_id": "1"}}], 4003),
        ([{"op": 2, "d": {"token": "wrong", "intents": 0}}], 4004),
        ([{"op": 2, "d": {"token": "TOKEN"}}], 4013),
        ([{"op": 2, "d": {"token": "TOKEN", "intents": 0, "shard": [2, 2]}}], 4010),
        ([{"op": 2, "d": {"token": "TOKEN", "intents": 0}}] * 2, 4005),
    ],
)
async def test_protocol_violations_close_with_discords_codes(
    server: SandboxServer, frames: list[Any], code: int
) -> None:
    async with raw_gateway(server) as gateway:
        for frame in frames:
            text = frame if isinstance(frame, str) else json.dumps(frame)
            await gateway.ws.send_str(text.replace("TOKEN", server.token))
        while (
            message := await gateway.ws.receive(timeout=EVENT_TIMEOUT)
        ).type is aiohttp.WSMsgType.TEXT:
            pass  # READY and GUILD_CREATE for an identify that succeeded
        assert message.type is aiohttp.WSMsgType.CLOSE
        assert gateway.ws.close_code == code


async def test_an_unknown_api_version_is_refused(server: SandboxServer) -> None:
    url = f"{server.gateway_url}?v=6&encoding=json"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.receive(timeout=EVENT_TIMEOUT)
        assert ws.close_code == 4012


async def test_resume_replays_what_was_missed_then_resumed(server: SandboxServer) -> None:
    async with raw_gateway(server) as gateway:
        ready, _ = await gateway.identify(server.token)
    session_id = ready["d"]["session_id"]
    server.sandbox.user_says(GENERAL, ALICE, "while you were away")

    async with raw_gateway(server) as gateway:
        await gateway.send(6, {"token": server.token, "session_id": session_id, "seq": 2})
        missed, resumed = await gateway.receive(), await gateway.receive()
        server.sandbox.user_says(GENERAL, ALICE, "welcome back")
        live = await gateway.receive()

    assert (missed["t"], missed["s"], missed["d"]["content"]) == (
        "MESSAGE_CREATE",
        3,
        "while you were away",
    )
    assert (resumed["t"], resumed["s"]) == ("RESUMED", 4)
    assert (live["s"], live["d"]["content"]) == (5, "welcome back")


@pytest.mark.parametrize(
    ("settings", "session_id", "seq"),
    [
        (GatewaySettings(), "no-such-session", 2),
        (GatewaySettings(replay_buffer=2), None, 2),  # the 3 missed events do not fit
        (GatewaySettings(resume_ttl=0), None, 2),  # expired
        (GatewaySettings(), None, 50),  # a sequence the session never reached
    ],
)
async def test_a_session_that_cannot_be_resumed_gets_invalid_session_false(
    settings: GatewaySettings, session_id: str | None, seq: int
) -> None:
    async with SandboxServer(demo_sandbox(), gateway=settings) as server:
        async with raw_gateway(server) as gateway:
            ready, _ = await gateway.identify(server.token)
            server.drop_connections()  # detaches the session at once
        for index in range(3):
            server.sandbox.user_says(GENERAL, ALICE, f"missed {index}")
        resume = {
            "token": server.token,
            "session_id": session_id or ready["d"]["session_id"],
            "seq": seq,
        }

        async with raw_gateway(server) as gateway:
            await gateway.send(6, resume)
            assert await gateway.receive() == {"op": 9, "d": False, "s": None, "t": None}


async def test_member_chunks_answer_queries_and_user_ids(server: SandboxServer) -> None:
    async with raw_gateway(server) as gateway:
        await gateway.identify(server.token)
        await gateway.send(
            8, {"guild_id": str(DEMO_GUILD_ID), "query": "", "limit": 0, "nonce": "all"}
        )
        everyone = await gateway.receive()
        await gateway.send(8, {"guild_id": DEMO_GUILD_ID, "query": "CA", "limit": 5})
        carol = await gateway.receive()
        await gateway.send(8, {"guild_id": DEMO_GUILD_ID, "user_ids": [ALICE, 42], "nonce": "ids"})
        by_id = await gateway.receive()

    assert everyone["t"] == "GUILD_MEMBERS_CHUNK"
    assert (everyone["d"]["chunk_index"], everyone["d"]["chunk_count"], everyone["d"]["nonce"]) == (
        0,
        1,
        "all",
    )
    assert len(everyone["d"]["members"]) == 4
    assert [m["user"]["username"] for m in carol["d"]["members"]] == ["carol"]
    assert [m["user"]["id"] for m in by_id["d"]["members"]] == [str(ALICE)]
    assert by_id["d"]["not_found"] == ["42"]


def two_guild_sandbox() -> tuple[Sandbox, int, int, int, int]:
    """A world with one guild per shard of two: (sandbox, even guild, its channel, odd guild,
    its channel)."""
    sandbox = Sandbox()
    even_guild = sandbox.add_guild("Even", guild_id=1_000_000 << 22)
    odd_guild = sandbox.add_guild("Odd", guild_id=1_000_001 << 22)
    return (
        sandbox,
        even_guild,
        sandbox.add_text_channel(even_guild, "even-chat"),
        odd_guild,
        sandbox.add_text_channel(odd_guild, "odd-chat"),
    )


async def test_a_shard_receives_only_its_guilds() -> None:
    sandbox, even_guild, even_channel, odd_guild, odd_channel = two_guild_sandbox()
    async with SandboxServer(sandbox) as server, raw_gateway(server) as gateway:
        ready, guild_create = await gateway.identify(server.token, shard=[1, 2])
        sandbox.user_says(even_channel, sandbox.bot_user_id, "not for shard 1")
        sandbox.user_says(odd_channel, sandbox.bot_user_id, "for shard 1")
        message = await gateway.receive()

    assert ready["d"]["shard"] == [1, 2]
    assert ready["d"]["guilds"] == [{"id": str(odd_guild), "unavailable": True}]
    assert guild_create["d"]["id"] == str(odd_guild) != str(even_guild)
    assert (message["t"], message["d"]["content"]) == ("MESSAGE_CREATE", "for shard 1")


async def test_leaving_the_server_closes_sockets_and_leaves_no_task_behind() -> None:
    async with SandboxServer(demo_sandbox()) as server, raw_gateway(server) as gateway:
        await gateway.identify(server.token)
        await server.stop()
        assert await gateway.close_code() == 1001
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_an_identify_too_soon_in_its_bucket_is_refused_and_recorded() -> None:
    settings = GatewaySettings(max_concurrency=2, identify_interval=60.0)
    async with SandboxServer(demo_sandbox(), gateway=settings) as server:
        async with raw_gateway(server) as first, raw_gateway(server) as other_bucket:
            await first.identify(server.token, shard=[0, 4])
            await other_bucket.identify(server.token, shard=[1, 4])
        async with raw_gateway(server) as same_bucket:
            await same_bucket.send(
                2, {"token": server.token, "intents": ALL_INTENTS, "shard": [2, 4]}
            )
            assert await same_bucket.receive() == {"op": 9, "d": False, "s": None, "t": None}

        assert [(r.shard, r.bucket, r.refused) for r in server.identifies()] == [
            ((0, 4), 0, False),
            ((1, 4), 1, False),
            ((2, 4), 0, True),
        ]
        assert server.identifies_too_soon(interval=60.0) == []


async def _gateway_bot(server: SandboxServer) -> dict[str, Any]:
    url, headers = f"{server.api_base}/gateway/bot", {"Authorization": f"Bot {server.token}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return (await response.json())["session_start_limit"]


async def _control(server: SandboxServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    url = f"{server.base_url}/_sandbox/gateway/session-start-limit"
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, await response.json()


async def test_each_identify_uses_a_session_start_and_a_resume_none() -> None:
    settings = GatewaySettings(max_concurrency=2)
    async with SandboxServer(demo_sandbox(), gateway=settings) as server:
        assert await _gateway_bot(server) == {
            "total": 1000,
            "remaining": 1000,
            "reset_after": 86_400_000,
            "max_concurrency": 2,
        }
        async with raw_gateway(server) as first:
            ready, _ = await first.identify(server.token)
            session_id = ready["d"]["session_id"]
        async with raw_gateway(server) as again:
            await again.send(6, {"token": server.token, "session_id": session_id, "seq": 2})
            assert (await again.receive())["t"] == "RESUMED"

        limit = await _gateway_bot(server)
        assert limit["remaining"] == 999
        assert 86_300_000 < limit["reset_after"] <= 86_400_000  # the window opened at the start


async def test_an_identify_past_the_session_start_limit_is_refused_and_recorded() -> None:
    async with SandboxServer(demo_sandbox()) as server:
        status, limit = await _control(server, {"remaining": 1, "reset_after": 3600})
        assert status == 200 and limit["remaining"] == 1
        assert 3_590_000 < limit["reset_after"] <= 3_600_000
        async with raw_gateway(server) as first:
            await first.identify(server.token)
        async with raw_gateway(server) as second:
            await second.send(2, {"token": server.token, "intents": ALL_INTENTS})
            assert await second.close_code() == 4004

        assert (await _gateway_bot(server))["remaining"] == 0
        assert [(r.refused, r.reason) for r in server.identifies()] == [
            (False, ""),
            (True, "session_start_limit"),
        ]
        status, body = await _control(server, {"remaining": 1001})
        assert status == 400 and "remaining" in body["errors"]


def test_the_session_start_limit_resets_after_its_window() -> None:
    now = [100.0]
    starts = SessionStarts(total=3, max_concurrency=1, clock=lambda: now[0], reset_seconds=60)
    assert starts.use("a") and starts.use("a")
    assert starts.limit("b")["remaining"] == 3  # per bot token
    now[0] = 130.0
    assert starts.limit("a") == {
        "total": 3,
        "remaining": 1,
        "reset_after": 30_000,
        "max_concurrency": 1,
    }
    starts.set("a", remaining=0)
    assert not starts.use("a")
    now[0] = 160.0
    assert starts.limit("a")["remaining"] == 3


async def test_one_shard_dropped_and_held_resumes_only_when_released() -> None:
    async with (
        SandboxServer(demo_sandbox()) as server,
        raw_gateway(server) as zero,
        raw_gateway(server) as one,
    ):
        ready, *_ = await zero.identify(server.token, shard=[0, 2])
        await one.identify(server.token, shard=[1, 2])
        assert server.drop_shard(0, 2, hold=True) == 1
        assert (await zero.ws.receive(timeout=EVENT_TIMEOUT)).type in (
            aiohttp.WSMsgType.CLOSED,
            aiohttp.WSMsgType.ERROR,
        )
        await one.send(1, 2)
        assert (await one.receive())["op"] == 11  # the other shard goes on
        async with raw_gateway(server) as again:
            resume = {"token": server.token, "session_id": ready["d"]["session_id"], "seq": 1}
            await again.send(6, resume)
            await again.send(1, 1)
            assert (await again.receive())["op"] == 11  # held: heartbeats, no RESUMED
            assert [s["connected"] for s in server.sessions()] == [False, True]

            assert server.release_shard(0, 2) == 1
            frames = [await again.receive() for _ in range(2)]
            assert [f["t"] for f in frames] == ["GUILD_CREATE", "RESUMED"]
