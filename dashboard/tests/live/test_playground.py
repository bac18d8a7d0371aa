"""The playground is a conversation: the sandbox channel as a chat (author, avatar, time),
sending without JavaScript, and persona replies pushed over the socket as they arrive."""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.sandbox.demo import DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.privacy import user_privacy
from dashboard.tests.live.conftest import make_client
from dashboard.tests.live.test_consumers import _receive_until, _session_cookie, _socket
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

ANON_AVATAR = "https://example.org/anon.png"


def _chat(html: str) -> str:
    return html.split('id="playground-chat"', 1)[1].split("</section>", 1)[0]


def _authors(chat: str) -> list[str]:
    """The chat's authors, oldest first (the markup is newest first)."""
    return list(reversed(re.findall(r'class="chat-author"[^>]*>([^<]+)<', chat)))


async def test_sending_works_without_javascript_and_the_reply_joins_the_chat(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(Persona.objects.filter(name="Anon").update)(avatar_url=ANON_AVATAR)
    await world.start_worker()
    admin = await sync_to_async(make_client)("ada", staff=True)

    response = await sync_to_async(admin.post)(
        "/playground/", {"channel": GENERAL, "author": ALICE, "content": "anon, sing something!"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/playground/?channel={GENERAL}&as={ALICE}#playground-chat"
    page = (await sync_to_async(admin.get)(response["Location"])).content.decode()
    chat = _chat(page)
    assert "#general" in chat
    assert _authors(chat) == ["Alice"]
    assert "anon, sing something!" in chat
    assert f'<option value="{ALICE}" selected>' in page  # the box keeps who was typing

    [reply] = await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()
    chat = _chat((await sync_to_async(admin.get)(response["Location"])).content.decode())
    assert _authors(chat) == ["Alice", "Anon"]  # the alter persona under its own name
    assert f'src="{ANON_AVATAR}"' in chat
    assert reply["content"] in chat.replace("&#x27;", "'")
    assert re.search(r'<time class="muted small" datetime="[^"]+"[^>]*>\d\d:\d\d</time>', chat)


async def test_a_user_with_full_privacy_is_in_the_chat_without_name_or_words(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(user_privacy)(BOB, guild_id=DEMO_GUILD_ID, level="full")
    world.say("my secret words", author=BOB)
    admin = await sync_to_async(make_client)("ada", staff=True)

    chat = _chat(
        (await sync_to_async(admin.get)(f"/playground/?channel={GENERAL}")).content.decode()
    )
    assert _authors(chat) == ["a user with full privacy"]
    assert "my secret words" not in chat and "Bob" not in chat


async def test_the_socket_pushes_each_reply_as_it_arrives(dashboard_on_world):
    world = dashboard_on_world
    await world.start_worker()
    session = await sync_to_async(_session_cookie)("ada", staff=True)
    socket = _socket(f"/ws/playground/{GENERAL}/", session)
    connected, _ = await socket.connect()
    assert connected
    first = await _receive_until(socket, 'id="playground-chat"')
    assert "No message yet" in _chat(first)

    world.say("tomori, are you there?", author=BOB)
    said = await _receive_until(socket, "tomori, are you there?")
    assert 'id="playground-chat" class="card chat" hx-swap-oob="true"' in said
    await eventually(lambda: world.bot_messages(GENERAL))
    pushed = await _receive_until(socket, 'class="chat-author" title="user id')
    while "Tomori" not in _authors(_chat(pushed)):
        pushed = await _receive_until(socket, 'id="playground-chat"')
    assert _authors(_chat(pushed)) == ["Bob", "Tomori"]
    await socket.disconnect()


async def test_only_admins_get_the_playground_socket(dashboard_on_world):
    session = await sync_to_async(_session_cookie)("mo", moderator=True)
    socket = _socket(f"/ws/playground/{GENERAL}/", session)
    connected, code = await socket.connect()
    assert not connected and code == 4403


async def _in_own_thread(call, *args, **kwargs):
    """Run a dashboard request in a thread of its own (closing its database connection after):
    the view waits for the worker's answer, and the worker's database work runs on the
    thread `sync_to_async` would otherwise block."""

    def request():
        try:
            return call(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(request)


async def test_the_command_box_runs_a_slash_command_as_the_demo_user(dashboard_on_world):
    world = dashboard_on_world
    await world.start_worker()
    admin = await sync_to_async(make_client)("ada", staff=True)

    page = await _in_own_thread(
        admin.post,
        "/playground/",
        {"channel": GENERAL, "author": ALICE, "command": "/memory add text: I like green tea"},
    )
    answer = await _in_own_thread(
        admin.post,
        "/playground/",
        {"channel": GENERAL, "author": ALICE, "command": "/memory show"},
        HTTP_HX_REQUEST="true",
    )
    refused = await _in_own_thread(
        admin.post, "/playground/", {"channel": GENERAL, "author": BOB, "command": "/nope"}
    )

    assert page.status_code == 200
    assert "Remembered: 1. I like green tea" in page.content.decode()
    assert 'id="command-form"' in page.content.decode()
    html = answer.content.decode()
    assert html.startswith('<div id="command-answer"') and "/memory show · only you can see" in html
    assert "1. I like green tea — added by you with /memory" in html
    assert refused.status_code == 400
    assert "Unknown application command: nope" in refused.content.decode()
    [interaction, *_] = world.sandbox.sandbox.interactions.records()
    assert (interaction.user_id, interaction.command) == (ALICE, "memory add")
