"""Fixtures: a sandbox server with the demo world, and the real discord.py client against it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord
import discord.gateway
import pytest

from chat.gateway.endpoints import DISCORD_API_BASE, configure_discord_endpoints
from chat.sandbox import GatewaySettings, Sandbox, SandboxServer
from chat.sandbox.demo import demo_sandbox

EVENT_TIMEOUT = 5.0
GUILD_READY_SECONDS = 0.05
"""How long discord.py waits after the last GUILD_CREATE before it is ready (2 s by default).
The sandbox sends them right after READY; should one still come later, `running` waits for it."""

RestCaller = Callable[..., Awaitable[tuple[int, Any]]]
"""``await rest(method, path, auth=True, **aiohttp_kwargs)`` -> (status, decoded body)."""


def full_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = intents.members = True
    intents.messages = intents.message_content = intents.reactions = intents.typing = True
    return intents


class RecordingClient(discord.Client):
    """A plain discord.Client that queues what it receives, for tests to await in order."""

    def __init__(self, *, intents: discord.Intents | None = None, **options: Any) -> None:
        super().__init__(
            intents=intents or full_intents(), guild_ready_timeout=GUILD_READY_SECONDS, **options
        )
        self.received: defaultdict[str, asyncio.Queue[Any]] = defaultdict(asyncio.Queue)
        self.announced_guilds: set[int] = set()
        """Guilds discord.py dispatched as available or joined (after chunking their members)."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py sleeps 5 s before every non-initial IDENTIFY; the sandbox has no limit."""

    async def next_event(self, name: str) -> Any:
        return await asyncio.wait_for(self.received[name].get(), EVENT_TIMEOUT)

    def _record(self, name: str, value: Any) -> None:
        self.received[name].put_nowait(value)

    async def on_message(self, message: discord.Message) -> None:
        self._record("message", message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self._record("raw_message_edit", payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self._record("raw_message_delete", payload)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self._record("raw_bulk_message_delete", payload)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        self._record("raw_reaction_add", payload)

    async def on_raw_reaction_remove(self, payload: discord.RawReactionActionEvent) -> None:
        self._record("raw_reaction_remove", payload)

    async def on_raw_reaction_clear(self, payload: discord.RawReactionClearEvent) -> None:
        self._record("raw_reaction_clear", payload)

    async def on_raw_reaction_clear_emoji(
        self, payload: discord.RawReactionClearEmojiEvent
    ) -> None:
        self._record("raw_reaction_clear_emoji", payload)

    async def on_raw_typing(self, payload: discord.RawTypingEvent) -> None:
        self._record("raw_typing", payload)

    async def on_guild_join(self, guild: discord.Guild) -> None:
        self.announced_guilds.add(guild.id)
        self._record("guild_join", guild)

    async def on_guild_available(self, guild: discord.Guild) -> None:
        self.announced_guilds.add(guild.id)

    async def on_guild_channel_create(self, channel: discord.abc.GuildChannel) -> None:
        self._record("guild_channel_create", channel)

    async def on_member_join(self, member: discord.Member) -> None:
        self._record("member_join", member)

    async def on_resumed(self) -> None:
        self._record("resumed", None)


class RecordingShardedClient(RecordingClient, discord.AutoShardedClient):
    """The sharded variant: the same recording over AutoShardedClient's connection logic."""


ClientT = TypeVar("ClientT", bound=RecordingClient)


@contextlib.asynccontextmanager
async def running(client: ClientT, token: str) -> AsyncIterator[ClientT]:
    """Start `client`, wait until it is ready, and always close it afterwards.

    Raises whatever `client.start` raised if it stops before becoming ready.
    """
    task = asyncio.create_task(client.start(token))
    ready = asyncio.create_task(client.wait_until_ready())
    try:
        done, _ = await asyncio.wait({task, ready}, timeout=10, return_when="FIRST_COMPLETED")
        if task in done:
            task.result()
        assert ready in done, "the client did not become ready"
        await every_guild_available(client)
        yield client
    finally:
        ready.cancel()
        await client.close()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await keep_alive_threads_finished()


async def every_guild_available(client: RecordingClient) -> None:
    """Wait until discord.py has announced each guild READY listed (with its members, when
    the client asked for them): it is ready once no GUILD_CREATE came for
    `GUILD_READY_SECONDS`; a guild a stalled process delayed longer is announced after READY."""
    deadline = asyncio.get_running_loop().time() + EVENT_TIMEOUT
    while {guild.id for guild in client.guilds} - client.announced_guilds:
        assert asyncio.get_running_loop().time() < deadline, "a guild was never announced"
        await asyncio.sleep(0.01)


async def keep_alive_threads_finished() -> None:
    """Wait for discord.py's heartbeat threads (one per socket) to end.

    A closed socket stops its thread, but a thread that woke just before can still post a
    heartbeat to the event loop; if the test's loop closes first, the thread dies with
    "Event loop is closed". Joining them keeps every client's threads inside its test.
    """
    for thread in threading.enumerate():
        if isinstance(thread, discord.gateway.KeepAliveHandler):
            await asyncio.to_thread(thread.join, EVENT_TIMEOUT)


@contextlib.asynccontextmanager
async def serve(sandbox: Sandbox | None = None, **options: Any) -> AsyncIterator[SandboxServer]:
    """Serve `sandbox` (the demo world by default) with discord.py pointed at it.

    `options` go to `SandboxServer`; the heartbeat interval defaults to 250 ms.
    """
    options.setdefault("gateway", GatewaySettings(heartbeat_interval_ms=250))
    async with SandboxServer(sandbox or demo_sandbox(), **options) as server:
        configure_discord_endpoints(api_base=server.api_base, gateway_url=server.gateway_url)
        try:
            yield server
        finally:
            configure_discord_endpoints(api_base=DISCORD_API_BASE, gateway_url=None)


@pytest.fixture
async def server() -> AsyncIterator[SandboxServer]:
    """The demo world on an ephemeral port, with discord.py pointed at it."""
    async with serve() as server:
        yield server


@pytest.fixture
async def bot(server: SandboxServer) -> AsyncIterator[RecordingClient]:
    """A ready RecordingClient logged in to `server`."""
    async with running(RecordingClient(), server.token) as client:
        yield client


@pytest.fixture
async def rest(server: SandboxServer) -> AsyncIterator[RestCaller]:
    """Raw REST calls to the sandbox: ``await rest("GET", "/channels/1")`` -> (status, body)."""
    async with aiohttp.ClientSession() as session:

        async def call(
            method: str,
            path: str,
            *,
            auth: bool = True,
            headers: dict[str, str] | None = None,
            **kwargs: Any,
        ) -> tuple[int, Any]:
            headers = dict(headers or {})
            if auth:
                headers["Authorization"] = f"Bot {server.token}"
            url = server.api_base + path
            async with session.request(method, url, headers=headers, **kwargs) as response:
                body = await response.json() if response.status != 204 else None
                return response.status, body

        yield call
