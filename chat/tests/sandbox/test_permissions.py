"""The sandbox refuses what the bot may not do, as Discord does: roles, channel and category
overwrites, timeouts (403 50001 / 50013), and privileged intents the application does not
allow (gateway close 4014)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import aiohttp
import discord
import pytest

from chat.sandbox import Sandbox, SandboxServer
from chat.tests.sandbox.conftest import RecordingClient, full_intents, running, serve

VIEW, SEND, HISTORY = 1 << 10, 1 << 11, 1 << 16
REACT, ATTACH, WEBHOOKS, THREAD_SEND = 1 << 6, 1 << 15, 1 << 29, 1 << 38
CHAT = VIEW | SEND | HISTORY | REACT
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)


class World:
    """A guild owned by a person, where the bot holds its own role with ``CHAT`` only."""

    def __init__(self) -> None:
        self.sandbox = Sandbox()
        self.owner = self.sandbox.add_user("owner")
        self.alice = self.sandbox.add_user("alice")
        self.guild = self.sandbox.add_guild("Café", owner_id=self.owner, bot_permissions=CHAT)
        self.sandbox.set_role_permissions(self.guild, self.guild, 0)  # @everyone: nothing
        self.sandbox.add_member(self.guild, self.alice)
        self.category = self.sandbox.add_category(self.guild, "Talk")
        self.general = self.sandbox.add_text_channel(self.guild, "general")
        self.poetry = self.sandbox.add_text_channel(self.guild, "poetry", category_id=self.category)
        self.bot_role = self.sandbox.bot_role_id(self.guild)


@pytest.fixture
async def world() -> AsyncIterator[tuple[World, SandboxServer, aiohttp.ClientSession]]:
    made = World()
    async with serve(made.sandbox) as server, aiohttp.ClientSession() as session:
        yield made, server, session


async def call(server, session, method: str, path: str, **kwargs) -> tuple[int, object]:
    headers = {"Authorization": f"Bot {server.token}"}
    async with session.request(method, server.api_base + path, headers=headers, **kwargs) as r:
        return r.status, (await r.json() if r.status != 204 else None)


def code(answer: tuple[int, object]) -> tuple[int, int]:
    status, body = answer
    return status, body["code"]  # type: ignore[index]


async def test_a_role_that_grants_chat_lets_the_bot_send_and_read(world):
    made, server, session = world

    status, _ = await call(
        server, session, "POST", f"/channels/{made.general}/messages", json={"content": "hi"}
    )

    assert status == 200
    assert made.sandbox.channel_permissions(made.general, made.sandbox.bot_user_id) == CHAT


async def test_an_everyone_overwrite_denying_send_is_missing_permissions(world):
    made, server, session = world
    made.sandbox.set_overwrite(made.general, made.guild, deny=SEND)

    sent = await call(
        server, session, "POST", f"/channels/{made.general}/messages", json={"content": "hi"}
    )
    history = await call(server, session, "GET", f"/channels/{made.general}/messages")

    assert code(sent) == (403, 50013)
    assert history == (200, [])
    assert made.sandbox.channel_messages(made.general) == []


async def test_a_role_overwrite_allowing_it_back_wins_over_the_everyone_denial(world):
    made, server, session = world
    made.sandbox.set_overwrite(made.general, made.guild, deny=SEND)
    made.sandbox.set_overwrite(made.general, made.bot_role, allow=SEND)

    status, _ = await call(
        server, session, "POST", f"/channels/{made.general}/messages", json={"content": "hi"}
    )

    assert status == 200


async def test_a_channel_the_bot_cannot_see_is_missing_access(world):
    made, server, session = world
    made.sandbox.set_overwrite(made.general, made.bot_role, deny=VIEW)

    assert code(await call(server, session, "GET", f"/channels/{made.general}")) == (403, 50001)
    assert code(await call(server, session, "GET", f"/channels/{made.general}/messages")) == (
        403,
        50001,
    )


async def test_without_read_message_history_the_history_is_empty(world):
    made, server, session = world
    made.sandbox.set_role_permissions(made.guild, made.guild, VIEW | SEND)
    made.sandbox.user_says(made.general, made.alice, "hello")
    made.sandbox.set_overwrite(made.general, made.bot_role, deny=HISTORY)

    answer = await call(server, session, "GET", f"/channels/{made.general}/messages")

    assert answer == (200, [])


async def test_webhooks_need_manage_webhooks(world):
    made, server, session = world
    path = f"/channels/{made.general}/webhooks"

    refused = await call(server, session, "POST", path, json={"name": "Persona bot"})
    made.sandbox.set_overwrite(made.general, made.bot_role, allow=WEBHOOKS)
    created, _ = await call(server, session, "POST", path, json={"name": "Persona bot"})
    listed, hooks = await call(server, session, "GET", path)

    assert code(refused) == (403, 50013)
    assert (created, listed, len(hooks)) == (200, 200, 1)


async def test_a_new_reaction_needs_add_reactions_but_joining_one_does_not(world):
    made, server, session = world
    made.sandbox.set_role_permissions(made.guild, made.guild, VIEW | SEND)
    message = made.sandbox.user_says(made.general, made.alice, "hello")
    made.sandbox.set_overwrite(made.general, made.bot_role, deny=REACT)
    path = f"/channels/{made.general}/messages/{message['id']}/reactions/%E2%8F%B3/@me"

    refused = await call(server, session, "PUT", path)
    made.sandbox.user_reacts(made.general, int(message["id"]), made.alice, "⏳")
    joined, _ = await call(server, session, "PUT", path)

    assert code(refused) == (403, 50013)
    assert joined == 204


async def test_files_need_attach_files(world):
    made, server, session = world
    form = aiohttp.FormData()
    form.add_field("payload_json", '{"content": "here"}', content_type="application/json")
    form.add_field("files[0]", b"text", filename="prompt.json")

    answer = await call(server, session, "POST", f"/channels/{made.general}/messages", data=form)

    assert code(answer) == (403, 50013)


async def test_a_category_overwrite_reaches_its_synced_channels_until_one_is_set_on_its_own(world):
    made, server, session = world

    made.sandbox.set_overwrite(made.category, made.bot_role, deny=SEND)
    refused = await call(
        server, session, "POST", f"/channels/{made.poetry}/messages", json={"content": "a"}
    )
    elsewhere, _ = await call(
        server, session, "POST", f"/channels/{made.general}/messages", json={"content": "a"}
    )
    made.sandbox.set_overwrite(made.poetry, made.bot_role, allow=SEND)  # ends the sync
    made.sandbox.set_overwrite(made.category, made.bot_role, deny=SEND | VIEW)
    own, _ = await call(
        server, session, "POST", f"/channels/{made.poetry}/messages", json={"content": "b"}
    )
    _, channel = await call(server, session, "GET", f"/channels/{made.poetry}")

    assert code(refused) == (403, 50013)
    assert (elsewhere, own) == (200, 200)
    assert channel["parent_id"] == str(made.category)
    assert channel["permission_overwrites"] == [
        {"id": str(made.bot_role), "type": 0, "allow": str(SEND), "deny": "0"}
    ]


async def test_a_timed_out_bot_may_read_but_not_send(world):
    made, server, session = world
    until = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)
    made.sandbox.time_out(made.guild, made.sandbox.bot_user_id, until)

    sent = await call(
        server, session, "POST", f"/channels/{made.general}/messages", json={"content": "hi"}
    )
    read, _ = await call(server, session, "GET", f"/channels/{made.general}/messages")
    _, member = await call(
        server, session, "GET", f"/guilds/{made.guild}/members/{made.sandbox.bot_user_id}"
    )

    assert code(sent) == (403, 50013)
    assert read == 200
    assert member["communication_disabled_until"] is not None


async def test_the_bot_lists_its_guilds_and_cannot_read_one_it_is_not_in(world):
    made, server, session = world
    other = made.sandbox.add_guild("Elsewhere", owner_id=made.owner, bot_joined=False)

    _, guilds = await call(server, session, "GET", "/users/@me/guilds")
    _, roles = await call(server, session, "GET", f"/guilds/{made.guild}/roles")
    refused = await call(server, session, "GET", f"/guilds/{other}/channels")

    assert [g["name"] for g in guilds] == ["Café"]
    assert {r["name"] for r in roles} == {"@everyone", "Sandbox Bot"}
    assert code(refused) == (403, 50001)


async def test_discord_py_sees_the_overwrites_the_sandbox_applies(world):
    made, server, _ = world
    made.sandbox.set_overwrite(made.general, made.guild, deny=SEND)

    async with running(RecordingClient(), server.token) as client:
        channel = client.get_channel(made.general)
        permissions = channel.permissions_for(channel.guild.me)
        made.sandbox.set_overwrite(made.general, made.bot_role, allow=SEND)
        await client.wait_for("guild_channel_update", timeout=5)
        after = channel.guild.get_channel(made.general).permissions_for(channel.guild.me)

    assert (permissions.send_messages, permissions.read_message_history) == (False, True)
    assert after.send_messages is True


async def test_a_privileged_intent_the_application_does_not_allow_closes_with_4014():
    sandbox = Sandbox()
    sandbox.set_application_flags(sandbox.application_flags & ~MESSAGE_CONTENT_FLAGS)
    async with serve(sandbox) as server:
        client = RecordingClient(intents=full_intents())
        with pytest.raises(discord.PrivilegedIntentsRequired):
            async with running(client, server.token):
                pass
        refused = [r.reason for r in server.identifies()]
        application = sandbox.application()

    assert refused == ["disallowed_intents"]
    assert not application["flags"] & MESSAGE_CONTENT_FLAGS


async def test_without_the_privileged_intent_the_same_application_identifies():
    sandbox = Sandbox()
    sandbox.set_application_flags(sandbox.application_flags & ~MESSAGE_CONTENT_FLAGS)
    intents = full_intents()
    intents.message_content = False
    async with serve(sandbox) as server, running(RecordingClient(intents=intents), server.token):
        accepted = [r.refused for r in server.identifies()]

    assert accepted == [False]


async def test_the_control_api_sets_flags_overwrites_and_roles(world):
    made, server, session = world
    control = server.base_url + "/_sandbox"

    async with session.post(control + "/application", json={"flags": 0}) as answer:
        flags = (await answer.json())["flags"]
    async with session.post(
        f"{control}/guilds/{made.guild}/roles", json={"name": "Hooks", "permissions": WEBHOOKS}
    ) as answer:
        role_id = int((await answer.json())["id"])
    async with session.put(
        f"{control}/guilds/{made.guild}/members/{made.sandbox.bot_user_id}/roles",
        json={"role_ids": [str(made.bot_role), str(role_id)]},
    ) as answer:
        assert answer.status == 204
    async with session.put(
        f"{control}/channels/{made.general}/overwrites/{made.guild}", json={"deny": THREAD_SEND}
    ) as answer:
        overwrites = (await answer.json())["permission_overwrites"]

    bot_in_general = made.sandbox.channel_permissions(made.general, made.sandbox.bot_user_id)
    assert flags == made.sandbox.application_flags == 0
    assert bot_in_general & WEBHOOKS and not bot_in_general & THREAD_SEND
    everyone = {"id": str(made.guild), "type": 0, "allow": "0", "deny": str(THREAD_SEND)}
    assert overwrites == [everyone]
