"""The control surface from another process: the `/_sandbox` HTTP API, its client, and the
`runsandbox` / `sandboxsay` commands."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from chat.sandbox import SandboxServer
from chat.sandbox.control import ControlClient, ControlError, find_channel_id, find_user_id
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_CHANNEL_IDS, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RecordingClient, running
from chat.tests.sandbox.test_interactions import CommandClient

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]
BOB = DEMO_USER_IDS["bob"]
PROJECT_ROOT = Path(__file__).resolve().parents[3]


async def control(server: SandboxServer, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """One control API call: (status, decoded body or None)."""
    url = f"{server.base_url}/_sandbox{path}"
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as answer:
        return answer.status, await answer.json() if answer.status != 204 else None


async def test_users_act_through_the_http_api(server: SandboxServer, bot: RecordingClient) -> None:
    status, said = await control(
        server,
        "POST",
        f"/channels/{GENERAL}/messages",
        json={
            "author_id": str(ALICE),
            "content": "see attached",
            "attachments": [{"filename": "a.txt", "text": "hello", "content_type": "text/plain"}],
        },
    )
    assert status == 200
    message = await bot.next_event("message")
    assert (message.content, await message.attachments[0].read()) == ("see attached", b"hello")

    mid = said["id"]
    assert (
        await control(
            server,
            "PATCH",
            f"/channels/{GENERAL}/messages/{mid}",
            json={"content": "see attached!"},
        )
    )[0] == 200
    assert (await bot.next_event("raw_message_edit")).message.content == "see attached!"
    reaction = {"user_id": str(BOB), "emoji": "👍"}
    assert (
        await control(server, "PUT", f"/channels/{GENERAL}/messages/{mid}/reactions", json=reaction)
    )[0] == 204
    assert (await bot.next_event("raw_reaction_add")).user_id == BOB
    assert (
        await control(
            server, "DELETE", f"/channels/{GENERAL}/messages/{mid}/reactions", json=reaction
        )
    )[0] == 204
    assert (await bot.next_event("raw_reaction_remove")).user_id == BOB
    assert (
        await control(server, "POST", f"/channels/{GENERAL}/typing", json={"user_id": str(BOB)})
    )[0] == 204
    assert (await bot.next_event("raw_typing")).user_id == BOB
    assert (await control(server, "DELETE", f"/channels/{GENERAL}/messages/{mid}"))[0] == 204
    assert (await bot.next_event("raw_message_delete")).message_id == int(mid)


async def test_faults_requests_and_gateway_are_driven_over_http(
    server: SandboxServer, bot: RecordingClient
) -> None:
    fault = {"method": "GET", "path": "/channels/{channel_id}", "status": 502}
    assert (await control(server, "POST", "/faults", json=fault))[0] == 204
    await bot.fetch_channel(GENERAL)  # discord.py retries the 502
    _, counts = await control(server, "GET", "/requests")
    assert {"method": "GET", "route": "/channels/{channel_id}", "count": 2} in counts

    assert (await control(server, "POST", "/gateway/drop"))[1] == {"count": 1}
    await bot.next_event("resumed")
    assert (await control(server, "POST", "/gateway/reconnect"))[1] == {"count": 1}
    await bot.next_event("resumed")
    server.sandbox.user_says(GENERAL, ALICE, "twice")
    await bot.next_event("message")
    assert (await control(server, "POST", "/gateway/replay", json={"count": 1}))[1] == {"count": 1}
    assert (await bot.next_event("message")).content == "twice"
    assert (await control(server, "POST", "/gateway/invalidate"))[1] == {"count": 1}
    await bot.wait_for("ready", timeout=5)
    _, sessions = await control(server, "GET", "/gateway/sessions")
    assert [s["connected"] for s in sessions] == [True]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", f"/channels/{GENERAL}/messages", {"author_id": "1", "content": "x"}, 404),
        ("POST", f"/channels/{GENERAL}/messages", {"author_id": str(ALICE)}, 400),
        (
            "POST",
            f"/channels/{GENERAL}/messages",
            {"author_id": str(ALICE), "content": "x", "typo": 1},
            400,
        ),
        ("POST", "/faults", {"method": "GET", "path": "/x", "status": 200}, 400),
        ("POST", "/gateway/replay", {"count": 0}, 400),
    ],
)
async def test_bad_control_requests_answer_discord_style_errors(
    server: SandboxServer, method: str, path: str, body: object, status: int
) -> None:
    answer_status, answer = await control(server, method, path, json=body)
    assert answer_status == status
    assert {"message", "code"} <= answer.keys()


async def test_control_client_resolves_names_and_reads_new_messages(server: SandboxServer) -> None:
    async with ControlClient(server.base_url) as client:
        world = await client.world()
        assert world["endpoints"]["gateway_url"] == server.gateway_url
        channel_id, alice = find_channel_id(world, "#general"), find_user_id(world, "Alice")
        first = await client.say(channel_id, alice, "one")
        await client.say(channel_id, alice, "two", reply_to=int(first["id"]))
        newer = await client.messages(channel_id, after=int(first["id"]))
        with pytest.raises(ControlError):
            await client.say(channel_id, alice, "")

    assert (channel_id, alice) == (GENERAL, ALICE)
    assert [(m["content"], m["type"]) for m in newer] == [("two", 19)]
    with pytest.raises(LookupError):
        find_user_id(world, "mallory")


async def say(*args: str) -> str:
    """Run `sandboxsay` in a worker thread (it runs its own event loop); its stdout."""
    out = io.StringIO()
    await asyncio.to_thread(call_command, "sandboxsay", *args, stdout=out)
    return out.getvalue()


async def test_sandboxsay_posts_as_a_user_and_prints_the_bot_reply(
    server: SandboxServer, bot: RecordingClient
) -> None:
    async def answer() -> None:
        message = await bot.next_event("message")
        await message.reply(f"Hello, {message.author.display_name}!")

    responder = asyncio.create_task(answer())
    output = await say(
        "--url",
        server.base_url,
        "--channel",
        "#general",
        "--as",
        "alice",
        "--wait",
        "2",
        "hi",
        "there",
    )
    await responder

    said_id, reply_line = output.splitlines()
    said = server.sandbox.message(GENERAL, int(said_id))
    assert (said["content"], said["author"]["id"]) == ("hi there", str(ALICE))
    assert reply_line.endswith(" Tomori: Hello, Alice!")


async def test_sandboxsay_explains_what_went_wrong(server: SandboxServer) -> None:
    with pytest.raises(CommandError, match=r"no channel matches 'lobby'"):
        await say("--url", server.base_url, "--channel", "lobby", "hi")
    with pytest.raises(CommandError, match=r"no sandbox answers at http://127\.0\.0\.1:9 "):
        await say("--url", "http://127.0.0.1:9", "hi")


async def test_sandboxsay_runs_a_slash_command_and_prints_the_answer(
    server: SandboxServer,
) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        output = await say(
            "--url", server.base_url, "--as", "bob", "--command", "/echo", "--option", "text=hi"
        )
        with pytest.raises(CommandError, match=r"--option 'text': write it as NAME=VALUE"):
            await say("--url", server.base_url, "--command", "echo", "--option", "text")
        with pytest.raises(CommandError, match=r"/echo has no option 'txt'"):
            await say("--url", server.base_url, "--command", "echo", "--option", "txt=hi")

    assert output.strip() == "echo: hi"
    [record] = server.sandbox.interactions.records()
    assert (record.user_id, record.command, record.content) == (BOB, "echo", "echo: hi")


async def manage(*args: str) -> asyncio.subprocess.Process:
    """`manage.py` in a child process (`runsandbox` handles signals, so it needs a main
    thread of its own), with piped output."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        *args,
        cwd=PROJECT_ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "botproject.settings_test"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_runsandbox_serves_the_demo_world_until_sigterm() -> None:
    process = await manage("runsandbox", "--port", "0", "--token", "t0k3n")
    try:
        assert process.stdout is not None
        exports: dict[str, str] = {}
        while "MODERATION_BASE_URL" not in exports:
            line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
            assert line, (await process.stderr.read()).decode()
            if line.strip().startswith("export "):
                name, value = line.strip().removeprefix("export ").split("=", 1)
                exports[name] = value
        assert exports["DISCORD_TOKEN"] == "t0k3n"
        assert exports["DISCORD_GATEWAY_URL"].startswith("ws://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": "Bot t0k3n"}
            async with session.get(
                f"{exports['DISCORD_API_BASE']}/users/@me", headers=headers
            ) as response:
                assert (await response.json())["id"] == str(DEMO_BOT_ID)
            async with session.post(
                f"{exports['MODERATION_BASE_URL']}/moderations",
                json={"model": "omni-moderation-latest", "input": "say flag:violence"},
            ) as response:
                [result] = (await response.json())["results"]
                assert result["flagged"] and result["categories"]["violence"]
    finally:
        process.send_signal(signal.SIGTERM)
        remaining, _ = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 0
    assert remaining.decode().strip().endswith("Sandbox stopped.")


async def test_runsandbox_on_a_busy_port_says_so(server: SandboxServer) -> None:
    process = await manage("runsandbox", "--port", str(server.port))
    _, errors = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 1
    assert f"cannot serve the sandbox on 127.0.0.1:{server.port}" in errors.decode()
