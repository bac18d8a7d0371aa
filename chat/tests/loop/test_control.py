"""The bot.control listener against the real Redis: it holds one socket open while idle, it
reconnects after a real failure without losing messages, and the group never grows."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from chat.loop.control import CONTROL_GROUP, listen_for_control

CONTROL_LOGGER = "chat.loop.control"


async def eventually(check: Callable[[], Any], *, within: float = 10.0) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.05)


def layer_config(*, prefix: str, client_name: str, address: str | None = None) -> dict:
    """The project's channel-layer configuration with this test's own prefix and client name."""
    config = copy.deepcopy(settings.CHANNEL_LAYERS["default"]["CONFIG"])
    config["prefix"] = prefix
    host = config["hosts"][0]
    host["client_name"] = client_name
    if address is not None:
        host["address"] = address
    return config


RECEIVE_CYCLE_S = 0.5


class QuickReceiveLayer(RedisChannelLayer):
    """channels_redis's layer, with one blocking receive (``BZPOPMIN``) lasting
    ``RECEIVE_CYCLE_S`` instead of its class-wide ``brpop_timeout`` of 5 s: a test crosses
    several idle receives in a few seconds, through the same code."""

    brpop_timeout = RECEIVE_CYCLE_S


@dataclass
class Listener:
    """``listen_for_control`` running as a task, with what it received."""

    layer: RedisChannelLayer
    client_name: str
    refresh_seconds: float = 3600.0
    received: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None

    async def start(self) -> None:
        async def probe(message: Any) -> None:
            await self.received.put(dict(message))

        self.task = asyncio.create_task(
            listen_for_control(
                {"probe": probe}, layer=self.layer, refresh_seconds=self.refresh_seconds
            )
        )

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@dataclass
class Harness:
    redis: aioredis.Redis
    prefix: str
    sender: RedisChannelLayer
    listeners: list[Listener] = field(default_factory=list)

    @property
    def group_key(self) -> str:
        return f"{self.prefix}:group:{CONTROL_GROUP}"

    async def members(self) -> int:
        return await self.redis.zcard(self.group_key)

    async def listener_connections(self, client_name: str) -> list[dict]:
        return [c for c in await self.redis.client_list() if c.get("name") == client_name]

    async def blocked_connection_id(self, client_name: str) -> str | None:
        """The id of the listener's connection blocked in BZPOPMIN right now, if there is one."""
        for connection in await self.listener_connections(client_name):
            if connection.get("cmd") == "bzpopmin" and "b" in connection.get("flags", ""):
                return connection["id"]
        return None

    def listener(
        self,
        *,
        address: str | None = None,
        refresh_seconds: float = 3600.0,
        layer_class: type[RedisChannelLayer] = RedisChannelLayer,
    ) -> Listener:
        name = f"control-test-{uuid.uuid4().hex[:8]}"
        config = layer_config(prefix=self.prefix, client_name=name, address=address)
        listener = Listener(layer_class(**config), name, refresh_seconds)
        self.listeners.append(listener)
        return listener

    async def send(self, **payload: Any) -> None:
        await self.sender.group_send(CONTROL_GROUP, {"type": "probe", **payload})


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    prefix = f"test-control-{uuid.uuid4().hex[:8]}"
    client = aioredis.from_url(settings.REDIS_URL, decode_responses=True)
    sender = RedisChannelLayer(**layer_config(prefix=prefix, client_name="control-test-sender"))
    harness = Harness(client, prefix, sender)
    try:
        yield harness
    finally:
        for listener in harness.listeners:
            if listener.task is not None and not listener.task.done():
                await listener.stop()
            await listener.layer.close_pools()
        await sender.flush()
        await client.aclose()


async def next_message(listener: Listener, within: float = 3.0) -> dict:
    return await asyncio.wait_for(listener.received.get(), within)


async def test_the_layer_has_no_read_timeout_and_keeps_tcp_connections_alive():
    layer = RedisChannelLayer(**layer_config(prefix="unused", client_name="unused"))
    connection = layer.connection(0).connection_pool.make_connection()

    assert connection.socket_timeout is None  # a blocking receive is never cut short
    assert connection.socket_keepalive is True  # a dead peer is still noticed
    assert connection.socket_keepalive_options
    await layer.close_pools()


