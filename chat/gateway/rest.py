"""A `DiscordPort` over REST alone, for processes that hold no gateway: the Celery worker's
memory maintenance and the dashboard's prompt preview, replay and "why (not)?".

discord.py works without a gateway once logged in: `Client.login` sets up its HTTP client and
the bot user, and channels, messages and history are fetched over REST with the library's own
rate-limit handling. `rest_discord` logs in, hands out a `RestDiscordAdapter` (the gateway
adapter with an empty cache, so every history read is a REST read, converted by the same code
the worker uses) and closes the HTTP session afterwards. `rest_port` is the same for callers
that know only the settings and want one clear error when there is no Discord to read.

`chat.runtime` builds it for Celery and the dashboard (which never import ``chat/gateway/``
themselves): it shares no state with the worker.

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
from chat.ports import DiscordUnavailable, RestDiscordPort


class RestDiscordAdapter(DiscordAdapter):
    """`DiscordAdapter` for a logged-in client that never connects to the gateway."""

    def __init__(self, client: discord.Client) -> None:
        super().__init__(client)
        self._channel_names: dict[int, dict[int, str]] = {}
        self._role_names: dict[int, dict[int, str]] = {}
        self._stickers: dict[int, list[tuple[int, str]]] = {}

    async def load_directory(self, guild_id: int) -> None:
        """Fetch the guild's channel and role names and its stickers over REST (once per
        guild); a failure leaves them unknown (mentions then render as neutral placeholders,
        and the guild has no stickers)."""
        if guild_id in self._channel_names:
            return
        try:
            guild = await self._client.fetch_guild(guild_id)
            channels = await guild.fetch_channels()
        except discord.HTTPException:
            return
        self._channel_names[guild_id] = {c.id: c.name for c in channels}
        self._role_names[guild_id] = {r.id: r.name for r in guild.roles}
        self._stickers[guild_id] = [(s.id, s.name) for s in guild.stickers if s.available]

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        return list(self._stickers.get(guild_id, ()))

    async def member_name(self, *, guild_id: int, user_id: int) -> str | None:
        """The name Discord shows for ``user_id`` in the guild (nick, else global name, else
        user name) over REST; None when the user cannot be read."""
        try:
            guild = await self._client.fetch_guild(guild_id, with_counts=False)
            member = await guild.fetch_member(user_id)
        except (discord.HTTPException, discord.ClientException):
            try:
                user = await self._client.fetch_user(user_id)
            except discord.HTTPException:
                return None
            return user.display_name
        return member.display_name

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
    webhook_ids: frozenset[int] = frozenset(),
    gateway_url: str | None = None,
) -> AsyncIterator[RestDiscordAdapter]:
    """Log in over REST at ``api_base`` and yield the adapter; the HTTP session closes on exit.

    ``main_persona_name`` (per guild id) names the persona behind the bot account's messages
    that the message index does not know. Raises
    `discord.LoginFailure` for a bad token and `discord.HTTPException` when Discord cannot be
    reached.
    """
    configure_discord_endpoints(api_base=api_base, gateway_url=gateway_url)
    client = discord.Client(intents=discord.Intents.default())
    try:
        await client.login(token)
        adapter = RestDiscordAdapter(client)
        adapter.main_persona_name.update(main_persona_name or {})
        adapter.webhook_ids.update(webhook_ids)
        yield adapter
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def rest_port(
    *,
    token: str,
    api_base: str,
    gateway_url: str | None,
    webhook_ids: frozenset[int] = frozenset(),
    main_persona_names: Mapping[int | None, str] = {},
) -> AsyncIterator[RestDiscordAdapter]:
    """`rest_discord` for callers holding the settings. ``webhook_ids`` (this bot's persona
    webhooks) and ``main_persona_names`` (guild id → the persona behind the bot account) are
    what the worker knows, read from the database; history read here is attributed from the
    message index, as the worker's REST reads are.

    Raises `DiscordUnavailable` when ``token`` is empty or Discord refuses the login.
    """
    if not token:
        raise DiscordUnavailable("DISCORD_TOKEN is not set: there is no Discord to read")
    try:
        opened = rest_discord(
            token=token,
            api_base=api_base,
            gateway_url=gateway_url or None,
            main_persona_name=main_persona_names,
            webhook_ids=webhook_ids,
        )
        adapter = await opened.__aenter__()
    except (discord.HTTPException, OSError) as error:
        raise DiscordUnavailable(f"could not log in to Discord: {error}") from None
    try:
        yield adapter
    finally:
        await opened.__aexit__(None, None, None)


def _rest_adapter_is_a_port(adapter: RestDiscordAdapter) -> RestDiscordPort:
    return adapter  # the type checker holds the REST port to its protocol
