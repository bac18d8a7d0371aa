"""How fast a new message reaches a moderator's open channel page.

Run: ``.venv/bin/python -m benchmarks.live_push``

The real worker runs against the local sandbox over websockets (as in `benchmarks.model_calls`,
on a throwaway database of the configured kind), and a moderator's socket is connected to the
channel page through the real ASGI application (origin check, session auth, routing). Each
measured message is timed from the sandbox's MESSAGE_CREATE to the pushed unread-pool fragment
that holds it; the worker and the consumer share the process's channel layer (in memory), so
the figure is the product's own path, not Redis's round trip. A first message warms up (first
queries, first layer connection) and is not counted; nobody answers the measured messages.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time

from benchmarks.model_calls import DEMO_CONFIG
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

MESSAGES = 20
RECEIVE = 5.0
GOAL_MS = 200


async def _receive_until(socket, needle: str) -> None:
    async with asyncio.timeout(RECEIVE):
        while needle not in await socket.receive_from(timeout=RECEIVE):
            pass


def _moderator_session() -> str:
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from dashboard.access import MODERATORS_GROUP

    user = User.objects.create_user("bench-moderator", password="x" * 20)
    user.groups.add(Group.objects.get_or_create(name=MODERATORS_GROUP)[0])
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def _run() -> list[float]:
    """Milliseconds from each measured message's dispatch to the fragment that shows it."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.db import connections

    from botproject.asgi import application
    from chat.llm.fake_server import FakeLLMServer
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
    from chat.sandbox.harness import World
    from personas.services import config_import

    general, alice = DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["alice"]
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    session = await sync_to_async(_moderator_session)()
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with SandboxServer(demo_sandbox(), gateway=gateway) as sandbox, FakeLLMServer() as llm:
        world = World(sandbox=sandbox, llm=llm)
        await world.start_worker()
        headers = [
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()),
        ]
        socket = WebsocketCommunicator(application, f"/ws/channels/{general}/", headers=headers)
        try:
            assert (await socket.connect())[0], "the moderator's socket was refused"
            await socket.receive_from(timeout=RECEIVE)  # the page as it is now
            world.say("warming up, nobody answers this", channel_id=general, author=alice)
            await _receive_until(socket, "warming up, nobody answers this")
            await world.drained()
            timings = []
            for n in range(MESSAGES):
                text = f"measured message {n}"
                started = time.perf_counter()
                world.say(text, channel_id=general, author=alice)
                await _receive_until(socket, text)
                timings.append((time.perf_counter() - started) * 1000)
                await world.drained()
        finally:
            await socket.disconnect()
            await world.stop_worker()
            await sync_to_async(connections.close_all)()
    return timings


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-live-push-") as directory:
        database = setup_django(directory, prefix="bench_live_push")
        try:
            timings = asyncio.run(_run())
        finally:
            teardown_django(database)
    p50, worst = statistics.median(timings), max(timings)
    emit(
        [
            Row(
                f"a new message reaches the open channel page ({len(timings)} messages)",
                f"p50 {p50:.0f} ms, max {worst:.0f} ms",
                goal=f"≤ {GOAL_MS} ms",
            )
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
