"""Logging in with the real discord.py client: READY, GUILD_CREATE, member chunking, intents."""

from __future__ import annotations

import datetime as dt

import discord
import pytest

from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RecordingClient, full_intents, running


async def test_login_resolves_guild_channels_and_members(bot: RecordingClient) -> None:
    assert bot.user is not None and bot.user.id == DEMO_BOT_ID
    assert bot.application_id == DEMO_BOT_ID
    guild = bot.get_guild(DEMO_GUILD_ID)
    assert guild is not None and guild.name == "Sandbox Café"
    assert [c.name for c in guild.text_channels] == [
        "general",
        "poetry",
        "autonomous",
        "after-dark",
    ]
    general = bot.get_channel(DEMO_CHANNEL_IDS["general"])
    assert isinstance(general, discord.TextChannel) and general.guild == guild
    assert [c.name for c in guild.text_channels if c.is_nsfw()] == ["after-dark"]
    assert {m.name for m in guild.members} == {"Tomori", "alice", "bob", "carol"}
    assert guild.chunked
    assert guild.me.guild_permissions.administrator


async def test_user_message_reaches_on_message_with_its_member_author(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sent = server.sandbox.user_says(DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["alice"], "hi")

    message = await bot.next_event("message")
    assert message.id == int(sent["id"])
    assert message.content == "hi"
    assert isinstance(message.author, discord.Member)
    assert message.author.id == DEMO_USER_IDS["alice"]
    assert message.author.display_name == "Alice"
    assert message.channel.id == DEMO_CHANNEL_IDS["general"]
    # Compared as times: isoformat() drops the fraction when the id falls on a whole second.
    assert message.created_at == dt.datetime.fromisoformat(sent["timestamp"])


async def test_wrong_token_fails_login_without_opening_a_session(server: SandboxServer) -> None:
    client = RecordingClient()
    with pytest.raises(discord.LoginFailure):
        async with running(client, "not-the-token"):
            pass
    assert client.is_closed()
    assert server.sessions() == []


@pytest.mark.parametrize(
    ("content", "visible"),
    [
        ("just chatting", ""),
        (f"hey <@{DEMO_BOT_ID}> look", f"hey <@{DEMO_BOT_ID}> look"),
    ],
)
async def test_without_message_content_intent_only_mentions_keep_their_content(
    server: SandboxServer, content: str, visible: str
) -> None:
    intents = full_intents()
    intents.message_content = False
    async with running(RecordingClient(intents=intents), server.token) as client:
        server.sandbox.user_says(DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["bob"], content)
        message = await client.next_event("message")
    assert message.content == visible
    assert server.sandbox.channel_messages(DEMO_CHANNEL_IDS["general"])[0]["content"] == content


async def test_without_the_messages_intent_no_message_events_arrive(server: SandboxServer) -> None:
    intents = full_intents()
    intents.messages = False
    async with running(RecordingClient(intents=intents), server.token) as client:
        server.sandbox.user_says(DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["bob"], "unseen")
        server.sandbox.user_reacts(
            DEMO_CHANNEL_IDS["general"],
            int(server.sandbox.channel_messages(DEMO_CHANNEL_IDS["general"])[0]["id"]),
            DEMO_USER_IDS["bob"],
            "👀",
        )
        await client.next_event("raw_reaction_add")
    assert client.received["message"].empty()


async def test_guilds_channels_and_members_added_later_reach_the_client(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sandbox = server.sandbox
    guild_id = sandbox.add_guild("Late Night")
    joined = await bot.next_event("guild_join")
    channel_id = sandbox.add_text_channel(guild_id, "insomnia")
    created = await bot.next_event("guild_channel_create")
    sandbox.add_member(guild_id, DEMO_USER_IDS["carol"], nick="Caz")
    member = await bot.next_event("member_join")

    assert (joined.id, joined.name, joined.me.id) == (guild_id, "Late Night", DEMO_BOT_ID)
    assert (created.id, created.name, created.guild.id) == (channel_id, "insomnia", guild_id)
    assert (member.id, member.display_name, member.guild.id) == (
        DEMO_USER_IDS["carol"],
        "Caz",
        guild_id,
    )
    sandbox.user_says(channel_id, DEMO_USER_IDS["carol"], "anyone up?")
    message = await bot.next_event("message")
    assert message.channel == bot.get_channel(channel_id)
    assert message.author == member