async def test_a_message_sent_at_any_moment_is_received_on_one_held_socket(harness, caplog):
    caplog.set_level(logging.INFO, logger=CONTROL_LOGGER)
    listener = harness.listener(layer_class=QuickReceiveLayer)
    await listener.start()
    await eventually(harness.members)
    first_connection = await eventually(lambda: harness.blocked_connection_id(listener.client_name))
    loop = asyncio.get_running_loop()
    start = loop.time()

    # Gaps just over one blocking receive (each send lands right after an empty BZPOPMIN
    # returned and the next one starts), and sends in quick succession, over three receives.
    # (That the socket outlives the product's own 5 s receive rests on the layer having no
    # read timeout at all: the test above.)
    for n, cycles in enumerate([0.06, 1.12, 1.14, 2.15, 2.16, 3.2]):
        await asyncio.sleep(max(0.0, start + cycles * RECEIVE_CYCLE_S - loop.time()))
        sent_at = loop.time()
        await harness.send(n=n)
        message = await next_message(listener)
        assert message["n"] == n
        assert loop.time() - sent_at < RECEIVE_CYCLE_S  # taken by the receive under way

    still_open = {c["id"] for c in await harness.listener_connections(listener.client_name)}
    assert first_connection in still_open
    assert not [r for r in caplog.records if r.name == CONTROL_LOGGER and r.levelno >= 30]
    assert await harness.members() == 1


async def test_a_killed_connection_reconnects_and_the_group_does_not_grow(harness, caplog):
    caplog.set_level(logging.INFO, logger=CONTROL_LOGGER)
    listener = harness.listener()
    await listener.start()
    await eventually(harness.members)

    for n in range(3):
        blocked = await eventually(lambda: harness.blocked_connection_id(listener.client_name))
        assert await harness.redis.client_kill_filter(_id=blocked) == 1
        await harness.send(n=n)  # sent while the listener is reconnecting
        assert (await next_message(listener, within=5.0))["n"] == n
        assert await harness.members() == 1

    reconnects = [r for r in caplog.records if "reconnected" in r.getMessage()]
    assert len(reconnects) == 3


class LoopbackProxy:
    """A TCP proxy on 127.0.0.1 in front of Redis that can be taken down and brought back,
    standing in for a Redis restart without touching the shared server."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self.server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def test_after_an_outage_the_listener_reconnects_and_gets_what_was_sent_meanwhile(
    harness, caplog
):
    caplog.set_level(logging.INFO, logger=CONTROL_LOGGER)
    redis_url = urlparse(settings.REDIS_URL)
    proxy = LoopbackProxy(redis_url.hostname or "127.0.0.1", redis_url.port or 6379)
    await proxy.up()
    listener = harness.listener(address=f"redis://127.0.0.1:{proxy.port}{redis_url.path}")
    await listener.start()
    await eventually(harness.members)
    await harness.send(n=0)
    assert (await next_message(listener))["n"] == 0
    # channels_redis delivers at least once: a message whose backup copy was not yet cleared
    # when the connection broke is delivered again. Let that clean-up finish first.
    await listener.layer.wait_received()

    await proxy.down()
    await eventually(lambda: any("attempt 2" in r.getMessage() for r in caplog.records))
    await harness.send(n=1)  # Redis is fine; the listener cannot reach it
    await proxy.up()

    assert (await next_message(listener, within=10.0))["n"] == 1
    assert await harness.members() == 1
    reconnects = [r.getMessage() for r in caplog.records if "reconnected" in r.getMessage()]
    assert len(reconnects) == 1, reconnects
    await listener.stop()
    await proxy.down()


async def test_membership_is_refreshed_while_listening(harness):
    listener = harness.listener(refresh_seconds=0.2)
    await listener.start()
    await eventually(harness.members)
    [(_, joined)] = await harness.redis.zrange(harness.group_key, 0, -1, withscores=True)

    async def refreshed() -> bool:
        [(_, score)] = await harness.redis.zrange(harness.group_key, 0, -1, withscores=True)
        return score > joined

    await eventually(refreshed, within=5.0)


async def test_a_listener_stops_promptly_and_leaves_the_group(harness):
    for n in range(5):  # cancelled right after a message, while it starts the next receive
        listener = harness.listener()
        await listener.start()
        await eventually(harness.members)
        await harness.send(n=n)
        assert (await next_message(listener))["n"] == n

        await asyncio.wait_for(listener.stop(), 2.0)

        assert await harness.members() == 0
