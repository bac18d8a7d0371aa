"""Discord's final refusals become one message naming the cause and the fix; anything else is
left to discord.py's reconnects."""

from __future__ import annotations

from types import SimpleNamespace

import discord
import pytest

from chat.gateway.client import bot_intents
from chat.gateway.stops import client_stop, gateway_stop

INTENTS = bot_intents().value
ALL_FLAGS = (1 << 12) | (1 << 14) | (1 << 18)
NO_CONTENT = ALL_FLAGS & ~(1 << 18)


def closed(code: int) -> discord.ConnectionClosed:
    return discord.ConnectionClosed(SimpleNamespace(close_code=code), shard_id=0)


def test_a_refused_token_at_login_names_discord_token():
    stop = gateway_stop(
        discord.LoginFailure("Improper token"), application_flags=0, intents=INTENTS
    )

    assert str(stop).startswith("Discord refused DISCORD_TOKEN (401 Unauthorized): copy")
    assert "Bot → Reset Token into DISCORD_TOKEN" in str(stop)


@pytest.mark.parametrize(
    "error", [discord.PrivilegedIntentsRequired(0), closed(4014)], ids=["raised", "close 4014"]
)
def test_a_4014_names_the_intent_the_application_does_not_allow(error):
    stop = gateway_stop(error, application_flags=NO_CONTENT, intents=INTENTS)

    assert str(stop) == (
        "Discord closed the gateway with 4014 (disallowed intents): the application does not "
        "allow the Message Content intent the bot asks for: switch on Message Content Intent in "
        "the Developer Portal (https://discord.com/developers/applications) → your application "
        "→ Bot → Privileged Gateway Intents, then Save Changes, and start the worker again"
    )


def test_a_4014_with_both_intents_off_names_both():
    stop = gateway_stop(closed(4014), application_flags=0, intents=INTENTS)

    assert "allow the Server Members and Message Content intents" in str(stop)
    assert "switch on Server Members Intent and Message Content Intent" in str(stop)


def test_a_4004_close_says_the_token_was_reset():
    stop = gateway_stop(closed(4004), application_flags=ALL_FLAGS, intents=INTENTS)

    assert str(stop).startswith("Discord closed the gateway with 4004 (authentication failed)")
    assert "Reset Token" in str(stop)


@pytest.mark.parametrize(
    "error", [closed(4000), closed(1006), RuntimeError("boom")], ids=["4000", "1006", "other"]
)
def test_anything_else_is_not_a_stop(error):
    assert gateway_stop(error, application_flags=ALL_FLAGS, intents=INTENTS) is None


async def test_a_client_that_never_logged_in_still_gets_its_stop():
    client = discord.Client(intents=bot_intents())  # no application flags yet

    stop = client_stop(discord.LoginFailure("Improper token"), client=client)

    assert str(stop).startswith("Discord refused DISCORD_TOKEN")
