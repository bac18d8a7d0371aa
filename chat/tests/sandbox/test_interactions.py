"""Application commands and interactions: discord.py's own CommandTree, unchanged, against the
sandbox (sync, INTERACTION_CREATE, callbacks, @original edits, follow-ups, files, flags)."""

from __future__ import annotations

import asyncio
import io

import discord
import pytest
from discord import app_commands

from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.sandbox.errors import DiscordAPIError
from chat.sandbox.interactions import (
    CALLBACK_DEFERRED,
    CALLBACK_MESSAGE,
    EPHEMERAL,
    InteractionRecord,
)
from chat.tests.sandbox.conftest import RecordingClient, RestCaller, running

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE, BOB = DEMO_USER_IDS["alice"], DEMO_USER_IDS["bob"]
MANAGE_MESSAGES = 1 << 13


class CommandClient(RecordingClient):
    """A plain client with an app-command tree: /echo, /slow, /clean (Manage Messages), and the
    message command "Quote"; each records the interaction it received."""

    def __init__(self) -> None:
        super().__init__()
        self.tree = app_commands.CommandTree(self)
        self.seen: asyncio.Queue[discord.Interaction] = asyncio.Queue()

        @self.tree.command(description="Say it back")
        @app_commands.describe(text="What to say")
        async def echo(interaction: discord.Interaction, text: str) -> None:
            self.seen.put_nowait(interaction)
            await interaction.response.send_message(f"echo: {text}", ephemeral=True)

        @self.tree.command(description="Think, then answer with a file and a follow-up")
        async def slow(interaction: discord.Interaction) -> None:
            self.seen.put_nowait(interaction)
            await interaction.response.defer(ephemeral=True, thinking=True)
            await interaction.edit_original_response(
                content="done", attachments=[discord.File(_bytes(b'{"a": 1}'), "a.json")]
            )
            await interaction.followup.send("and one more", ephemeral=True)

        @self.tree.command(description="Moderators only")
        @app_commands.default_permissions(manage_messages=True)
        async def clean(interaction: discord.Interaction) -> None:
            self.seen.put_nowait(interaction)
            await interaction.response.send_message("cleaned", ephemeral=True)

        @self.tree.context_menu(name="Quote")
        async def quote(interaction: discord.Interaction, message: discord.Message) -> None:
            self.seen.put_nowait(interaction)
            await interaction.response.send_message(f"> {message.content}", ephemeral=True)


def _bytes(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


async def answered(server: SandboxServer, record: InteractionRecord) -> None:
    for _ in range(200):
        if record.answered and (record.command != "slow" or len(record.answers) >= 3):
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"no answer to {record.command}: {record.answers}")


async def test_guild_sync_stores_the_commands_and_a_second_sync_keeps_their_ids(
    server: SandboxServer, rest: RestCaller
) -> None:
    async with running(CommandClient(), server.token) as client:
        guild = discord.Object(DEMO_GUILD_ID)
        client.tree.copy_global_to(guild=guild)
        first = await client.tree.sync(guild=guild)
        again = await client.tree.sync(guild=guild)

    assert sorted(c.name for c in first) == ["Quote", "clean", "echo", "slow"]
    assert {c.name: c.id for c in first} == {c.name: c.id for c in again}
    clean = next(c for c in first if c.name == "clean")
    assert clean.default_member_permissions == discord.Permissions(manage_messages=True)
    status, listed = await rest("GET", f"/applications/{server.sandbox.bot_user_id}/commands")
    assert (status, listed) == (200, [])  # nothing global
    status, listed = await rest(
        "GET", f"/applications/{server.sandbox.bot_user_id}/guilds/{DEMO_GUILD_ID}/commands"
    )
    assert status == 200 and {c["name"] for c in listed} == {"Quote", "clean", "echo", "slow"}


async def test_global_sync_then_a_chat_command_is_answered_ephemerally(
    server: SandboxServer,
) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        record = server.sandbox.interactions.run(GENERAL, BOB, "echo", {"text": "hi"})
        seen = await asyncio.wait_for(client.seen.get(), 5)
        await answered(server, record)

    assert seen.user.id == BOB and seen.channel_id == GENERAL
    assert seen.permissions.send_messages and not seen.permissions.manage_messages
    assert seen.app_permissions.administrator
    [answer] = record.answers
    assert (answer.via, answer.type, answer.content) == ("callback", CALLBACK_MESSAGE, "echo: hi")
    assert answer.flags & EPHEMERAL and answer.seconds < 3
    assert all(m["content"] != "echo: hi" for m in server.sandbox.channel_messages(GENERAL))


async def test_a_deferred_answer_is_edited_with_a_file_and_followed_up(
    server: SandboxServer,
) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        record = server.sandbox.interactions.run(GENERAL, BOB, "slow")
        await answered(server, record)

    deferral, edit, followup = record.answers
    assert (deferral.via, deferral.type, deferral.ephemeral) == (
        "callback",
        CALLBACK_DEFERRED,
        True,
    )
    assert (edit.via, edit.content, [f.filename for f in edit.files]) == (
        "original",
        "done",
        ["a.json"],
    )
    assert edit.files[0].data == b'{"a": 1}' and edit.ephemeral
    assert (followup.via, followup.content, followup.ephemeral) == (
        "followup",
        "and one more",
        True,
    )
    assert record.content == "and one more"


async def test_a_message_command_carries_the_target_message(server: SandboxServer) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        target = server.sandbox.user_says(GENERAL, BOB, "quote me")
        record = server.sandbox.interactions.run(
            GENERAL, ALICE, "Quote", target_message_id=int(target["id"])
        )
        await answered(server, record)

    assert record.content == "> quote me"


async def test_default_permissions_hide_a_command_unless_the_guild_overrides_them(
    server: SandboxServer,
) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        with pytest.raises(DiscordAPIError) as refused:
            server.sandbox.interactions.run(GENERAL, BOB, "clean")
        assert refused.value.status == 403
        record = server.sandbox.interactions.run(GENERAL, BOB, "clean", overridden=True)
        seen = await asyncio.wait_for(client.seen.get(), 5)
        await answered(server, record)
        moderators = server.sandbox.add_role(
            DEMO_GUILD_ID, "Moderators", permissions=MANAGE_MESSAGES
        )
        server.sandbox.add_member(DEMO_GUILD_ID, BOB, role_ids=[moderators])
        granted = server.sandbox.interactions.run(GENERAL, BOB, "clean")
        seen_granted = await asyncio.wait_for(client.seen.get(), 5)
        await answered(server, granted)

    assert not seen.permissions.manage_messages
    assert seen_granted.permissions.manage_messages


async def test_a_second_callback_and_unknown_options_are_refused(
    server: SandboxServer, rest: RestCaller
) -> None:
    async with running(CommandClient(), server.token) as client:
        await client.tree.sync()
        with pytest.raises(DiscordAPIError, match="no option"):
            server.sandbox.interactions.run(GENERAL, BOB, "echo", {"txt": "x"})
        with pytest.raises(DiscordAPIError, match="required"):
            server.sandbox.interactions.run(GENERAL, BOB, "echo")
        record = server.sandbox.interactions.run(GENERAL, BOB, "echo", {"text": "x"})
        await answered(server, record)

    status, body = await rest(
        "POST",
        f"/interactions/{record.id}/{record.token}/callback",
        json={"type": 4, "data": {"content": "again"}},
        auth=False,
    )
    assert (status, body["code"]) == (400, 40060)
