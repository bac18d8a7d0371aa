"""The REST-only `DiscordPort` (the Celery worker's view of Discord) against the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator

import discord
import pytest

from chat.gateway.endpoints import DISCORD_API_BASE, configure_discord_endpoints
from chat.gateway.rest import rest_discord
from chat.models import MessageIndex
from chat.ports import ChannelPlace
from chat.sandbox import SandboxServer
from chat.sandbox.demo import (
    DEMO_BOT_ID,
    DEMO_CHANNEL_IDS,
    DEMO_GUILD_ID,
    DEMO_USER_IDS,
    demo_sandbox,
)
from personas.models import GuildConfig, Persona

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]


@pytest.fixture
async def server() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(demo_sandbox()) as server:
        try:
            yield server
        finally:
            configure_discord_endpoints(api_base=DISCORD_API_BASE, gateway_url=None)


@pytest.mark.django_db(transaction=True)
async def test_history_messages_and_places_are_read_over_rest(server: SandboxServer):
    first = server.sandbox.user_says(GENERAL, ALICE, f"hello <#{GENERAL}>")
    second = server.sandbox.user_says(GENERAL, ALICE, "second line")

    async with rest_discord(
        token=server.token,
        api_base=server.api_base,
        main_persona_name={DEMO_GUILD_ID: "Tomori"},
    ) as port:
        await port.load_directory(DEMO_GUILD_ID)
        history = await port.fetch_history(GENERAL, 10)
        one = await port.fetch_message(GENERAL, int(first["id"]))
        missing = await port.fetch_message(GENERAL, int(second["id"]) + 10**9)
        place = await port.locate_channel(GENERAL)
        names = port.names(DEMO_GUILD_ID, [ALICE])
        cached = port.cache_view(GENERAL)
        bot_user_id = port.bot_user_id

    assert [m.id for m in history] == [int(second["id"]), int(first["id"])]
    assert [(m.author.id, m.author.display_name) for m in history][1] == (ALICE, "Alice")
    assert one is not None and one.content == first["content"]
    assert missing is None
    assert place == ChannelPlace(DEMO_GUILD_ID)
    assert names.channels[GENERAL] == "general"
    assert cached.messages == ()
    assert bot_user_id == DEMO_BOT_ID


@pytest.mark.django_db(transaction=True)
async def test_the_bot_accounts_messages_are_the_main_personas(server: SandboxServer):
    sent = server.sandbox.create_message(GENERAL, author_id=DEMO_BOT_ID, content="hi all")

    async with rest_discord(
        token=server.token, api_base=server.api_base, main_persona_name={DEMO_GUILD_ID: "Tomori"}
    ) as port:
        [message] = await port.fetch_history(GENERAL, 1)

    assert (message.id, message.author.persona_name) == (int(sent["id"]), "Tomori")


@pytest.mark.django_db(transaction=True)
async def test_a_delivery_in_the_message_index_is_its_personas_whoever_is_main_now(
    server: SandboxServer,
):
    guild = await GuildConfig.objects.acreate(guild_id=DEMO_GUILD_ID, name="Sandbox Café")
    lilya = await Persona.objects.acreate(guild=guild, name="Lilya")
    earlier = server.sandbox.create_message(GENERAL, author_id=DEMO_BOT_ID, content="I was Lilya")
    await MessageIndex.objects.acreate(
        message_id=int(earlier["id"]), channel_id=GENERAL, guild_id=DEMO_GUILD_ID, persona=lilya
    )
    later = server.sandbox.create_message(GENERAL, author_id=DEMO_BOT_ID, content="and now?")

    async with rest_discord(
        token=server.token, api_base=server.api_base, main_persona_name={DEMO_GUILD_ID: "Tomori"}
    ) as port:
        history = await port.fetch_history(GENERAL, 2)
        one = await port.fetch_message(GENERAL, int(earlier["id"]))

    assert {m.id: m.author.persona_name for m in history} == {
        int(earlier["id"]): "Lilya",
        int(later["id"]): "Tomori",
    }
    assert one is not None and one.author.persona_name == "Lilya"


async def test_a_bad_token_fails_at_login(server: SandboxServer):
    with pytest.raises(discord.LoginFailure):
        async with rest_discord(token="not-the-token", api_base=server.api_base):
            pass
