"""The websocket consumers through the real ASGI application (origin check, session auth,
routing) and the real Redis channel layer: who may connect, and what each live update pushes."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client

from botproject.asgi import application
from botproject.live_updates import (
    OVERVIEW_GROUP,
    LoopState,
    LoopStateName,
    LoopStep,
    UnreadCount,
    WorkerPulse,
    channel_group,
    publish_live_update,
)
from chat.heartbeats import worker_heartbeat_record
from chat.llm.fake_server import Fault, FaultKind, Reply, StreamPace
from chat.models import UnreadEvent
from chat.tests.e2e.conftest import ALICE, GENERAL
from dashboard.access import MODERATORS_GROUP

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = 1200000000000000001
RECEIVE = 5.0


def _session_cookie(username: str, *, staff: bool = False, moderator: bool = False) -> str:
    user = User.objects.create_user(username, password="x" * 20, is_staff=staff)
    if moderator:
        group, _ = Group.objects.get_or_create(name=MODERATORS_GROUP)
        user.groups.add(group)
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _socket(path: str, session: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if session:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


def _section(frame: str, element_id: str) -> str:
    """The HTML of the element ``element_id`` in a pushed frame (up to its section's end)."""
    return frame.split(f'id="{element_id}"', 1)[1].split("</section>", 1)[0]


async def _receive_until(socket: WebsocketCommunicator, needle: str) -> str:
    """Frames until one contains ``needle``; fails after `RECEIVE` seconds."""
    async with asyncio.timeout(RECEIVE):
        while True:
            frame = await socket.receive_from(timeout=RECEIVE)
            if needle in frame:
                return frame


@pytest.mark.parametrize("path", [f"/ws/channels/{CHANNEL}/", "/ws/overview/"])
async def test_anonymous_sockets_are_refused(path):
    socket = _socket(path, None)
    connected, code = await socket.connect()
    assert not connected and code == 4403


@pytest.mark.parametrize("path", [f"/ws/channels/{CHANNEL}/", "/ws/overview/"])
async def test_users_without_a_role_are_refused(path):
    session = await sync_to_async(_session_cookie)("otto")
    connected, code = await _socket(path, session).connect()
    assert not connected and code == 4403


async def test_a_moderator_gets_the_channel_now_and_every_change_after(guild_async):
    session = await sync_to_async(_session_cookie)("mo", moderator=True)
    socket = _socket(f"/ws/channels/{CHANNEL}/", session)
    connected, _ = await socket.connect()
    assert connected
    first = await socket.receive_from(timeout=RECEIVE)
    for fragment in ('id="unread-pool"', 'id="loop-state"', 'id="window"', 'id="channel-turns"'):
        assert fragment in first
    assert 'hx-swap-oob="true"' in first

    await sync_to_async(UnreadEvent.objects.create)(
        channel_id=CHANNEL,
        message_id=1400000000000000020,
        guild_id=1100000000000000001,
        author_id=1300000000000000009,
        event={"author": {"display_name": "Alice"}, "content": "is anyone awake?"},
    )
    await publish_live_update(channel_group(CHANNEL), UnreadCount(count=1))
    pushed = await _receive_until(socket, "is anyone awake?")
    assert 'id="unread-pool"' in pushed and 'data-count="1"' in pushed

    await publish_live_update(channel_group(CHANNEL), LoopState(state=LoopStateName.BUSY))
    assert 'data-state="busy"' in await _receive_until(socket, 'id="loop-state"')

    step = LoopStep(iteration=2, action="send_message", success=True, result="Tomori: replied")
    await publish_live_update(channel_group(CHANNEL), step)
    pushed = await _receive_until(socket, "send_message")
    assert 'hx-swap-oob="beforeend:#planner-steps"' in pushed and "Tomori: replied" in pushed

    # A malformed update is ignored; the socket keeps working.
    await get_channel_layer().group_send(channel_group(CHANNEL), {"type": "unread.count"})
    await publish_live_update(channel_group(CHANNEL), LoopState(state=LoopStateName.IDLE))
    await _receive_until(socket, 'data-state="idle"')
    await socket.disconnect()


async def test_an_admin_watches_the_overview_follow_worker_pulses(guild_async):
    session = await sync_to_async(_session_cookie)("ada", staff=True)
    socket = _socket("/ws/overview/", session)
    connected, _ = await socket.connect()
    assert connected
    assert "no worker connected" in await socket.receive_from(timeout=RECEIVE)
    await sync_to_async(worker_heartbeat_record)(
        holder="h:1:a",
        shard_ids=[0],
        shard_count=1,
        latencies={0: 0.05},
        guild_ids=[1100000000000000001],
    )
    pushed = await _receive_until(socket, "latency")
    assert "shard 0 of 1" in pushed and "50.0 ms" in pushed
    # The overview also listens to the configured channels' groups.
    await publish_live_update(OVERVIEW_GROUP, WorkerPulse(holder="h:1:a", shard_ids=[0]))
    await _receive_until(socket, 'id="overview"')
    await publish_live_update(channel_group(CHANNEL), UnreadCount(count=0))
    await _receive_until(socket, 'id="overview"')
    await socket.disconnect()


@pytest.mark.e2e
async def test_a_new_message_reaches_the_channel_page(dashboard_on_world):
    """From the sandbox's MESSAGE_CREATE to the pushed unread-pool fragment holding it (how
    fast: `benchmarks.live_push`, goal 200 ms)."""
    world = dashboard_on_world
    await world.start_worker()
    session = await sync_to_async(_session_cookie)("mo", moderator=True)
    socket = _socket(f"/ws/channels/{GENERAL}/", session)
    assert (await socket.connect())[0]
    await socket.receive_from(timeout=RECEIVE)  # the page as it is now
    for n in range(3):
        text = f"new message {n}"
        world.say(text, author=ALICE)
        await _receive_until(socket, text)
        await world.drained()
    await socket.disconnect()


@pytest.mark.e2e
async def test_the_window_appears_while_the_model_is_still_answering(dashboard_on_world):
    world = dashboard_on_world
    world.llm.enqueue(Fault(FaultKind.TIMEOUT, delay=1.0))  # the first attempt hangs a second
    await world.start_worker()
    session = await sync_to_async(_session_cookie)("mo", moderator=True)
    socket = _socket(f"/ws/channels/{GENERAL}/", session)
    assert (await socket.connect())[0]
    await socket.receive_from(timeout=RECEIVE)
    world.say("tomori, take your time")
    async with asyncio.timeout(RECEIVE):
        while True:
            frame = await socket.receive_from(timeout=RECEIVE)
            if 'id="window"' in frame and "take your time" in _section(frame, "window"):
                break
    # The same frame, rendered as the window was recorded: the model has not answered yet.
    assert '<span class="status running">running</span>' in _section(frame, "channel-turns")
    await _receive_until(socket, '<span class="status replied">replied</span>')
    await socket.disconnect()


async def test_the_channel_page_shows_a_streaming_turn_piece_by_piece(dashboard_on_world):
    world = dashboard_on_world
    paragraphs = ["A first paragraph, out early.", "A second one, later.", "The end."]
    world.llm.enqueue(
        Reply("\n\n".join(paragraphs), pace=StreamPace(first_token_s=0.1, words_per_s=5))
    )
    await world.start_worker(stream=True)
    session = await sync_to_async(_session_cookie)("mo", moderator=True)
    socket = _socket(f"/ws/channels/{GENERAL}/", session)
    assert (await socket.connect())[0]
    await socket.receive_from(timeout=RECEIVE)
    world.say("tomori, tell me slowly")

    frame = await _receive_until(socket, paragraphs[0])
    turns = _section(frame, "channel-turns")
    # The first paragraph is shown while the model is still writing the rest.
    assert '<span class="status delivering">delivering</span>' in turns
    assert paragraphs[1] not in turns
    frame = await _receive_until(socket, '<span class="status replied">replied</span>')
    assert paragraphs[2] in _section(frame, "channel-turns")
    await socket.disconnect()
