"""A `DiscordPort` over REST alone, for processes that hold no gateway (the Celery worker).

discord.py works without a gateway once logged in: `Client.login` sets up its HTTP client and
the bot user, and channels, messages and history are fetched over REST with the library's own
rate-limit handling. `rest_discord` logs in, hands out a `RestDiscordAdapter` (the gateway
adapter with an empty cache, so every history read is a REST read) and closes the HTTP session
afterwards.

What differs from the gateway adapter: there is no gateway cache (`cache_view` is empty) and no
member cache, so `names` knows only what `load_directory` fetched (the guild's channel and role
names); members are named by their messages' own author payloads. Who spoke which persona
message comes from the message index, as for the gateway adapter's REST reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence

import discord

from chat.gateway.adapter import DiscordAdapter
from chat.gateway.endpoints import configure_discord_endpoints
from chat.pipeline.types import NameDirectory


class RestDiscordAdapter(DiscordAdapter):
    """`DiscordAdapter` for a logged-in client that never connects to the gateway."""

    def __init__(self, client: discord.Client) -> None:
        super().__init__(client)
        self._channel_names: dict[int, dict[int, str]] = {}
        self._role_names: dict[int, dict[int, str]] = {}

    async def load_directory(self, guild_id: int) -> None:
        """Fetch the guild's channel and role names over REST (once per guild); a failure
        leaves them unknown (mentions then render as neutral placeholders)."""
        if guild_id in self._channel_names:
            return
        try:
            guild = await self._client.fetch_guild(guild_id)
            channels = await guild.fetch_channels()
        except discord.HTTPException:
            return
        self._channel_names[guild_id] = {c.id: c.name for c in channels}
        self._role_names[guild_id] = {r.id: r.name for r in guild.roles}

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        if guild_id is None:
            return NameDirectory()
        return NameDirectory(
            channels=self._channel_names.get(guild_id, {}),
            roles=self._role_names.get(guild_id, {}),
        )


@contextlib.asynccontextmanager
async def rest_discord(
    *,
    token: str,
    api_base: str,
    main_persona_name: Mapping[int | None, str] | None = None,
) -> AsyncIterator[RestDiscordAdapter]:
    """Log in over REST at ``api_base`` and yield the adapter; the HTTP session closes on exit.

    ``main_persona_name`` (per guild id) names the persona behind the bot account's messages
    that the message index does not know. Raises
    `discord.LoginFailure` for a bad token and `discord.HTTPException` when Discord cannot be
    reached.
    """
    configure_discord_endpoints(api_base=api_base, gateway_url=None)
    client = discord.Client(intents=discord.Intents.default())
    try:
        await client.login(token)
        adapter = RestDiscordAdapter(client)
        adapter.main_persona_name.update(main_persona_name or {})
        yield adapter
    finally:
        await client.close()
