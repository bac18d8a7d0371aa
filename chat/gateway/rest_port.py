"""A REST-only `DiscordPort` for processes that read Discord without holding the gateway.

The dashboard's prompt preview needs the history a turn would read, without a gateway
connection of its own (the worker holds the shards): a discord.py client that has only logged
in (no ``connect``) serves REST reads through the same `DiscordAdapter` the worker uses, so the
history it reads is converted by the same code. Its gateway cache is simply empty, so every
window is a REST read; sending is possible but nothing here does it.

This is the one module of ``chat/gateway/`` the dashboard may import (see
``chat/tests/test_import_graph.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import discord

from chat.gateway.adapter import DiscordAdapter
from chat.gateway.endpoints import configure_discord_endpoints


class DiscordUnavailable(Exception):
    """No Discord to read: no token is configured, or logging in failed."""


@contextlib.asynccontextmanager
async def rest_port(
    *,
    token: str,
    api_base: str,
    gateway_url: str | None,
    persona_names: Mapping[int, str] = {},
    webhook_ids: frozenset[int] = frozenset(),
    main_persona_names: Mapping[int | None, str] = {},
) -> AsyncIterator[DiscordAdapter]:
    """A logged-in, never-connected client's `DiscordAdapter`; closed on exit.

    ``persona_names`` (delivered message id → persona), ``webhook_ids`` (this bot's persona
    webhooks) and ``main_persona_names`` (guild id → the persona behind the bot account) are
    what the worker's adapter learned by delivering; the caller reads them from the database
    so history is attributed the way the worker attributes it.

    Raises `DiscordUnavailable` when ``token`` is empty or Discord refuses the login.
    """
    if not token:
        raise DiscordUnavailable("DISCORD_TOKEN is not set: there is no Discord to read")
    configure_discord_endpoints(api_base=api_base, gateway_url=gateway_url or None)
    client = discord.Client(intents=discord.Intents.none())
    try:
        try:
            await client.login(token)
        except (discord.HTTPException, OSError) as error:
            raise DiscordUnavailable(f"could not log in to Discord: {error}") from None
        adapter = DiscordAdapter(client)
        adapter.persona_names.update(persona_names)
        adapter.webhook_ids.update(webhook_ids)
        adapter.main_persona_name.update(main_persona_names)
        yield adapter
    finally:
        await client.close()


async def fetch_member_name(adapter: DiscordAdapter, *, guild_id: int, user_id: int) -> str | None:
    """The name Discord shows for ``user_id`` in the guild (nick, else global name, else user
    name) over REST; None when the user cannot be read."""
    client = adapter.client
    try:
        guild = await client.fetch_guild(guild_id, with_counts=False)
        member = await guild.fetch_member(user_id)
    except (discord.HTTPException, discord.ClientException):
        try:
            user = await client.fetch_user(user_id)
        except discord.HTTPException:
            return None
        return user.display_name
    return member.display_name
