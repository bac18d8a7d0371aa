"""Refusals no reconnect can fix: the worker stops at once and says what to change.

Discord refuses a bot for good in three ways the worker can meet at start: a REST 401 at login
(the token is wrong), a gateway close 4004 (authentication failed: the token was reset, which
Discord also does to a bot past its daily session starts) and a gateway close 4014 (the bot
asked for a privileged intent its application does not allow). discord.py raises for each
(`discord.LoginFailure`, `discord.ConnectionClosed`, `discord.PrivilegedIntentsRequired`);
`gateway_stop` turns them into one `GatewayStop` whose message names the cause and the fix,
for ``runbot`` to print before it exits non-zero.
"""

from __future__ import annotations

import discord

from chat.pipeline.going_live import (
    DEVELOPER_PORTAL,
    INTENTS_SCREEN,
    PRIVILEGED_INTENTS,
    intents_not_enabled,
)

AUTHENTICATION_FAILED = 4004
DISALLOWED_INTENTS = 4014
TOKEN_FIX = (
    f"copy the bot's token from the Developer Portal ({DEVELOPER_PORTAL}) → your application → "
    "Bot → Reset Token into DISCORD_TOKEN, and start the worker again"
)


class GatewayStop(Exception):
    """Discord refused the bot for good; the message names the cause and the fix."""


def gateway_stop(
    error: BaseException, *, application_flags: int, intents: int
) -> GatewayStop | None:
    """The `GatewayStop` for ``error`` (what ``client.start`` raised), or None when it is not
    one of Discord's final refusals. ``application_flags`` are what Discord said of the
    application at login, ``intents`` what the client asked for."""
    if isinstance(error, discord.LoginFailure):
        return GatewayStop(f"Discord refused DISCORD_TOKEN (401 Unauthorized): {TOKEN_FIX}")
    if isinstance(error, discord.PrivilegedIntentsRequired) or (
        isinstance(error, discord.ConnectionClosed) and error.code == DISALLOWED_INTENTS
    ):
        return _intents_stop(application_flags, intents)
    if isinstance(error, discord.ConnectionClosed) and error.code == AUTHENTICATION_FAILED:
        return GatewayStop(
            "Discord closed the gateway with 4004 (authentication failed): the token was reset "
            "after the worker logged in (Discord also resets the token of a bot past its daily "
            f"session starts): {TOKEN_FIX}"
        )
    return None


def client_stop(error: BaseException, *, client: discord.Client) -> GatewayStop | None:
    """`gateway_stop` for what ``client.start`` raised, with the application flags Discord gave
    at login (none when the login itself failed)."""
    flags = client.application_flags
    return gateway_stop(
        error,
        application_flags=flags.value if isinstance(flags, discord.ApplicationFlags) else 0,
        intents=client.intents.value,
    )


def _intents_stop(application_flags: int, intents: int) -> GatewayStop:
    """4014: name the privileged intents the application does not allow (from the flags
    Discord gave at login), each with its switch."""
    missing = intents_not_enabled(application_flags=application_flags, intents=intents)
    if not missing:  # the flags said yes, Discord said no: name every one the bot asks for
        missing = [p for p in PRIVILEGED_INTENTS if intents & p.intent]
    names = " and ".join(p.name for p in missing)
    switches = " and ".join(p.switch for p in missing)
    plural = "s" if len(missing) > 1 else ""
    return GatewayStop(
        "Discord closed the gateway with 4014 (disallowed intents): the application does not "
        f"allow the {names} intent{plural} the bot asks for: switch on {switches} in "
        f"{INTENTS_SCREEN}, then Save Changes, and start the worker again"
    )
